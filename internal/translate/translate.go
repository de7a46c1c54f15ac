// Package translate turns one Kubernetes Service, its EndpointSlices and this
// node's Node into the IPVS virtual servers, real servers and VIPs the node
// should hold. Pure: no clients, no clock, no logging, no syscalls. The rules
// follow kube-proxy's IPVS mode (its proxier, topology filtering and
// EndpointSlice cache) so that a node switched over sees no change.
package translate

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// Config is what translation needs from the agent's configuration.
type Config struct {
	NodeName          string
	Scheduler         model.Scheduler // default scheduler (--scheduler)
	NodePortAddresses []string        // CIDRs and/or NodePortPrimary
	HostAddrs         []netip.Addr    // the node's interface addresses (for CIDR NodePort addresses), filled by the caller
	model.Families                    // the families served
	ServiceProxyName  string
	DrainTimeout      time.Duration // default drain timeout (--drain-timeout)
	// MaxFrontends caps the virtual servers of one Service
	// (--max-frontends-per-service; 0: DefaultMaxFrontends).
	MaxFrontends int
	// ExternalIPCIDRs, when set, are the only addresses external IPs are
	// served on (--external-ip-cidrs); nil: any.
	ExternalIPCIDRs []netip.Prefix
	// MasqueradeMark is the shim's masquerade mark (0: the default),
	// which no firewall mark of a LocalSources virtual server may hold.
	MasqueradeMark uint32
}

// FrontendKind is what kind of address a virtual server listens on; it
// decides which traffic policy governs the frontend, whether its address
// is bound on the agent's link, and which shim sets name it.
type FrontendKind string

// Frontend kinds, as VSMeta.Kind names them.
const (
	KindClusterIP    FrontendKind = "ClusterIP"
	KindExternalIP   FrontendKind = "ExternalIP"
	KindLoadBalancer FrontendKind = "LoadBalancer"
	KindNodePort     FrontendKind = "NodePort"
)

// BindsVIP tells whether the frontend's address is bound on the agent's
// link: every kind's but a NodePort's, whose address is the node's own.
func (k FrontendKind) BindsVIP() bool { return k != KindNodePort }

// InternalPolicy tells whether internalTrafficPolicy governs the frontend
// (ClusterIPs); externalTrafficPolicy governs the others.
func (k FrontendKind) InternalPolicy() bool { return k == KindClusterIP }

// HasSourceRanges tells whether loadBalancerSourceRanges filter the
// frontend's clients: load-balancer frontends only, as in kube-proxy.
func (k FrontendKind) HasSourceRanges() bool { return k == KindLoadBalancer }

// Where a virtual server's scheduler came from, as VSMeta.SchedulerFrom names it.
const (
	SchedulerFromFlag       = "flag"
	SchedulerFromAnnotation = "annotation"
)

// VSMeta says where a virtual server comes from and how to treat it.
type VSMeta struct {
	Service       model.ServiceName
	PortName      string
	Kind          FrontendKind
	SchedulerFrom string // "flag" or "annotation"
	DrainTimeout  time.Duration
	// Endpoints are the endpoints of the frontend's port and family, sorted
	// by address: its real servers are chosen among them, so each real
	// server finds the endpoint it stands for here, and so does one that
	// left the choice (draining) while its endpoint is still listed. The
	// frontends of one port share the slice; it must not be changed.
	Endpoints []Endpoint
}

// Endpoint is what is known of the endpoint behind a real server, for
// views: where it runs and its conditions as KEP-1672 defaults them.
type Endpoint struct {
	Addr                        netip.AddrPort
	Pod                         string // the endpoint's target, a Pod's name; "" when none
	Node                        string
	Ready, Serving, Terminating bool
}

// MetaOf returns what is known about the virtual server k of the result.
func (r Result) MetaOf(k model.VSKey) (VSMeta, bool) {
	i, ok := slices.BinarySearchFunc(r.Services, k, func(s *model.Service, k model.VSKey) int { return s.Key.Compare(k) })
	if !ok || i >= len(r.Meta) {
		return VSMeta{}, false
	}
	return r.Meta[i], true
}

// Endpoint finds the endpoint behind a real server.
func (m VSMeta) Endpoint(addr netip.AddrPort) (Endpoint, bool) {
	i, ok := slices.BinarySearchFunc(m.Endpoints, addr, func(e Endpoint, a netip.AddrPort) int { return e.Addr.Compare(a) })
	if !ok {
		return Endpoint{}, false
	}
	return m.Endpoints[i], true
}

// Result is one Service's desired state.
type Result struct {
	Services []*model.Service // sorted by key; each with its Reals
	// Addrs are the VIPs to bind on kube-ipvs0 (ClusterIPs, external IPs, LB
	// ingress IPs; not node addresses), sorted, deduped. Only addresses that
	// carry at least one virtual server are listed: a bound VIP always has
	// its virtual server.
	Addrs []netip.Addr
	// Meta says where each virtual server comes from: Meta[i] is
	// Services[i]'s (see MetaOf). A slice beside them rather than a map of
	// its own: a small map per Service costs buckets the slice does not.
	Meta []VSMeta
	// SetEntries are the members of the shim's ipsets this Service needs,
	// sorted, deduped.
	SetEntries []model.SetEntry
	// HealthCheck is set when the Service has a health-check node port.
	HealthCheck *HealthCheck
	// Skipped is non-empty when the Service is ignored on purpose (headless,
	// other proxy name, type ExternalName) and says why.
	Skipped string
	// Err is non-nil when the Service is invalid (unknown scheduler
	// annotation, bad flags, bad drain-timeout, unknown protocol); Services
	// is then empty. The error names the Service and the cause.
	Err error
	// Warnings are faults in a Service that is still translated, each
	// resolved the safe way (an unreadable source range denies every
	// client, a loopback VIP is not served); each should reach the user as
	// a Warning Event.
	Warnings []error
	// NoLocalEndpoints names the families in which a Local traffic policy
	// leaves a frontend of the Service without endpoints although it has
	// usable ones on other nodes.
	NoLocalEndpoints NoLocal
}

// NoLocal names, per traffic policy, the families in which a Service's
// Local policy finds usable endpoints in the cluster but none on this node:
// Internal for internalTrafficPolicy (ClusterIPs), External for
// externalTrafficPolicy (NodePorts, external and load-balancer IPs). It is
// what kube-proxy counts in sync_proxy_rules_no_local_endpoints_total.
type NoLocal struct {
	Internal, External model.Families
}

// Service translates one Service (svc nil = deleted -> empty Result) with its
// EndpointSlices and this node's Node (may be nil).
func Service(svc *corev1.Service, epSlices []*discoveryv1.EndpointSlice, node *corev1.Node, cfg Config) Result {
	return ServiceWith(svc, epSlices, node, cfg, nil)
}

// ServiceWith is Service reading the endpoints through the Service's memo
// (nil: read every slice), with the same result.
func ServiceWith(svc *corev1.Service, epSlices []*discoveryv1.EndpointSlice, node *corev1.Node, cfg Config, memo *EndpointMemo) Result {
	if svc == nil {
		return Result{}
	}
	name := model.ServiceName{Namespace: svc.Namespace, Name: svc.Name}
	if why := skipReason(svc, cfg); why != "" {
		return Result{Skipped: why}
	}
	opts, err := serviceOptions(svc, cfg)
	if err != nil {
		return Result{Err: fmt.Errorf("service %s: %w", name, err)}
	}
	ports, err := servicePorts(svc)
	if err != nil {
		return Result{Err: fmt.Errorf("service %s: %w", name, err)}
	}
	sources, sourcesErr := sourceRanges(svc)
	b := builder{
		name:      name,
		svc:       svc,
		cfg:       cfg,
		opts:      opts,
		sources:   sources,
		endpoints: endpointsFor(epSlices, cfg, memo),
		nodePorts: NodePortAddrs(node, cfg),
		zone:      nodeZone(node),
		services:  map[model.VSKey]*model.Service{},
		meta:      map[model.VSKey]VSMeta{},
		vips:      map[netip.Addr]struct{}{},
		entries:   map[model.SetEntry]struct{}{},
	}
	capped, capErr := cappedFrontends(svc, ports, b.nodePorts, cfg)
	for i, p := range ports {
		if capped != nil {
			b.addPort(p, capped[i])
		} else {
			b.addPort(p, frontends(svc, p, b.nodePorts, cfg))
		}
	}
	res := b.result()
	if capErr != nil {
		res.Warnings = append(res.Warnings, fmt.Errorf("service %s: %w", name, capErr))
	}
	if sourcesErr != nil {
		res.Warnings = append(res.Warnings, fmt.Errorf("service %s: %w", name, sourcesErr))
	}
	for _, err := range []error{badVIPs(svc), externalIPsNotAllowed(svc, cfg)} {
		if err != nil {
			res.Warnings = append(res.Warnings, fmt.Errorf("service %s: %w", name, err))
		}
	}
	return res
}

// endpointsFor collects the endpoints, through memo when there is one.
func endpointsFor(epSlices []*discoveryv1.EndpointSlice, cfg Config, memo *EndpointMemo) endpointIndex {
	if memo == nil {
		return collectEndpoints(epSlices, cfg)
	}
	return memo.collect(epSlices, cfg)
}

// skipReason says why a Service is deliberately not proxied, or "".
func skipReason(svc *corev1.Service, cfg Config) string {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return "type ExternalName is resolved by DNS, not proxied"
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return "headless Service (clusterIP None) is not proxied"
	}
	if v, ok := svc.Labels[model.LabelServiceProxyName]; ok && v != cfg.ServiceProxyName {
		return fmt.Sprintf("label %s=%q names another proxy", model.LabelServiceProxyName, v)
	}
	return ""
}

// servicePort is a Service port with its protocol resolved.
type servicePort struct {
	name     string
	proto    model.Protocol
	port     uint16
	nodePort uint16
}

// servicePorts resolves each port's protocol ("" is TCP).
func servicePorts(svc *corev1.Service) ([]servicePort, error) {
	var out []servicePort
	var errs []error
	for _, p := range svc.Spec.Ports {
		proto, err := model.ParseProtocol(string(p.Protocol))
		if err != nil {
			errs = append(errs, fmt.Errorf("port %q: %w", p.Name, err))
			continue
		}
		out = append(out, servicePort{name: p.Name, proto: proto, port: uint16(p.Port), nodePort: uint16(p.NodePort)})
	}
	return out, errors.Join(errs...)
}

// builder accumulates one Service's virtual servers.
type builder struct {
	name      model.ServiceName
	svc       *corev1.Service
	cfg       Config
	opts      vsOptions
	sources   sourceFilter
	endpoints endpointIndex
	nodePorts []netip.Addr
	zone      string
	services  map[model.VSKey]*model.Service
	meta      map[model.VSKey]VSMeta
	vips      map[netip.Addr]struct{}
	entries   map[model.SetEntry]struct{}
	// noLocalEps collects Result.NoLocalEndpoints.
	noLocalEps NoLocal
}

// addPort adds the virtual servers of one Service port, every frontend and
// family. When two frontends share a key (an external IP equal to a
// ClusterIP, say) the first kind in frontends' order wins.
func (b *builder) addPort(p servicePort, fes []frontend) {
	reals := map[realsKey][]model.RealServer{}
	noLocal := map[realsKey]bool{}
	endpoints := map[bool][]Endpoint{}    // by family (v6)
	localSources := map[bool][]frontend{} // by family (v6)
	for _, fe := range fes {
		key := model.NewVSKey(p.proto, fe.addr, fe.port)
		if _, dup := b.services[key]; dup {
			continue
		}
		rk := realsKey{v6: key.IsIPv6(), local: b.localPolicy(fe.kind)}
		rs, ok := reals[rk]
		if !ok {
			eps := b.endpoints[portKey{name: p.name, proto: p.proto, v6: rk.v6}]
			rs = selectReals(eps, rk.local, b.cfg.NodeName, b.zone)
			reals[rk] = rs
			noLocal[rk] = rk.local && lacksLocal(eps, b.cfg.NodeName)
		}
		if noLocal[rk] {
			b.noLocal(fe.kind, rk.v6)
		}
		if _, ok := endpoints[rk.v6]; !ok {
			endpoints[rk.v6] = endpointsOf(b.endpoints[portKey{name: p.name, proto: p.proto, v6: rk.v6}])
		}
		b.services[key] = b.newService(key, rs)
		b.meta[key] = VSMeta{
			Service:       b.name,
			PortName:      p.name,
			Kind:          fe.kind,
			SchedulerFrom: b.opts.schedulerFrom,
			DrainTimeout:  b.opts.drainTimeout,
			Endpoints:     endpoints[rk.v6],
		}
		if fe.kind.BindsVIP() {
			b.vips[key.Addr] = struct{}{}
		}
		b.frontendEntries(frontend{kind: fe.kind, addr: key.Addr, port: fe.port}, p, rs)
		if rk.local && fe.kind.servesLocalSources() {
			localSources[rk.v6] = append(localSources[rk.v6], frontend{kind: fe.kind, addr: key.Addr, port: fe.port})
		}
	}
	for _, v6 := range []bool{false, true} {
		b.localSources(p, v6, localSources[v6], endpoints[v6])
	}
	if len(b.services) > 0 {
		b.loopBackEntries(p)
	}
}

// noLocal notes that a frontend's Local policy finds no endpoint here.
func (b *builder) noLocal(kind FrontendKind, v6 bool) {
	f := &b.noLocalEps.External
	if kind.InternalPolicy() {
		f = &b.noLocalEps.Internal
	}
	if v6 {
		f.IPv6 = true
	} else {
		f.IPv4 = true
	}
}

// realsKey is what the real servers of a port depend on besides the port.
type realsKey struct{ v6, local bool }

// localPolicy tells whether a frontend kind only uses this node's endpoints:
// internalTrafficPolicy governs ClusterIPs, externalTrafficPolicy the rest.
func (b *builder) localPolicy(kind FrontendKind) bool {
	if kind.InternalPolicy() {
		p := b.svc.Spec.InternalTrafficPolicy
		return p != nil && *p == corev1.ServiceInternalTrafficPolicyLocal
	}
	return b.svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}

// newService builds a virtual server with the Service's options and reals.
func (b *builder) newService(key model.VSKey, rs []model.RealServer) *model.Service {
	s := &model.Service{
		VirtualServer: model.VirtualServer{
			Key:       key,
			Scheduler: b.opts.scheduler,
			Flags:     b.opts.flags,
			Timeout:   b.opts.timeout,
		},
		Reals: model.RealsOf(slices.Clone(rs)), // rs is every frontend's of the port
	}
	return s
}

// sized is an empty slice with room for n, nil when n is 0 (a Result's
// empty parts are nil).
func sized[T any](n int) []T {
	if n == 0 {
		return nil
	}
	return make([]T, 0, n)
}

// result sorts what was built.
func (b *builder) result() Result {
	// Each slice is made at its size: the results are held for as long as
	// their Services are, and appends left up to twice the room.
	r := Result{NoLocalEndpoints: b.noLocalEps}
	r.Services = sized[*model.Service](len(b.services))
	for _, s := range b.services {
		r.Services = append(r.Services, s)
	}
	slices.SortFunc(r.Services, func(x, y *model.Service) int { return x.Key.Compare(y.Key) })
	if len(r.Services) > 0 {
		r.Meta = make([]VSMeta, len(r.Services))
		for i, s := range r.Services {
			r.Meta[i] = b.meta[s.Key]
		}
	}
	r.Addrs = sized[netip.Addr](len(b.vips))
	for a := range b.vips {
		r.Addrs = append(r.Addrs, a)
		b.entry(shim.VIPEntry(a))
	}
	slices.SortFunc(r.Addrs, netip.Addr.Compare)
	r.SetEntries = sized[model.SetEntry](len(b.entries))
	for e := range b.entries {
		r.SetEntries = append(r.SetEntries, e)
	}
	slices.SortFunc(r.SetEntries, model.SetEntry.Compare)
	r.HealthCheck = b.healthCheck()
	return r
}

// nodeZone is the Node's zone label, "" when unknown.
func nodeZone(node *corev1.Node) string {
	if node == nil {
		return ""
	}
	return node.Labels[corev1.LabelTopologyZone]
}
