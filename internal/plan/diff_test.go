package plan

import (
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

var (
	vip1  = netip.MustParseAddr("10.96.0.1")
	vip2  = netip.MustParseAddr("10.96.0.2")
	vip6  = netip.MustParseAddr("fd00::10")
	node1 = netip.MustParseAddr("192.168.1.10")
	ext   = netip.MustParseAddr("192.168.1.200") // keepalived's
)

func rs(s string, w int) model.RealServer {
	return model.RealServer{Addr: netip.MustParseAddrPort(s), Weight: w}
}

func svc(k model.VSKey, sched model.Scheduler, reals ...model.RealServer) *model.Service {
	s := &model.Service{VirtualServer: model.VirtualServer{Key: k, Scheduler: sched}}
	for _, r := range reals {
		s.Reals.Set(r)
	}
	return s
}

func state(addrs []netip.Addr, svcs ...*model.Service) model.State {
	s := model.NewState()
	for _, a := range addrs {
		s.Addrs[a] = struct{}{}
	}
	for _, v := range svcs {
		s.Services[v.Key] = v
	}
	return s
}

var testPolicy = OwnerPolicy{
	NodePortRange: model.PortRange{First: 30000, Last: 32767},
	Exclude:       []netip.Prefix{netip.MustParsePrefix("10.96.9.0/24")},
	Families:      model.Families{IPv4: true, IPv6: true},
}

func testOwner(observed model.State) Owner {
	return NewOwner(observed, []netip.Addr{node1}, testPolicy)
}

func render(ops []model.Op) string {
	var b strings.Builder
	for _, o := range ops {
		b.WriteString(o.String() + "\n")
	}
	return b.String()
}

func TestDiff(t *testing.T) {
	k1 := model.NewVSKey(model.TCP, vip1, 80)
	k2 := model.NewVSKey(model.UDP, vip2, 53)
	k6 := model.NewVSKey(model.SCTP, vip6, 9)
	kNode := model.NewVSKey(model.TCP, node1, 30080)
	kNodeLow := model.NewVSKey(model.TCP, node1, 22)
	kForeign := model.NewVSKey(model.TCP, ext, 443)
	excluded := netip.MustParseAddr("10.96.9.9")
	kExcl := model.NewVSKey(model.TCP, excluded, 80)

	tests := []struct {
		name              string
		desired, observed model.State
		want              string
	}{
		{
			name:    "create from nothing, in order",
			desired: state([]netip.Addr{vip1, vip6}, svc(k1, "rr", rs("10.244.0.2:8080", 1), rs("10.244.0.3:8080", 0)), svc(k6, "sh")),
			want: `-A -t 10.96.0.1:80 -s rr
-A --sctp-service [fd00::10]:9 -s sh
-a -t 10.96.0.1:80 -r 10.244.0.2:8080 -m -w 1
-a -t 10.96.0.1:80 -r 10.244.0.3:8080 -m -w 0
ip addr add 10.96.0.1/32
ip addr add fd00::10/128
`,
		},
		{
			name:     "weights, scheduler and reals change",
			desired:  state([]netip.Addr{vip1}, svc(k1, "lc", rs("10.244.0.2:8080", 0), rs("10.244.0.4:8080", 1))),
			observed: state([]netip.Addr{vip1}, svc(k1, "rr", rs("10.244.0.2:8080", 1), rs("10.244.0.3:8080", 1))),
			want: `-E -t 10.96.0.1:80 -s lc
-a -t 10.96.0.1:80 -r 10.244.0.4:8080 -m -w 1
-e -t 10.96.0.1:80 -r 10.244.0.2:8080 -m -w 0
-d -t 10.96.0.1:80 -r 10.244.0.3:8080
`,
		},
		{
			name:     "ours removed, foreign, excluded and low node ports kept",
			desired:  state(nil),
			observed: state([]netip.Addr{vip1, vip2, excluded}, svc(k1, "rr"), svc(k2, "rr"), svc(kNode, "rr"), svc(kNodeLow, "rr"), svc(kForeign, "wlc"), svc(kExcl, "rr")),
			want: `-D -t 10.96.0.1:80
-D -u 10.96.0.2:53
-D -t 192.168.1.10:30080
ip addr del 10.96.0.1/32
ip addr del 10.96.0.2/32
`,
		},
		{
			name:     "steady state",
			desired:  state([]netip.Addr{vip1}, svc(k1, "rr", rs("10.244.0.2:8080", 1))),
			observed: state([]netip.Addr{vip1}, svc(k1, "rr", rs("10.244.0.2:8080", 1))),
			want:     "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.observed.Services == nil {
				tt.observed = model.NewState()
			}
			got := render(Diff(tt.desired, tt.observed, testOwner(tt.observed)))
			if got != tt.want {
				t.Errorf("ops:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestDisabledFamilyNotPruned(t *testing.T) {
	k6 := model.NewVSKey(model.TCP, vip6, 80)
	observed := state([]netip.Addr{vip6}, svc(k6, "rr"))
	p := testPolicy
	p.Families.IPv6 = false
	owner := NewOwner(observed, []netip.Addr{node1}, p)
	if ops := Diff(model.NewState(), observed, owner); len(ops) != 0 {
		t.Fatalf("IPv6 disabled, yet planned:\n%s", render(ops))
	}
}

func TestScopeOf(t *testing.T) {
	k1 := model.NewVSKey(model.TCP, vip1, 80)
	k2 := model.NewVSKey(model.TCP, vip2, 80)
	s := state([]netip.Addr{vip1, vip2}, svc(k1, "rr"), svc(k2, "rr"))
	sc := NewScope()
	sc.Keys[k2] = struct{}{}
	sc.Addrs[vip2] = struct{}{}
	got := sc.Of(s).Dump()
	want := "-A -t 10.96.0.2:80 -s rr\naddr 10.96.0.2\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func TestDiffSets(t *testing.T) {
	lb := netip.MustParseAddr("192.0.2.10")
	k := model.NewVSKey(model.TCP, lb, 80)
	fw := shim.Entry(shim.Firewall, lb, model.TCP, 80)
	allow := shim.SourceRangeEntry(lb, model.TCP, 80, netip.MustParsePrefix("198.51.100.0/24"))
	ext := shim.Entry(shim.External, lb, model.TCP, 80)
	withSets := func(s model.State, es ...model.SetEntry) model.State {
		for _, e := range es {
			s.Sets[e] = struct{}{}
		}
		return s
	}
	full := func() model.State {
		return withSets(state([]netip.Addr{lb}, svc(k, "rr", rs("10.244.0.2:8080", 1))), fw, allow, ext)
	}
	t.Run("create: members before the VIP, allowed ranges before their filter", func(t *testing.T) {
		got := render(Diff(full(), model.NewState(), testOwner(model.NewState())))
		want := `-A -t 192.0.2.10:80 -s rr
-a -t 192.0.2.10:80 -r 10.244.0.2:8080 -m -w 1
ipset add KUBE-IPVS-LB-SOURCE-CIDR 192.0.2.10,tcp:80,198.51.100.0/24
ipset add KUBE-IPVS-EXTERNAL 192.0.2.10,tcp:80
ipset add KUBE-IPVS-LB-FW 192.0.2.10,tcp:80
ip addr add 192.0.2.10/32
`
		if got != want {
			t.Errorf("ops:\n%s\nwant:\n%s", got, want)
		}
	})
	t.Run("delete: members after the VIP, the filter before its ranges", func(t *testing.T) {
		obs := full()
		got := render(Diff(model.NewState(), obs, testOwner(obs)))
		want := `-D -t 192.0.2.10:80
ip addr del 192.0.2.10/32
ipset del KUBE-IPVS-LB-FW 192.0.2.10,tcp:80
ipset del KUBE-IPVS-EXTERNAL 192.0.2.10,tcp:80
ipset del KUBE-IPVS-LB-SOURCE-CIDR 192.0.2.10,tcp:80,198.51.100.0/24
`
		if got != want {
			t.Errorf("ops:\n%s\nwant:\n%s", got, want)
		}
	})
	t.Run("steady", func(t *testing.T) {
		if ops := Diff(full(), full(), testOwner(full())); len(ops) != 0 {
			t.Errorf("steady state planned:\n%s", render(ops))
		}
	})
}

// TestFrontendRecordBracketsItsServer: a frontend's ownership record is
// written before anything else (so a crash after any later operation
// leaves a virtual server we own) and removed after everything else but the
// VIP's member (so the server is ours until it is gone, and a VIP whose
// unbind failed keeps its other ports closed).
func TestFrontendRecordBracketsItsServer(t *testing.T) {
	lb := netip.MustParseAddr("192.0.2.10")
	k := model.NewVSKey(model.TCP, lb, 80)
	np := model.NewVSKey(model.TCP, node1, 30080)
	full := func() model.State {
		s := state([]netip.Addr{lb}, svc(k, "rr", rs("10.244.0.2:8080", 1)), svc(np, "rr", rs("10.244.0.2:8080", 1)))
		for _, e := range []model.SetEntry{
			shim.Entry(shim.Frontends, lb, model.TCP, 80), shim.Entry(shim.Frontends, node1, model.TCP, 30080),
			shim.Entry(shim.External, lb, model.TCP, 80), shim.VIPEntry(lb),
		} {
			s.Sets[e] = struct{}{}
		}
		return s
	}
	got := render(Diff(full(), model.NewState(), testOwner(model.NewState())))
	want := `ipset add KUBE-IPVS-FRONTENDS 192.0.2.10,tcp:80
ipset add KUBE-IPVS-FRONTENDS 192.168.1.10,tcp:30080
-A -t 192.0.2.10:80 -s rr
-A -t 192.168.1.10:30080 -s rr
-a -t 192.0.2.10:80 -r 10.244.0.2:8080 -m -w 1
-a -t 192.168.1.10:30080 -r 10.244.0.2:8080 -m -w 1
ipset add KUBE-IPVS-EXTERNAL 192.0.2.10,tcp:80
ipset add KUBE-IPVS-VIPS 192.0.2.10
ip addr add 192.0.2.10/32
`
	if got != want {
		t.Errorf("create:\n%s\nwant:\n%s", got, want)
	}
	obs := full()
	// Owned by the record alone: no node address, no NodePort range.
	owner := NewOwner(obs, nil, OwnerPolicy{Families: testPolicy.Families})
	got = render(Diff(model.NewState(), obs, owner))
	want = `-D -t 192.0.2.10:80
-D -t 192.168.1.10:30080
ip addr del 192.0.2.10/32
ipset del KUBE-IPVS-EXTERNAL 192.0.2.10,tcp:80
ipset del KUBE-IPVS-FRONTENDS 192.0.2.10,tcp:80
ipset del KUBE-IPVS-FRONTENDS 192.168.1.10,tcp:30080
ipset del KUBE-IPVS-VIPS 192.0.2.10
`
	if got != want {
		t.Errorf("delete:\n%s\nwant:\n%s", got, want)
	}
}

// TestNewOwner checks each way a virtual server becomes ours, all read from
// the one observed state the owner is built from.
func TestNewOwner(t *testing.T) {
	unbound := netip.MustParseAddr("10.96.0.7")
	observed := state([]netip.Addr{vip1})
	observed.Sets[shim.Entry(shim.NoEndpoints, unbound, model.UDP, 53)] = struct{}{}
	observed.Sets[shim.LoopBackEntry(model.TCP, netip.AddrPortFrom(unbound, 80))] = struct{}{}
	oldNode := netip.MustParseAddr("192.168.1.9") // the node's address before it changed
	observed.Sets[shim.Entry(shim.Frontends, oldNode, model.TCP, 30081)] = struct{}{}
	exclRecorded, exclBound := netip.MustParseAddr("10.96.9.1"), netip.MustParseAddr("10.96.9.2")
	observed.Sets[shim.Entry(shim.Frontends, exclRecorded, model.TCP, 80)] = struct{}{}
	observed.Addrs[exclBound] = struct{}{}
	p := testPolicy
	p.NodePorts = map[NodePort]struct{}{{model.TCP, 20080}: {}}
	o := NewOwner(observed, []netip.Addr{node1}, p)
	for _, tt := range []struct {
		key  model.VSKey
		want bool
	}{
		{model.NewVSKey(model.TCP, vip1, 80), true},                              // bound on our link
		{model.NewVSKey(model.UDP, unbound, 53), true},                           // named by a frontend set
		{model.NewVSKey(model.TCP, unbound, 80), false},                          // a hairpin member names no frontend
		{model.NewVSKey(model.UDP, unbound, 54), false},                          // another port
		{model.NewVSKey(model.TCP, node1, 30080), true},                          // node port in range
		{model.NewVSKey(model.TCP, node1, 22), false},                            // node port out of range
		{model.NewVSKey(model.TCP, oldNode, 30081), true},                        // recorded, no longer a node address
		{model.NewVSKey(model.TCP, oldNode, 30082), false},                       // not recorded
		{model.NewVSKey(model.TCP, ext, 443), false},                             // foreign
		{model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.9.9"), 80), false}, // excluded
		{model.NewVSKey(model.TCP, exclRecorded, 80), true},                      // excluded, recorded
		{model.NewVSKey(model.TCP, exclBound, 80), false},                        // excluded, bound on our link
		{model.NewVSKey(model.TCP, node1, 20080), true},                          // node port named, out of range
		{model.NewVSKey(model.UDP, node1, 20080), false},                         // another protocol
		{model.VSKey{FWMark: 7}, false},
	} {
		if got := o.OwnsService(tt.key); got != tt.want {
			t.Errorf("OwnsService(%s) = %v, want %v", tt.key, got, tt.want)
		}
	}
	// A later read is a new owner: the old one keeps what it was built from.
	later := state(nil)
	if NewOwner(later, nil, testPolicy).OwnsService(model.NewVSKey(model.TCP, vip1, 80)) {
		t.Error("an owner built from a state without the VIP owns its service")
	}
}

// TestPlanRefuses: each way a desired frontend is not ours to make, and
// what stays ours beside it.
func TestPlanRefuses(t *testing.T) {
	kExt := model.NewVSKey(model.TCP, ext, 443)      // keepalived's, in observed
	kExt80 := model.NewVSKey(model.TCP, ext, 80)     // another port on its address
	kNode := model.NewVSKey(model.TCP, node1, 30080) // a NodePort
	kNodeSSH := model.NewVSKey(model.TCP, node1, 22) // someone's on the node address
	kExcl := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.9.9"), 80)
	k1 := model.NewVSKey(model.TCP, vip1, 80)
	observed := state(nil, svc(kExt, "wlc", rs("10.0.0.5:443", 1)), svc(kNodeSSH, "rr"))
	for _, tt := range []struct {
		name    string
		desired model.State
		ops     string
		refused string
	}{
		{"foreign key", state([]netip.Addr{ext}, svc(kExt, "rr", rs("10.244.0.2:8443", 1))), "",
			"frontend -t 192.168.1.200:443 is a virtual server the agent does not own: not served, left to its owner"},
		{"its address, another port", state([]netip.Addr{ext}, svc(kExt80, "rr")), "",
			"frontend -t 192.168.1.200:80: its address carries -t 192.168.1.200:443, a virtual server the agent does not own: not served, its address not bound"},
		{"excluded: served all the same", state([]netip.Addr{kExcl.Addr}, svc(kExcl, "rr")), "-A -t 10.96.9.9:80 -s rr\nip addr add 10.96.9.9/32\n", ""},
		{"a NodePort beside a foreign port on the node address", state(nil, svc(kNode, "rr")), "-A -t 192.168.1.10:30080 -s rr\n", ""},
		{"ours beside", state([]netip.Addr{vip1}, svc(k1, "rr")), "-A -t 10.96.0.1:80 -s rr\nip addr add 10.96.0.1/32\n", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ops, refused := Plan(tt.desired, observed, testOwner(observed))
			var why []string
			for _, r := range refused {
				why = append(why, r.String())
			}
			if got := render(ops); got != tt.ops || strings.Join(why, "\n") != tt.refused {
				t.Errorf("ops:\n%s\nrefused: %q\nwant ops:\n%s\nrefused: %q", got, why, tt.ops, tt.refused)
			}
		})
	}
}

// TestLargeDiffIsSequentialDiff: a diff large enough to walk the table and
// the sets side by side gives the operations the two walks give one after
// the other, sorted: adds, updates and deletes of every kind.
func TestLargeDiffIsSequentialDiff(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4)) // workers at once, whatever the machine
	desired, observed := model.NewState(), model.NewState()
	for i := range 2000 {
		vip := netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(i%250 + 1)})
		k := model.NewVSKey(model.TCP, vip, 80)
		want := svc(k, "rr")
		for j := range 10 {
			want.Reals.Set(model.RealServer{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(128 + j), byte(i / 250), byte(i%250 + 1)}), 8080), Weight: 1})
		}
		desired.Services[k], desired.Addrs[vip] = want, struct{}{}
		members := []model.SetEntry{shim.Entry(shim.Frontends, vip, model.TCP, 80), shim.Entry(shim.ClusterIP, vip, model.TCP, 80), shim.VIPEntry(vip)}
		for _, rs := range want.Reals.All() {
			members = append(members, shim.LoopBackEntry(model.TCP, rs.Addr))
		}
		for _, e := range members {
			desired.Sets[e] = struct{}{}
		}
		if i%3 == 0 { // a third is there already, some of it changed
			have := want.Clone()
			if i%2 == 0 {
				have.Scheduler = "lc"
			}
			for _, rs := range have.Reals.All() {
				rs.Weight = i % 2
				have.Reals.Set(rs)
			}
			observed.Services[k], observed.Addrs[vip] = have, struct{}{}
			for _, e := range members[:len(members)-i%5] {
				observed.Sets[e] = struct{}{}
			}
		}
	}
	gone := netip.MustParseAddr("10.99.0.1")
	observed.Sets[shim.Entry(shim.ClusterIP, gone, model.UDP, 53)] = struct{}{}
	if len(desired.Sets) < parallelFrom {
		t.Fatalf("%d members: too few to walk in parallel", len(desired.Sets))
	}
	owner := testOwner(observed)
	got := diff(desired, observed, owner)
	var want []model.Op
	diffTable(desired, observed, owner, func(op model.Op) { want = append(want, op) })
	diffSets(desired.Sets, observed.Sets, func(op model.Op) { want = append(want, op) })
	Sort(want)
	if len(got) != len(want) || render(got) != render(want) {
		t.Fatalf("parallel diff: %d operations, want %d", len(got), len(want))
	}
	checkStaged(t, desired, observed, owner, got)
	kinds := map[model.OpKind]bool{}
	for _, op := range got {
		kinds[op.Kind] = true
	}
	for _, k := range []model.OpKind{model.AddService, model.UpdateService, model.AddReal, model.UpdateReal, model.BindAddr, model.AddSetEntry, model.DeleteSetEntry} {
		if !kinds[k] {
			t.Errorf("no %v in the diff: the case does not cover it", k)
		}
	}
}

// TestPlanReservedAddrs: a frontend on a node's, the API server's or a pod
// address is refused, never bound nor listed as a VIP; a node address
// bound on our link (by an older agent) makes nothing there ours, and
// comes off it with its VIP member; what our sets record there is
// removed; a NodePort on the node's address is served.
func TestPlanReservedAddrs(t *testing.T) {
	node2 := netip.MustParseAddr("192.168.1.11")
	api := netip.MustParseAddr("192.168.1.2")
	pod := netip.MustParseAddr("10.244.3.7")
	kSelf := model.NewVSKey(model.TCP, node1, 80)       // an external IP: this node's address
	kOther := model.NewVSKey(model.TCP, node2, 80)      // another Node's address
	kAPI := model.NewVSKey(model.TCP, api, 443)         // the API server's
	kPod := model.NewVSKey(model.UDP, pod, 53)          // inside the pod CIDRs
	kNode := model.NewVSKey(model.TCP, node1, 30080)    // a NodePort
	kLowPort := model.NewVSKey(model.TCP, node1, 22)    // not a NodePort, in no set
	kRecorded := model.NewVSKey(model.TCP, node1, 8080) // an older agent's, recorded
	kForeign := model.NewVSKey(model.TCP, node1, 443)   // another tool's
	desired := state([]netip.Addr{node1, node2, api, pod},
		svc(kSelf, "rr"), svc(kOther, "rr"), svc(kAPI, "rr"), svc(kPod, "rr"), svc(kNode, "rr"), svc(kLowPort, "rr"))
	for _, e := range []model.SetEntry{shim.VIPEntry(node1), shim.VIPEntry(node2), shim.VIPEntry(api), shim.VIPEntry(pod),
		shim.Entry(shim.Frontends, node1, model.TCP, 80), shim.Entry(shim.Frontends, node1, model.TCP, 30080)} {
		desired.Sets[e] = struct{}{}
	}
	observed := state([]netip.Addr{node1}, svc(kForeign, "wlc"), svc(kRecorded, "rr"))
	observed.Sets[shim.VIPEntry(node1)] = struct{}{}
	observed.Sets[shim.Entry(shim.Frontends, node1, model.TCP, 8080)] = struct{}{}
	p := testPolicy
	p.Reserved = NewReserved([]netip.Addr{node1, node2, api}, []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")})
	owner := NewOwner(observed, []netip.Addr{node1}, p)
	if owner.OwnsService(kForeign) {
		t.Errorf("%s is ours because its address is on our link", kForeign)
	}
	ops, refused := Plan(desired, observed, owner)
	want := `ipset add KUBE-IPVS-FRONTENDS 192.168.1.10,tcp:30080
-A -t 192.168.1.10:30080 -s rr
-D -t 192.168.1.10:8080
ip addr del 192.168.1.10/32
ipset del KUBE-IPVS-FRONTENDS 192.168.1.10,tcp:8080
ipset del KUBE-IPVS-VIPS 192.168.1.10
`
	if got := render(ops); got != want {
		t.Errorf("ops:\n%s\nwant:\n%s", got, want)
	}
	var got []string
	for _, r := range refused {
		if r.Why != ReservedAddr {
			t.Errorf("%s refused as %s", r.Key, r.Why)
		}
		got = append(got, r.Key.String())
	}
	slices.Sort(got)
	wantRefused := []string{kSelf.String(), kLowPort.String(), kAPI.String(), kOther.String(), kPod.String()}
	slices.Sort(wantRefused)
	if !slices.Equal(got, wantRefused) {
		t.Errorf("refused %q, want %q", got, wantRefused)
	}
}

// TestExcludedCIDRs: --ipvs-exclude-cidrs means what kube-proxy's
// ipvs.excludeCIDRs means: nothing there that is not ours is deleted,
// unbound or taken over, and Services there are served; what the agent
// made there (recorded in its sets) is removed with its Service.
func TestExcludedCIDRs(t *testing.T) {
	addr := netip.MustParseAddr("10.96.9.20") // inside testPolicy's excluded CIDRs
	k := model.NewVSKey(model.TCP, addr, 80)
	kOther := model.NewVSKey(model.TCP, addr, 443)
	members := []model.SetEntry{shim.Entry(shim.Frontends, addr, model.TCP, 80), shim.Entry(shim.ClusterIP, addr, model.TCP, 80), shim.VIPEntry(addr)}
	served := func() model.State {
		return withMembers(state([]netip.Addr{addr}, svc(k, "rr", rs("10.244.0.2:8080", 1))), members...)
	}
	for _, tt := range []struct {
		name              string
		desired, observed model.State
		ops, refused      string
	}{
		{name: "a Service there is served", desired: served(), observed: model.NewState(), ops: `ipset add KUBE-IPVS-FRONTENDS 10.96.9.20,tcp:80
-A -t 10.96.9.20:80 -s rr
-a -t 10.96.9.20:80 -r 10.244.0.2:8080 -m -w 1
ipset add KUBE-IPVS-CLUSTER-IP 10.96.9.20,tcp:80
ipset add KUBE-IPVS-VIPS 10.96.9.20
ip addr add 10.96.9.20/32
`},
		{name: "ours there goes with its Service", desired: model.NewState(), observed: served(), ops: `-D -t 10.96.9.20:80
ip addr del 10.96.9.20/32
ipset del KUBE-IPVS-CLUSTER-IP 10.96.9.20,tcp:80
ipset del KUBE-IPVS-FRONTENDS 10.96.9.20,tcp:80
ipset del KUBE-IPVS-VIPS 10.96.9.20
`},
		{name: "another tool's there survives", desired: model.NewState(), observed: state(nil, svc(k, "wlc"))},
		{name: "another tool's there is not taken over", desired: served(), observed: state(nil, svc(k, "wlc")),
			refused: "frontend -t 10.96.9.20:80 is a virtual server the agent does not own: not served, left to its owner"},
		{name: "kube-proxy's there, not named: neither deleted nor unbound", desired: model.NewState(),
			observed: state([]netip.Addr{addr}, svc(k, "rr", rs("10.244.0.9:8080", 1)))},
		{name: "kube-proxy's there, named by a Service: taken over", desired: served(),
			observed: state([]netip.Addr{addr}, svc(k, "rr", rs("10.244.0.9:8080", 1)), svc(kOther, "rr")), ops: `ipset add KUBE-IPVS-FRONTENDS 10.96.9.20,tcp:80
-a -t 10.96.9.20:80 -r 10.244.0.2:8080 -m -w 1
ipset add KUBE-IPVS-CLUSTER-IP 10.96.9.20,tcp:80
ipset add KUBE-IPVS-VIPS 10.96.9.20
-d -t 10.96.9.20:80 -r 10.244.0.9:8080
`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ops, refused := Plan(tt.desired, tt.observed, testOwner(tt.observed))
			var why []string
			for _, r := range refused {
				why = append(why, r.String())
			}
			if got := render(ops); got != tt.ops || strings.Join(why, "\n") != tt.refused {
				t.Errorf("ops:\n%s\nrefused: %q\nwant ops:\n%s\nrefused: %q", got, why, tt.ops, tt.refused)
			}
		})
	}
}

// TestNamedNodePorts: a virtual server on a node address is a NodePort,
// to adopt, because a Service names its port as a nodePort, whatever
// --nodeport-range says (a cluster with its own
// --service-node-port-range); one on a port outside the range that no
// Service names is left alone, as it could be any tool's.
func TestNamedNodePorts(t *testing.T) {
	k := model.NewVSKey(model.TCP, node1, 20080) // outside testPolicy's range
	kStale := model.NewVSKey(model.TCP, node1, 20081)
	kInRange := model.NewVSKey(model.TCP, node1, 30081)
	named := testPolicy
	named.NodePorts = map[NodePort]struct{}{{model.TCP, 20080}: {}}
	named.Reserved = NewReserved([]netip.Addr{node1}, nil) // the Node's own address
	kubeProxys := func() model.State {
		return state(nil, svc(k, "rr", rs("10.244.0.9:8080", 1)), svc(kStale, "rr"), svc(kInRange, "rr"))
	}
	desired := withMembers(state(nil, svc(k, "rr", rs("10.244.0.2:8080", 1))), shim.Entry(shim.Frontends, node1, model.TCP, 20080))
	for _, tt := range []struct {
		name         string
		policy       OwnerPolicy
		desired      model.State
		ops, refused string
	}{
		{name: "named: adopted, the stale one in range removed", policy: named, desired: desired, ops: `ipset add KUBE-IPVS-FRONTENDS 192.168.1.10,tcp:20080
-a -t 192.168.1.10:20080 -r 10.244.0.2:8080 -m -w 1
-d -t 192.168.1.10:20080 -r 10.244.0.9:8080
-D -t 192.168.1.10:30081
`},
		{name: "not named: refused on the node's address", policy: withReserved(testPolicy, named.Reserved), desired: desired, ops: "-D -t 192.168.1.10:30081\n",
			refused: "frontend -t 192.168.1.10:20080 is on an address of a node, of this host, of the API server or of the pod network: not served, its address not bound"},
		{name: "no Service: only the one in range removed", policy: withReserved(testPolicy, named.Reserved), desired: model.NewState(), ops: "-D -t 192.168.1.10:30081\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			observed := kubeProxys()
			ops, refused := Plan(tt.desired, observed, NewOwner(observed, []netip.Addr{node1}, tt.policy))
			var why []string
			for _, r := range refused {
				why = append(why, r.String())
			}
			if got := render(ops); got != tt.ops || strings.Join(why, "\n") != tt.refused {
				t.Errorf("ops:\n%s\nrefused: %q\nwant ops:\n%s\nrefused: %q", got, why, tt.ops, tt.refused)
			}
		})
	}
}

func withMembers(s model.State, es ...model.SetEntry) model.State {
	for _, e := range es {
		s.Sets[e] = struct{}{}
	}
	return s
}

func withReserved(p OwnerPolicy, r Reserved) OwnerPolicy {
	p.Reserved = r
	return p
}
