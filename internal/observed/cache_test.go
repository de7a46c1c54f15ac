package observed

import (
	"net/netip"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

var (
	web  = model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80)
	dns  = model.NewVSKey(model.UDP, netip.MustParseAddr("10.96.0.53"), 53)
	rs1  = model.RealServer{Addr: netip.MustParseAddrPort("10.244.1.2:8080"), Weight: 1}
	rs2  = model.RealServer{Addr: netip.MustParseAddrPort("10.244.2.2:8080"), Weight: 1}
	rs3  = model.RealServer{Addr: netip.MustParseAddrPort("10.244.1.3:53"), Weight: 1}
	vip  = netip.MustParseAddr("10.96.0.10")
	vip2 = netip.MustParseAddr("10.96.0.53")
	mem  = model.NewSetEntry("KUBE-CLUSTER-IP", vip, model.TCP, 80)
	mem2 = model.NewSetEntry("KUBE-CLUSTER-IP", vip2, model.UDP, 53)
)

func addVS(k model.VSKey) model.Op {
	return model.Op{Kind: model.AddService, VS: model.VirtualServer{Key: k, Scheduler: "rr"}}
}
func addRS(k model.VSKey, rs model.RealServer) model.Op {
	return model.Op{Kind: model.AddReal, VS: model.VirtualServer{Key: k}, RS: rs}
}
func delRS(k model.VSKey, rs model.RealServer) model.Op {
	return model.Op{Kind: model.DeleteReal, VS: model.VirtualServer{Key: k}, RS: rs}
}
func bind(a netip.Addr) model.Op          { return model.Op{Kind: model.BindAddr, Addr: a} }
func unbind(a netip.Addr) model.Op        { return model.Op{Kind: model.UnbindAddr, Addr: a} }
func addMember(e model.SetEntry) model.Op { return model.Op{Kind: model.AddSetEntry, Entry: e} }
func delMember(e model.SetEntry) model.Op { return model.Op{Kind: model.DeleteSetEntry, Entry: e} }

// base are the operations that build web (two real servers) and dns (one).
func base() []model.Op {
	return []model.Op{addMember(mem), addMember(mem2), addVS(web), addVS(dns), addRS(web, rs1), addRS(web, rs2), addRS(dns, rs3), bind(vip), bind(vip2)}
}

// kernel applies ops to a cache and to a state standing for the kernel.
type kernel struct {
	t     *testing.T
	c     *Cache
	state model.State
}

func newKernel(t *testing.T, ops ...model.Op) *kernel {
	k := &kernel{t: t, c: New(), state: model.NewState()}
	k.apply(ops...)
	return k
}

func (k *kernel) apply(ops ...model.Op) {
	for _, op := range ops {
		k.foreign(op)
		k.c.Apply(op, nil)
	}
	k.checkDigests()
}

// foreign changes the kernel behind the cache's back.
func (k *kernel) foreign(op model.Op) {
	if svc, ok := k.state.Services[op.VS.Key]; ok {
		k.state.Services[op.VS.Key] = svc.Clone()
	}
	op.ApplyTo(&k.state)
}

func (k *kernel) whole(since Revision) *Read {
	return WholeRead(since, dataplane.Observation{State: k.state.Clone()})
}

func (k *kernel) scan(since Revision) *Read {
	s := NewScan(since, 0, 0)
	v := s.Visitor()
	for _, key := range k.state.SortedKeys() {
		svc := k.state.Services[key]
		v.Service(svc.VirtualServer)
		for _, rs := range svc.Reals.All() {
			v.Real(key, rs)
		}
	}
	for a := range k.state.Addrs {
		v.Addr(a)
	}
	for e := range k.state.Sets {
		v.Member(e)
	}
	return s.Read()
}

func (k *kernel) checkDigests() {
	k.t.Helper()
	table, sets := k.c.Digests()
	st := k.c.State()
	if table != TableDigest(st.Services) || sets != MembersDigest(st.Sets) {
		k.t.Fatalf("digests out of step with the state:\n%s", st.Dump())
	}
}

// TestApply: every operation folds into the state and the digests alike.
func TestApply(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []model.Op
		want string
	}{
		{"build", nil, `-A -t 10.96.0.10:80 -s rr
  -a -t 10.96.0.10:80 -r 10.244.1.2:8080 -m -w 1
  -a -t 10.96.0.10:80 -r 10.244.2.2:8080 -m -w 1
-A -u 10.96.0.53:53 -s rr
  -a -u 10.96.0.53:53 -r 10.244.1.3:53 -m -w 1
addr 10.96.0.10
addr 10.96.0.53
set KUBE-CLUSTER-IP 10.96.0.10,tcp:80
set KUBE-CLUSTER-IP 10.96.0.53,udp:53
`},
		{"update service and real", []model.Op{
			{Kind: model.UpdateService, VS: model.VirtualServer{Key: web, Scheduler: "lc", Flags: model.FlagPersistent | model.FlagHashed, Timeout: 60}},
			{Kind: model.UpdateReal, VS: model.VirtualServer{Key: web}, RS: model.RealServer{Addr: rs1.Addr, Weight: 0}},
		}, `-A -t 10.96.0.10:80 -s lc -p 60
  -a -t 10.96.0.10:80 -r 10.244.1.2:8080 -m -w 0
  -a -t 10.96.0.10:80 -r 10.244.2.2:8080 -m -w 1
-A -u 10.96.0.53:53 -s rr
  -a -u 10.96.0.53:53 -r 10.244.1.3:53 -m -w 1
addr 10.96.0.10
addr 10.96.0.53
set KUBE-CLUSTER-IP 10.96.0.10,tcp:80
set KUBE-CLUSTER-IP 10.96.0.53,udp:53
`},
		{"delete everything of dns", []model.Op{delRS(dns, rs3), {Kind: model.DeleteService, VS: model.VirtualServer{Key: dns}}, unbind(vip2), delMember(mem2)}, `-A -t 10.96.0.10:80 -s rr
  -a -t 10.96.0.10:80 -r 10.244.1.2:8080 -m -w 1
  -a -t 10.96.0.10:80 -r 10.244.2.2:8080 -m -w 1
addr 10.96.0.10
set KUBE-CLUSTER-IP 10.96.0.10,tcp:80
`},
		{"re-create web whole", []model.Op{addVS(web)}, `-A -t 10.96.0.10:80 -s rr
-A -u 10.96.0.53:53 -s rr
  -a -u 10.96.0.53:53 -r 10.244.1.3:53 -m -w 1
addr 10.96.0.10
addr 10.96.0.53
set KUBE-CLUSTER-IP 10.96.0.10,tcp:80
set KUBE-CLUSTER-IP 10.96.0.53,udp:53
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newKernel(t, base()...)
			k.apply(tc.ops...)
			if got := k.c.State().Dump(); got != tc.want {
				t.Fatalf("state:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// TestHandedOutNeverChanges: a service handed out (Service, State) is
// never changed by a later write, and the desired one a cache shares
// never either; one the cache made and handed to nobody is changed in
// place (a cold start copies nothing).
func TestHandedOutNeverChanges(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handOut func(c *Cache) *model.Service
		inPlace bool
	}{
		{"Service", func(c *Cache) *model.Service { s, _ := c.Service(web); return s }, false},
		{"State", func(c *Cache) *model.Service { return c.State().Services[web] }, false},
		{"made and kept", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New()
			c.Apply(addVS(web), nil)
			c.Apply(addRS(web, rs1), nil)
			var held *model.Service
			if tc.handOut != nil {
				held = tc.handOut(c)
			} else {
				held = c.state.Services[web] // the test's peek, not a hand-out
			}
			before := held.Clone()
			c.Apply(addRS(web, rs2), nil)
			c.Apply(model.Op{Kind: model.UpdateService, VS: model.VirtualServer{Key: web, Scheduler: "lc"}}, nil)
			now, _ := c.Service(web)
			if tc.inPlace {
				if now != held {
					t.Fatal("a service handed to nobody was copied")
				}
				return
			}
			if !held.Equal(before) || held.Reals.Len() != 1 {
				t.Fatalf("a handed-out service changed: %v", held.Reals.All())
			}
			if now.Reals.Len() != 2 || now.Scheduler != "lc" {
				t.Fatalf("the cache lost the writes: %v %v", now.VirtualServer, now.Reals.All())
			}
		})
	}
}

// TestShareWant: once the kernel holds exactly what is wanted, the cache
// holds the wanted service itself; a later write copies it, never
// changing it.
func TestShareWant(t *testing.T) {
	want := &model.Service{VirtualServer: model.VirtualServer{Key: web, Scheduler: "rr"}, Reals: model.RealsOf([]model.RealServer{rs1, rs2})}
	c := New()
	for _, op := range []model.Op{addVS(web), addRS(web, rs1)} {
		c.Apply(op, want)
		if s, _ := c.Service(web); s == want {
			t.Fatalf("shared after %s, before the kernel holds what is wanted", op)
		}
	}
	c.Apply(addRS(web, rs2), want)
	if s, _ := c.Service(web); s != want {
		t.Fatal("not shared once the kernel holds what is wanted")
	}
	c.Apply(delRS(web, rs1), want)
	if want.Reals.Len() != 2 {
		t.Fatalf("a write changed the wanted service: %v", want.Reals.All())
	}
	if s, _ := c.Service(web); s.Reals.Len() != 1 {
		t.Fatalf("the write was lost: %v", s.Reals.All())
	}
}

// TestConnsGoWithTheirRealServer: the counters of a real server deleted,
// or of every real server of a virtual server deleted or re-created, are
// forgotten; counters are noted only for real servers the cache holds.
func TestConnsGoWithTheirRealServer(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   model.Op
		want int
	}{
		{"delete real", delRS(web, rs1), 1},
		{"delete service", model.Op{Kind: model.DeleteService, VS: model.VirtualServer{Key: web}}, 0},
		{"re-create service", addVS(web), 0},
		{"bind", bind(vip), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newKernel(t, base()...)
			k.c.NoteConns(web, map[netip.AddrPort]model.Conns{rs1.Addr: {Active: 1}, rs2.Addr: {Active: 2}, rs3.Addr: {Active: 3}})
			k.apply(tc.op)
			if n := len(k.c.Conns()); n != tc.want {
				t.Fatalf("%d counters kept, want %d: %v", n, tc.want, k.c.Conns())
			}
		})
	}
}

// Reserve keeps what the cache holds, sizing it for a start's table or
// not: a few entries served first stay in the cache, in its digests and
// in step with the kernel as the rest is applied.
func TestReserveKeepsWhatIsHeld(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		services, addrs, sets int
	}{
		{"a start's table, sized", 10000, 10000, 130000},
		{"a sync's few, not sized", 2, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newKernel(t, addMember(mem), addVS(web), addRS(web, rs1), bind(vip))
			k.c.Reserve(tc.services, tc.addrs, tc.sets)
			k.checkDigests()
			k.apply(addMember(mem2), addVS(dns), addRS(dns, rs3), addRS(web, rs2), bind(vip2))
			if got, want := k.c.State().Dump(), k.state.Dump(); got != want {
				t.Fatalf("the cache holds\n%s\nthe kernel\n%s", got, want)
			}
		})
	}
}
