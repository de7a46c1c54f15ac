package translate

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// NodePodCIDRs are the pod CIDRs of a Node (spec.podCIDRs, else the older
// spec.podCIDR), the first of each family, as kube-proxy's NodeCIDR local
// traffic detector takes them; those that do not parse are skipped.
func NodePodCIDRs(node *corev1.Node) []netip.Prefix {
	if node == nil {
		return nil
	}
	cidrs := node.Spec.PodCIDRs
	if len(cidrs) == 0 && node.Spec.PodCIDR != "" {
		cidrs = []string{node.Spec.PodCIDR}
	}
	var v4, v6 netip.Prefix
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			continue
		}
		p = p.Masked()
		if p.Addr().Is4() && !v4.IsValid() {
			v4 = p
		} else if p.Addr().Is6() && !v6.IsValid() {
			v6 = p
		}
	}
	var out []netip.Prefix
	for _, p := range []netip.Prefix{v4, v6} {
		if p.IsValid() {
			out = append(out, p)
		}
	}
	return out
}
