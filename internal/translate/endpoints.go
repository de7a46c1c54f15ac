package translate

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// endpoint is one usable address:port of a Service port, with what the
// selection rules need to know about it.
type endpoint struct {
	addr        netip.AddrPort
	nodeName    string
	pod         string
	ready       bool
	serving     bool
	terminating bool
	zoneHints   []string
	nodeHints   []string
}

// on tells whether the endpoint is on the named node, as kube-proxy's
// IsLocal: an endpoint that names no node is on none, so it is never a
// Local policy's candidate, counted by a health check, or given a hairpin
// member (a hairpin connection has the endpoint's address as its source,
// which only a pod on this node has).
func (ep endpoint) on(node string) bool { return node != "" && ep.nodeName == node }

// portKey matches EndpointSlice ports to Service ports: by name and protocol
// (as kube-proxy's ServicePortName does) and by address family.
type portKey struct {
	name  string
	proto model.Protocol
	v6    bool
}

// endpointIndex holds a Service's endpoints per port, deduped, sorted.
type endpointIndex map[portKey][]endpoint

// collectEndpoints indexes the endpoints of every slice handed to this
// proxy. An endpoint listed in several slices (it moves between slices in
// two steps) counts once, with its best conditions.
//
// The slices' ports are counted first, so that every port's endpoints go
// in their own part of one array made at its size, each part sorted by
// address and folded where equal in place: a Service's ten endpoints cost
// that array and a small map, not a map per port (a cold start translates
// every Service), and one of thousands is not copied again to be sorted.
func collectEndpoints(epSlices []*discoveryv1.EndpointSlice, cfg Config) endpointIndex {
	var keys []portKey
	var counts []int
	eachPort(epSlices, cfg, func(s *discoveryv1.EndpointSlice, key portKey, _ uint16) {
		i := slices.Index(keys, key)
		if i < 0 {
			i = len(keys)
			keys, counts = append(keys, key), append(counts, 0)
		}
		counts[i] += len(s.Endpoints)
	})
	if len(keys) == 0 {
		return endpointIndex{}
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	all := make([]endpoint, total)
	parts := make([][]endpoint, len(keys))
	for i, off := 0, 0; i < len(keys); i++ {
		parts[i], off = all[off:off:off+counts[i]], off+counts[i]
	}
	eachPort(epSlices, cfg, func(s *discoveryv1.EndpointSlice, key portKey, port uint16) {
		i := slices.Index(keys, key)
		for j := range s.Endpoints {
			if ep, ok := newEndpoint(&s.Endpoints[j], port, key.v6, cfg); ok {
				parts[i] = append(parts[i], ep)
			}
		}
	})
	idx := make(endpointIndex, len(keys))
	for i, eps := range parts {
		if len(eps) == 0 {
			continue
		}
		// Stable: of equal copies the first listed is kept unless a later
		// one is better.
		slices.SortStableFunc(eps, func(a, b endpoint) int { return a.addr.Compare(b.addr) })
		kept := eps[:1]
		for _, ep := range eps[1:] {
			if n := len(kept); kept[n-1].addr == ep.addr {
				if better(ep, kept[n-1], cfg.NodeName) {
					kept[n-1] = ep
				}
				continue
			}
			kept = append(kept, ep)
		}
		idx[keys[i]] = kept
	}
	return idx
}

// eachPort calls fn with every usable port of every slice handed to this
// proxy, in order.
func eachPort(epSlices []*discoveryv1.EndpointSlice, cfg Config, fn func(s *discoveryv1.EndpointSlice, key portKey, port uint16)) {
	for _, s := range epSlices {
		if s == nil || !sliceUsable(s, cfg) {
			continue
		}
		for _, p := range s.Ports {
			if key, port, ok := slicePort(s, p); ok {
				fn(s, key, port)
			}
		}
	}
}

// sliceUsable tells whether a slice carries IP endpoints meant for us.
func sliceUsable(s *discoveryv1.EndpointSlice, cfg Config) bool {
	if v, ok := s.Labels[model.LabelServiceProxyName]; ok && v != cfg.ServiceProxyName {
		return false
	}
	switch s.AddressType {
	case discoveryv1.AddressTypeIPv4:
		return cfg.Families.IPv4
	case discoveryv1.AddressTypeIPv6:
		return cfg.Families.IPv6
	}
	return false // FQDN slices name hosts, not addresses IPVS can forward to
}

// slicePort resolves a slice port. A missing name is taken as "" (the name
// of a Service's only, unnamed port), which hand-written manifests rely on;
// a missing or zero port number cannot be forwarded to.
func slicePort(s *discoveryv1.EndpointSlice, p discoveryv1.EndpointPort) (portKey, uint16, bool) {
	if p.Port == nil || *p.Port <= 0 || *p.Port > 65535 {
		return portKey{}, 0, false
	}
	var proto corev1.Protocol
	if p.Protocol != nil {
		proto = *p.Protocol
	}
	mp, err := model.ParseProtocol(string(proto))
	if err != nil {
		return portKey{}, 0, false
	}
	key := portKey{proto: mp, v6: s.AddressType == discoveryv1.AddressTypeIPv6}
	if p.Name != nil {
		key.name = *p.Name
	}
	return key, uint16(*p.Port), true
}

// Conditions reads an endpoint's conditions with their defaults (KEP-1672):
// a nil ready means ready, a nil serving means "same as ready", a nil
// terminating means not terminating.
func Conditions(c discoveryv1.EndpointConditions) (ready, serving, terminating bool) {
	ready = c.Ready == nil || *c.Ready
	serving = ready
	if c.Serving != nil {
		serving = *c.Serving
	}
	return ready, serving, c.Terminating != nil && *c.Terminating
}

// newEndpoint reads one slice endpoint. Like kube-proxy it uses the first
// address only, and drops addresses of the wrong family.
func newEndpoint(e *discoveryv1.Endpoint, port uint16, v6 bool, cfg Config) (endpoint, bool) {
	if len(e.Addresses) == 0 {
		return endpoint{}, false
	}
	a, err := netip.ParseAddr(e.Addresses[0])
	if err != nil {
		return endpoint{}, false
	}
	a = a.Unmap()
	if a.Is6() != v6 || a.Zone() != "" {
		return endpoint{}, false
	}
	ep := endpoint{addr: netip.AddrPortFrom(a, port)}
	ep.ready, ep.serving, ep.terminating = Conditions(e.Conditions)
	if e.NodeName != nil {
		ep.nodeName = *e.NodeName
	}
	if e.TargetRef != nil {
		ep.pod = e.TargetRef.Name
	}
	if h := e.Hints; h != nil {
		for _, z := range h.ForZones {
			ep.zoneHints = append(ep.zoneHints, z.Name)
		}
		for _, n := range h.ForNodes {
			ep.nodeHints = append(ep.nodeHints, n.Name)
		}
	}
	return ep, true
}

// better picks between two copies of one endpoint: the more usable one, then
// the local one (kube-proxy favours local), then the one already held.
func better(ep, old endpoint, nodeName string) bool {
	if r, o := usability(ep), usability(old); r != o {
		return r > o
	}
	return ep.nodeName == nodeName && nodeName != "" && old.nodeName != nodeName
}

// usability ranks conditions: ready, then serving while terminating, then
// terminating, then nothing.
func usability(ep endpoint) int {
	switch {
	case ep.ready:
		return 3
	case ep.serving && ep.terminating:
		return 2
	case ep.terminating:
		return 1
	}
	return 0
}

// endpointsOf exports sorted endpoints for views (VSMeta.Endpoints).
func endpointsOf(eps []endpoint) []Endpoint {
	if len(eps) == 0 {
		return nil
	}
	out := make([]Endpoint, len(eps))
	for i, ep := range eps {
		out[i] = Endpoint{Addr: ep.addr, Pod: ep.pod, Node: ep.nodeName, Ready: ep.ready, Serving: ep.serving, Terminating: ep.terminating}
	}
	return out
}
