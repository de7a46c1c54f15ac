package source

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/reconciler"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
	"github.com/kube-ipvs/kube-ipvs/internal/snapshot"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// fuzzNodePorts is the NodePort range the fuzzed validation enforces.
var fuzzNodePorts = model.PortRange{First: 30000, Last: 32767}

// fuzzSpec builds a Service and its EndpointSlice from fuzzed fields; the
// addresses and ranges are comma lists, so one input can hold several.
type fuzzSpec struct {
	typ                        uint8
	clusterIPs, externalIPs    string
	ingress, sourceRanges      string
	port, nodePort, hcNodePort int32
	proto, etp                 uint8
	addrType                   uint8
	addrs                      string
	epPort                     int32
}

func list(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func (f fuzzSpec) objects() (*corev1.Service, *discoveryv1.EndpointSlice) {
	types := []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer}
	protos := []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}
	policies := []corev1.ServiceExternalTrafficPolicy{"", corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:                     types[int(f.typ)%len(types)],
			ClusterIPs:               list(f.clusterIPs),
			ExternalIPs:              list(f.externalIPs),
			LoadBalancerSourceRanges: list(f.sourceRanges),
			ExternalTrafficPolicy:    policies[int(f.etp)%len(policies)],
			HealthCheckNodePort:      f.hcNodePort,
			Ports:                    []corev1.ServicePort{{Name: "p", Port: f.port, NodePort: f.nodePort, Protocol: protos[int(f.proto)%len(protos)]}},
		},
	}
	for _, ip := range list(f.ingress) {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	addrTypes := []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6}
	name, proto := "p", protos[int(f.proto)%len(protos)]
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: addrTypes[int(f.addrType)%len(addrTypes)],
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &f.epPort, Protocol: &proto}},
	}
	for _, a := range list(f.addrs) {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
	}
	return svc, sl
}

// fuzzSeeds: three valid Services with endpoints, then hostile ones.
var fuzzSeeds = []fuzzSpec{
	{typ: 0, clusterIPs: "10.96.0.10", port: 80, addrs: "10.244.1.2,10.244.2.2", epPort: 8080},
	{typ: 2, clusterIPs: "10.96.0.10,fd00:96::10", externalIPs: "192.0.2.30", ingress: "192.0.2.10,2001:db8::10",
		sourceRanges: "198.51.100.0/24,0.0.0.0/0", port: 80, nodePort: 30080, hcNodePort: 32000, etp: 2, addrs: "10.244.1.2", epPort: 8080},
	// An external IP inside the excluded CIDR and one another tool serves
	// on another port (checkPlan's node).
	{typ: 0, clusterIPs: "10.96.0.11", externalIPs: "192.0.2.20,192.0.2.31", port: 80, addrs: "10.244.1.3", epPort: 8080},
	{typ: 2, clusterIPs: "127.0.0.1", ingress: "fe80::1%eth0", sourceRanges: "::/0", port: 80, nodePort: 22, hcNodePort: 22, etp: 2, addrs: "127.0.0.1", epPort: 8080},
	{typ: 1, clusterIPs: "10.96.0.10", externalIPs: "0.0.0.0,224.0.0.1,169.254.1.1", port: 53, proto: 1, nodePort: 30053, addrType: 1, addrs: "fe80::2,::1,fd00::2", epPort: 53},
	{typ: 0, clusterIPs: "010.96.0.10", externalIPs: "::ffff:192.0.2.1", port: 80, addrs: "10.244.1.2%eth0", epPort: 0},
}

// FuzzValidateTranslate: whatever validation accepts, translation does not
// panic and programs nothing validation would refuse: every VIP and real
// server is an address traffic can use, every frontend comes from the
// Service (or is a node address on a NodePort in the range), every bound
// VIP has its virtual server, and no allow-all range becomes a set member.
// Beside an older rival Service whose external IPs are fuzzed too (they
// may be the Service's ClusterIPs), on a node whose fellow Nodes'
// addresses are fuzzed, the reconciler binds and guards no host, Node,
// API-server or pod-CIDR address that is no Service's ClusterIP, and a ClusterIP is served by its own
// Service only.
func FuzzValidateTranslate(f *testing.F) {
	for i, s := range fuzzSeeds {
		rival, nodes := []string{"10.96.0.10", "192.0.2.10", "192.168.1.10"}[i%3], []string{"", "192.0.2.30", "192.0.2.20,10.96.0.11"}[i%3]
		f.Add(s.typ, s.clusterIPs, s.externalIPs, s.ingress, s.sourceRanges, s.port, s.nodePort, s.hcNodePort, s.proto, s.etp, s.addrType, s.addrs, s.epPort, rival, nodes)
	}
	f.Fuzz(func(t *testing.T, typ uint8, clusterIPs, externalIPs, ingress, sourceRanges string,
		port, nodePort, hcNodePort int32, proto, etp, addrType uint8, addrs string, epPort int32, rivalIPs, nodeAddrs string) {
		spec := fuzzSpec{typ, clusterIPs, externalIPs, ingress, sourceRanges, port, nodePort, hcNodePort, proto, etp, addrType, addrs, epPort}
		if valid, _ := spec.check(t); valid {
			spec.checkClaims(t, rivalIPs, nodeAddrs)
		}
	})
}

var (
	fuzzNode = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "192.168.1.10"}, {Type: corev1.NodeInternalIP, Address: "fd00:1::10"},
	}}}
	fuzzConfig = translate.Config{NodeName: "n1", Scheduler: model.SchedRR, NodePortAddresses: []string{translate.NodePortPrimary},
		Families: model.Families{IPv4: true, IPv6: true}, DrainTimeout: time.Minute}
)

// check validates the spec's objects and, when the Service passes,
// translates them and checks the result. It tells whether the Service
// passed, and how many real servers the translation has.
func (f fuzzSpec) check(t *testing.T) (valid bool, reals int) {
	t.Helper()
	r := rules{nodePorts: fuzzNodePorts}
	svc, sl := f.objects()
	defaultService(svc)
	defaultSlice(sl)
	if r.service(svc) != nil {
		return false, 0
	}
	var slices []*discoveryv1.EndpointSlice
	if r.slice(sl) == nil {
		slices = append(slices, sl)
	}
	res := translate.Service(svc, slices, fuzzNode, fuzzConfig)
	checkTranslation(t, svc, fuzzNode, res)
	checkPlan(t, res)
	for _, s := range res.Services {
		reals += s.Reals.Len()
	}
	return true, reals
}

// checkTranslation checks a validated Service's translation.
func checkTranslation(t *testing.T, svc *corev1.Service, node *corev1.Node, res translate.Result) {
	t.Helper()
	if res.Err != nil {
		if len(res.Services) > 0 {
			t.Fatalf("an error and virtual servers: %v", res.Err)
		}
		return
	}
	if len(res.Warnings) > 0 {
		t.Fatalf("a validated Service warns: %v", res.Warnings)
	}
	listed := map[netip.Addr]bool{}
	for _, s := range append(append(svc.Spec.ClusterIPs, svc.Spec.ExternalIPs...), ingressIPs(svc)...) {
		if a, err := netip.ParseAddr(s); err == nil {
			listed[a] = true
		}
	}
	nodeAddrs := map[netip.Addr]bool{}
	for _, a := range node.Status.Addresses {
		nodeAddrs[netip.MustParseAddr(a.Address)] = true
	}
	vss := map[netip.Addr]bool{}
	marks := map[model.VSKey]bool{}
	for _, s := range res.Services {
		a := s.Key.Addr
		m, _ := res.MetaOf(s.Key)
		kind := m.Kind
		if s.Key.FWMark != 0 {
			// A Local policy's firewall-mark server for local sources: no
			// address of its own, only its family's.
			if kind != translate.KindLocalSources || !a.IsUnspecified() || svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
				t.Fatalf("firewall-mark server %s %s (%s) of a Service with externalTrafficPolicy %q", s.Key, a, kind, svc.Spec.ExternalTrafficPolicy)
			}
			marks[s.Key] = true
			continue
		}
		vss[a] = true
		switch {
		case kind == translate.KindNodePort && (!nodeAddrs[a] || !fuzzNodePorts.Contains(s.Key.Port)):
			t.Fatalf("NodePort frontend %s is not a node address on a port of %s", s.Key, fuzzNodePorts)
		case kind != translate.KindNodePort && !listed[a]:
			t.Fatalf("frontend %s (%s) is not one of the Service's addresses", s.Key, kind)
		}
		if unusable(a) {
			t.Fatalf("frontend %s has an address no traffic can use", s.Key)
		}
		for _, rs := range s.Reals.All() {
			if unusable(rs.Addr.Addr()) || rs.Addr.Port() == 0 {
				t.Fatalf("real server %s of %s has an address no traffic can use", rs.Addr, s.Key)
			}
		}
	}
	for _, a := range res.Addrs {
		if !vss[a] {
			t.Fatalf("VIP %s is bound without a virtual server", a)
		}
	}
	for _, e := range res.SetEntries {
		if e.Net().IsValid() && e.Net().Bits() == 0 {
			t.Fatalf("allow-all range as a set member: %s", e)
		}
		if mk, ok := plan.MarkedFor(e); ok && !marks[mk] {
			t.Fatalf("%s steers connections to no firewall-mark server of the Service", e)
		}
	}
}

// unusable is the oracle for addresses validation must keep out, written
// apart from validation's own check so that a fault there shows here.
func unusable(a netip.Addr) bool {
	return a.Zone() != "" || a.Is4In6() || a.IsUnspecified() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsMulticast()
}

func ingressIPs(svc *corev1.Service) []string {
	var out []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		out = append(out, in.IP)
	}
	return out
}

// TestFuzzSeeds keeps the fuzz test from being vacuous: the valid seeds
// pass validation and reach translation with real servers, the hostile
// ones are refused.
func TestFuzzSeeds(t *testing.T) {
	for i, s := range fuzzSeeds {
		valid, reals := s.check(t)
		if want := i < 3; valid != want || (valid && reals == 0) {
			t.Errorf("seed %d: valid %v with %d real servers, want valid %v", i, valid, reals, want)
		}
	}
}

// The node the plan runs on: another tool (keepalived) serves
// 192.0.2.30:80 and 192.0.2.31:443, and 192.0.2.16/28 is excluded (the
// second inside it).
var (
	fuzzForeign = []model.VSKey{
		model.NewVSKey(model.TCP, netip.MustParseAddr("192.0.2.30"), 80),
		model.NewVSKey(model.TCP, netip.MustParseAddr("192.0.2.31"), 443),
	}
	fuzzExclude = netip.MustParsePrefix("192.0.2.16/28")
)

// checkPlan plans a validated Service's translation onto a node that holds
// another tool's virtual servers and excludes a CIDR, applies the plan to
// that state and checks what the issue asks of every plan: never a
// removal inside the excluded CIDRs (where the Service is served all the
// same), never an operation on a foreign key, every bound VIP with its
// virtual server.
func checkPlan(t *testing.T, res translate.Result) {
	t.Helper()
	desired, observed := model.NewState(), model.NewState()
	for _, svc := range res.Services {
		desired.Services[svc.Key] = svc
	}
	for _, a := range res.Addrs {
		desired.Addrs[a] = struct{}{}
	}
	for _, e := range res.SetEntries {
		desired.Sets[e] = struct{}{}
	}
	for _, k := range fuzzForeign {
		observed.Services[k] = &model.Service{VirtualServer: model.VirtualServer{Key: k, Scheduler: "wlc"}}
	}
	owner := plan.NewOwner(observed, nil, plan.OwnerPolicy{NodePortRange: fuzzNodePorts,
		Exclude: []netip.Prefix{fuzzExclude}, Families: model.Families{IPv4: true, IPv6: true}})
	ops, _ := plan.Plan(desired, observed, owner)
	after := observed.Clone()
	for _, op := range ops {
		switch op.Kind {
		case model.DeleteService, model.DeleteReal, model.UnbindAddr:
			for _, a := range []netip.Addr{op.VS.Key.Addr, op.Addr} {
				if a.IsValid() && fuzzExclude.Contains(a) {
					t.Fatalf("%s: a removal inside the excluded %s, of nothing ours", op, fuzzExclude)
				}
			}
		}
		for _, k := range fuzzForeign {
			if op.VS.Key == k {
				t.Fatalf("%s: an operation on another tool's virtual server", op)
			}
		}
		op.ApplyTo(&after)
	}
	for _, k := range fuzzForeign {
		if _, ok := after.Services[k]; !ok {
			t.Fatalf("another tool's %s is gone", k)
		}
	}
	for a := range after.Addrs {
		if !carriesServer(after, a) {
			t.Fatalf("VIP %s bound without a virtual server", a)
		}
	}
}

// carriesServer tells whether some virtual server of s has address a.
func carriesServer(s model.State, a netip.Addr) bool {
	for k := range s.Services {
		if k.Addr == a {
			return true
		}
	}
	return false
}

// The rival's ClusterIP and endpoint, the API server's address and the pod
// CIDR of checkClaims.
var (
	rivalClusterIP = "10.96.0.99"
	rivalEndpoint  = netip.MustParseAddr("10.255.99.9")
	fuzzAPIServer  = netip.MustParseAddr("192.168.1.2")
	fuzzPodCIDR    = netip.MustParsePrefix("10.244.0.0/16")
)

// checkClaims runs the spec's Service (created in 2024) and an older rival
// (2020) with the same port, whose external IPs are rivalIPs, through the
// reconciler onto a fake kernel on fuzzNode, whose fellow Node has
// nodeAddrs, and checks what it holds: no reserved address is bound or a
// VIP, no frontend but a NodePort is on one, and every virtual server on
// one of a Service's ClusterIPs has none of the other's endpoints.
func (f fuzzSpec) checkClaims(t *testing.T, rivalIPs, nodeAddrs string) {
	t.Helper()
	r := rules{nodePorts: fuzzNodePorts}
	svc, sl := f.objects()
	defaultService(svc)
	defaultSlice(sl)
	svc.Namespace, sl.Namespace = "default", "default"
	svc.CreationTimestamp = metav1.NewTime(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	rival, rivalSlice := fuzzSpec{clusterIPs: rivalClusterIP, externalIPs: rivalIPs, port: f.port, proto: f.proto,
		addrs: rivalEndpoint.String(), epPort: 9999}.objects()
	rival.Name, rival.Namespace, rivalSlice.Name, rivalSlice.Namespace = "rival", "other", "rival-1", "other"
	rivalSlice.Labels[discoveryv1.LabelServiceName] = "rival"
	rival.CreationTimestamp = metav1.NewTime(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
	defaultService(rival)
	defaultSlice(rivalSlice)
	if r.service(rival) != nil {
		return // the API server would not hold it
	}
	var others []netip.Addr
	for _, s := range list(nodeAddrs) {
		if a, err := netip.ParseAddr(s); err == nil {
			others = append(others, a)
		}
	}
	store := snapshot.NewStore()
	store.SetNode(fuzzNode)
	store.SetNodeAddrs("n2", snapshot.NodeAddrs{Addrs: others})
	store.SetService(rival)
	store.SetSlice(rivalSlice)
	store.SetService(svc)
	if r.slice(sl) == nil {
		store.SetSlice(sl)
	}
	kernel := fake.New()
	cfg := fuzzConfig
	cfg.HostAddrs = []netip.Addr{netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("fd00:1::10")}
	rec := reconciler.New(reconciler.Options{Dataplane: kernel, Store: store, Translate: cfg, NodePortRange: fuzzNodePorts,
		Shim: shim.Config{Families: cfg.Families}, ReservedAddrs: []netip.Addr{fuzzAPIServer}, ReservedCIDRs: []netip.Prefix{fuzzPodCIDR}})
	ctx := context.Background()
	if err := rec.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.Sync(ctx, true); err != nil {
		t.Fatalf("sync: %v", err)
	}
	// A ClusterIP is the allocator's: never reserved, whatever else has it.
	var exempt []netip.Addr
	for _, s := range append(slices.Clone(svc.Spec.ClusterIPs), rival.Spec.ClusterIPs...) {
		if a, err := netip.ParseAddr(s); err == nil {
			exempt = append(exempt, a)
		}
	}
	reserved := plan.NewReserved(append(append(others, cfg.HostAddrs...), fuzzAPIServer), []netip.Prefix{fuzzPodCIDR}).WithExempt(exempt)
	got := kernel.State()
	for a := range got.Addrs {
		if reserved.Has(a) {
			t.Fatalf("reserved address %s bound:\n%s", a, got.Dump())
		}
	}
	for e := range got.Sets {
		if shim.KindOf(e) == shim.VIPs && reserved.Has(e.Addr()) {
			t.Fatalf("reserved address %s guarded as a VIP:\n%s", e.Addr(), got.Dump())
		}
	}
	clusterIPs := map[netip.Addr]netip.Addr{} // ClusterIP -> the other Service's endpoint
	for _, s := range svc.Spec.ClusterIPs {
		if a, err := netip.ParseAddr(s); err == nil {
			clusterIPs[a] = rivalEndpoint
		}
	}
	for _, s := range list(f.addrs) {
		if a, err := netip.ParseAddr(s); err == nil && a != rivalEndpoint {
			clusterIPs[netip.MustParseAddr(rivalClusterIP)] = a
		}
	}
	for k, vs := range got.Services {
		if reserved.Has(k.Addr) && !fuzzNodePorts.Contains(k.Port) {
			t.Fatalf("frontend %s on a reserved address:\n%s", k, got.Dump())
		}
		other, ok := clusterIPs[k.Addr]
		if !ok {
			continue
		}
		for _, rs := range vs.Reals.All() {
			if rs.Addr.Addr() == other {
				t.Fatalf("ClusterIP frontend %s served by another Service's endpoint %s:\n%s", k, rs.Addr, got.Dump())
			}
		}
	}
}
