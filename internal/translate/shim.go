package translate

import (
	"net/netip"
	"slices"

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
		if filtered, allowed := b.sources.forFamily(fe.addr.Is6()); filtered {
			b.entry(shim.Entry(shim.Firewall, fe.addr, p.proto, fe.port))
			for _, r := range allowed {
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
			if ep.on(b.cfg.NodeName) {
				b.entry(shim.LoopBackEntry(p.proto, ep.addr))
			}
		}
	}
}

func (b *builder) entry(e model.SetEntry) { b.entries[e] = struct{}{} }

// healthCheck returns the Service's health check, nil when it has none.
func (b *builder) healthCheck() *HealthCheck {
	port := b.svc.Spec.HealthCheckNodePort
	if port <= 0 || port > 65535 || b.svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
		return nil
	}
	local := map[netip.Addr]bool{}
	for _, eps := range b.endpoints {
		for _, ep := range eps {
			if ep.ready && ep.on(b.cfg.NodeName) {
				local[ep.addr.Addr()] = true
			}
		}
	}
	return &HealthCheck{Port: uint16(port), Service: b.name, LocalEndpoints: len(local)}
}
