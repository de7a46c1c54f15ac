package translate

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// frontend is one address and port a Service port is reached on.
type frontend struct {
	kind FrontendKind
	addr netip.Addr
	port uint16
}

// frontends lists a Service port's frontends of enabled families, in the
// order that decides which kind wins a shared key: ClusterIPs, external IPs,
// load-balancer ingress IPs, NodePorts.
func frontends(svc *corev1.Service, p servicePort, nodeAddrs []netip.Addr, cfg Config) []frontend {
	var out []frontend
	add := func(kind FrontendKind, addrs []string, port uint16) {
		for _, s := range addrs {
			a, err := netip.ParseAddr(s)
			if err != nil || unservable(a) != "" || !cfg.Families.Has(a) {
				continue // reported by badVIPs
			}
			if kind == KindExternalIP && !cfg.externalIPAllowed(a) {
				continue // reported by externalIPsNotAllowed
			}
			out = append(out, frontend{kind: kind, addr: a.Unmap(), port: port})
		}
	}
	add(KindClusterIP, clusterIPs(svc), p.port)
	add(KindExternalIP, svc.Spec.ExternalIPs, p.port)
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		add(KindLoadBalancer, ingressIPs(svc), p.port)
	}
	if hasNodePort(svc) && p.nodePort != 0 {
		for _, a := range nodeAddrs {
			out = append(out, frontend{kind: KindNodePort, addr: a, port: p.nodePort})
		}
	}
	return out
}

// clusterIPs are spec.clusterIPs, or spec.clusterIP for objects written
// before dual-stack (hand-written manifests often only set that).
func clusterIPs(svc *corev1.Service) []string {
	if len(svc.Spec.ClusterIPs) > 0 {
		return svc.Spec.ClusterIPs
	}
	if svc.Spec.ClusterIP != "" {
		return []string{svc.Spec.ClusterIP}
	}
	return nil
}

// ingressIPs are the load balancer's ingress IPs. An ingress with ipMode
// Proxy is left alone, as kube-proxy does (KEP-1860): the load balancer
// delivers to the node, so binding the IP here would short-circuit it.
func ingressIPs(svc *corev1.Service) []string {
	var out []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP == "" || (in.IPMode != nil && *in.IPMode == corev1.LoadBalancerIPModeProxy) {
			continue
		}
		out = append(out, in.IP)
	}
	return out
}

// hasNodePort tells whether the Service type opens node ports.
func hasNodePort(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer
}

// unservable says why an address cannot be a VIP, "" when it can. Binding
// a loopback address on the agent's link and serving it would capture the
// node's own local traffic (127.0.0.1:10250 is the kubelet); unspecified,
// link-local, multicast and zoned addresses name no single host IPVS can
// serve. The API server refuses most of these in a Service's spec, but not
// in status.loadBalancer.ingress, and objects older than its strict rules
// may still hold them: the node must not trust them.
func unservable(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case a.Zone() != "":
		return "has a zone"
	case a.IsUnspecified():
		return "is unspecified"
	case a.IsLoopback():
		return "is a loopback address"
	case a.IsLinkLocalUnicast():
		return "is link-local"
	case a.IsMulticast():
		return "is multicast"
	}
	return ""
}

// externalIPAllowed tells whether --external-ip-cidrs lets an external
// IP be served: unset, any may be, as with kube-proxy, which leaves
// CVE-2020-8554 (any namespace claiming any address) to the API server's
// DenyServiceExternalIPs admission plugin.
func (cfg Config) externalIPAllowed(a netip.Addr) bool {
	if cfg.ExternalIPCIDRs == nil {
		return true
	}
	a = a.Unmap()
	for _, p := range cfg.ExternalIPCIDRs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// externalIPsNotAllowed reports the Service's external IPs that
// --external-ip-cidrs leaves out, the first few named and the rest
// counted (bounded.go): any user may list thousands; nil when none is.
func externalIPsNotAllowed(svc *corev1.Service, cfg Config) error {
	var r reasons
	for i, s := range svc.Spec.ExternalIPs {
		if a, err := netip.ParseAddr(s); err == nil && unservable(a) == "" && !cfg.externalIPAllowed(a) && !r.over() {
			r.add("spec.externalIPs[%d] %s is outside this node's --external-ip-cidrs: not served", i, quote(s))
		}
	}
	return r.err()
}

// badVIPs reports the Service's addresses that are not served because
// they cannot be VIPs, or do not parse, the first few named and the rest
// counted; nil when there is none.
func badVIPs(svc *corev1.Service) error {
	var r reasons
	check := func(field string, addrs []string) {
		for i, s := range addrs {
			a, err := netip.ParseAddr(s)
			why := unservable(a)
			if err != nil {
				why = "is not an IP address"
			}
			if why != "" && !r.over() {
				r.add("%s[%d] %s %s: not served", field, i, quote(s), why)
			}
		}
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		check("spec.clusterIPs", clusterIPs(svc))
	}
	check("spec.externalIPs", svc.Spec.ExternalIPs)
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		check("status.loadBalancer.ingress", ingressIPs(svc))
	}
	return r.err()
}
