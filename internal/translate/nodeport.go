package translate

import (
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// NodePortPrimary, in the NodePort addresses, selects the Node object's
// primary addresses (the default, as in kube-proxy since v1.31).
const NodePortPrimary = "primary"

// CheckNodePortAddress explains why an entry of the NodePort addresses is
// neither NodePortPrimary nor a CIDR, nil if it is one. The agent's flag
// validation uses it, so that what it accepts is what NodePortAddrs reads.
func CheckNodePortAddress(a string) error {
	if a == NodePortPrimary {
		return nil
	}
	if _, err := netip.ParsePrefix(a); err != nil {
		return fmt.Errorf("%q is neither %q nor a CIDR", a, NodePortPrimary)
	}
	return nil
}

// NodePortAddrs picks the node addresses NodePorts listen on, filtered by
// enabled families, sorted and deduped:
//   - "primary" is the Node's primary address of each family, chosen as
//     kube-proxy does (GetNodeHostIPs): the first InternalIP, else the first
//     ExternalIP, of each family;
//   - a CIDR selects the HostAddrs inside it;
//   - an empty list means every HostAddr (kube-proxy's historical default).
func NodePortAddrs(node *corev1.Node, cfg Config) []netip.Addr {
	var out []netip.Addr
	if len(cfg.NodePortAddresses) == 0 {
		out = append(out, cfg.HostAddrs...)
	}
	for _, spec := range cfg.NodePortAddresses {
		if spec == NodePortPrimary {
			out = append(out, primaryAddrs(node)...)
			continue
		}
		prefix, err := netip.ParsePrefix(spec)
		if err != nil {
			continue // CheckNodePortAddress rejects it before we get here
		}
		for _, a := range cfg.HostAddrs {
			if prefix.Contains(a.Unmap()) {
				out = append(out, a)
			}
		}
	}
	return cleanAddrs(out, cfg)
}

// primaryAddrs is the Node's primary address per family: InternalIPs are
// preferred to ExternalIPs, and the first of each family wins.
func primaryAddrs(node *corev1.Node) []netip.Addr {
	if node == nil {
		return nil
	}
	var v4, v6 netip.Addr
	for _, typ := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, na := range node.Status.Addresses {
			a, err := netip.ParseAddr(na.Address)
			if na.Type != typ || err != nil {
				continue
			}
			a = a.Unmap()
			if a.Is4() && !v4.IsValid() {
				v4 = a
			} else if a.Is6() && !v6.IsValid() {
				v6 = a
			}
		}
	}
	return slices.DeleteFunc([]netip.Addr{v4, v6}, func(a netip.Addr) bool { return !a.IsValid() })
}

// cleanAddrs unmaps, drops disabled families and zoned or invalid addresses,
// sorts and dedupes.
func cleanAddrs(in []netip.Addr, cfg Config) []netip.Addr {
	out := make([]netip.Addr, 0, len(in))
	for _, a := range in {
		a = a.Unmap()
		if !a.IsValid() || a.Zone() != "" || !cfg.Families.Has(a) {
			continue // a zoned (link-local) address cannot key an IPVS service
		}
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}
