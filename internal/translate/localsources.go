package translate

import (
	"hash/fnv"
	"net/netip"
	"slices"
	"strconv"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// KindLocalSources is the firewall-mark virtual server that serves the
// Local-policy frontends of one Service port and family to this node's
// pods and to the node itself, from every endpoint (see localSources).
const KindLocalSources FrontendKind = "LocalSources"

// servesLocalSources tells whether a frontend kind, under
// externalTrafficPolicy Local, serves pods and the node from every
// endpoint: load-balancer IPs, external IPs and NodePorts, as kube-proxy's
// iptables and nftables modes route every "external destination" of such
// a Service (their KUBE-EXT chain) for local sources.
func (k FrontendKind) servesLocalSources() bool {
	return k == KindLoadBalancer || k == KindExternalIP || k == KindNodePort
}

// localSources adds, for a port whose externalTrafficPolicy is Local, what
// serves its Local frontends (fes, of one family) to this node's pods and
// to the node itself from every endpoint, as kube-proxy's iptables and
// nftables modes do ("short-circuit pod traffic", "short-circuit local
// traffic"): a firewall-mark virtual server with the real servers a
// Cluster policy would choose, and per frontend a LocalSources member
// giving their connections its mark. Everyone else keeps this node's
// endpoints. When the cluster has no usable endpoint either, it adds
// nothing: the frontends' no-endpoints members reject everyone at once.
func (b *builder) localSources(p servicePort, v6 bool, fes []frontend, endpoints []Endpoint) {
	if len(fes) == 0 {
		return
	}
	eps := b.endpoints[portKey{name: p.name, proto: p.proto, v6: v6}]
	rs := selectReals(eps, false, b.cfg.NodeName, b.zone)
	if !slices.ContainsFunc(rs, func(r model.RealServer) bool { return r.Weight > 0 }) {
		return
	}
	family := netip.IPv4Unspecified()
	if v6 {
		family = netip.IPv6Unspecified()
	}
	key := model.VSKey{FWMark: LocalSourcesMark(b.name, p.name, p.proto, v6, b.cfg.MasqueradeMark), Addr: family}
	if _, dup := b.services[key]; dup {
		return
	}
	b.services[key] = b.newService(key, rs)
	b.meta[key] = VSMeta{
		Service:       b.name,
		PortName:      p.name,
		Kind:          KindLocalSources,
		SchedulerFrom: b.opts.schedulerFrom,
		DrainTimeout:  b.opts.drainTimeout,
		Endpoints:     endpoints,
	}
	for _, fe := range fes {
		b.entry(shim.LocalSourceEntry(fe.addr, p.proto, fe.port, key.FWMark))
	}
}

// LocalSourcesMark is the firewall mark of a Service port's LocalSources
// virtual server in a family: a hash of the Service, port, protocol and
// family, so that every node and every restart choose the same one without
// keeping any record. It is at least 0x10000, above the small marks
// keepalived configurations number their services with, below 1<<31
// (ipvsadm prints a larger mark as a negative number), and never holds the
// masquerade mark's bit (0: kube-proxy's 0x4000), which would have the
// connection masqueraded. Two Service ports whose marks collide are told
// apart as any two Services claiming one virtual server are: the first
// keeps it, the other's pods and node get its local endpoints only.
func LocalSourcesMark(svc model.ServiceName, port string, proto model.Protocol, v6 bool, masq uint32) uint32 {
	if masq == 0 {
		masq = shim.DefaultMasqueradeMark
	}
	h := fnv.New32a()
	for _, s := range []string{svc.Namespace, svc.Name, port, strconv.Itoa(int(proto)), strconv.FormatBool(v6)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	m := h.Sum32() &^ (masq | 1<<31)
	for bit := 16; m < 1<<16; bit++ {
		m |= 1 << bit &^ masq
	}
	return m
}
