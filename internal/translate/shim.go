package translate

import (
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// HealthCheck is a Service's health-check node port (externalTrafficPolicy
// Local): every node answers on it whether it has local endpoints, so that
// an external load balancer only sends traffic to nodes that do.
type HealthCheck struct {
	Port    uint16
	Service model.ServiceName
	// LocalEndpoints counts this node's ready endpoints (distinct addresses).
	LocalEndpoints int
}

// annotationSourceRanges is the older way to give loadBalancerSourceRanges;
// kube-proxy reads it when the field is empty.
const annotationSourceRanges = "service.beta.kubernetes.io/load-balancer-source-ranges"

// frontendEntries adds the set members one frontend needs (see package
// shim for what each set does).
func (b *builder) frontendEntries(fe frontend, p servicePort, reals []model.RealServer) {
	b.entry(shim.Entry(shim.Frontends, fe.addr, p.proto, fe.port))
	switch {
	case fe.kind == KindClusterIP:
		b.entry(shim.Entry(shim.ClusterIP, fe.addr, p.proto, fe.port))
	case !b.localPolicy(fe.kind):
		b.entry(shim.Entry(shim.External, fe.addr, p.proto, fe.port))
	}
	if fe.kind.HasSourceRanges() {
		if ranges := b.sourceRanges(fe.addr.Is6()); len(ranges) > 0 {
			b.entry(shim.Entry(shim.Firewall, fe.addr, p.proto, fe.port))
			for _, r := range ranges {
				b.entry(shim.SourceRangeEntry(fe.addr, p.proto, fe.port, r))
			}
		}
	}
	if !slices.ContainsFunc(reals, func(r model.RealServer) bool { return r.Weight > 0 }) {
		b.entry(shim.Entry(shim.NoEndpoints, fe.addr, p.proto, fe.port))
	}
}

// loopBackEntries adds the hairpin members of a port's endpoints on this
// node. An endpoint without a node name (hand-written manifests) may be
// local, so it counts as local: a needless member costs nothing.
func (b *builder) loopBackEntries(p servicePort) {
	for _, v6 := range []bool{false, true} {
		for _, ep := range b.endpoints[portKey{name: p.name, proto: p.proto, v6: v6}] {
			if ep.nodeName == "" || ep.nodeName == b.cfg.NodeName {
				b.entry(shim.LoopBackEntry(p.proto, ep.addr))
			}
		}
	}
}

func (b *builder) entry(e model.SetEntry) { b.entries[e] = struct{}{} }

// sourceRanges are the Service's allowed client ranges of a family:
// spec.loadBalancerSourceRanges, else the older annotation. Unparsable
// ranges are skipped (the API server validates the field).
func (b *builder) sourceRanges(v6 bool) []netip.Prefix {
	list := b.svc.Spec.LoadBalancerSourceRanges
	if len(list) == 0 {
		if a := b.svc.Annotations[annotationSourceRanges]; a != "" {
			list = strings.Split(a, ",")
		}
	}
	var out []netip.Prefix
	for _, s := range list {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil || p.Addr().Is6() != v6 {
			continue
		}
		out = append(out, p.Masked())
	}
	return out
}

// healthCheck returns the Service's health check, nil when it has none.
func (b *builder) healthCheck() *HealthCheck {
	port := b.svc.Spec.HealthCheckNodePort
	if port <= 0 || port > 65535 || b.svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
		return nil
	}
	local := map[netip.Addr]bool{}
	for _, eps := range b.endpoints {
		for _, ep := range eps {
			if ep.ready && b.cfg.NodeName != "" && ep.nodeName == b.cfg.NodeName {
				local[ep.addr.Addr()] = true
			}
		}
	}
	return &HealthCheck{Port: uint16(port), Service: b.name, LocalEndpoints: len(local)}
}
