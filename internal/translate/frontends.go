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
			if err != nil || !cfg.Families.Has(a) {
				continue // the API server validates these; a bad one cannot be served
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
