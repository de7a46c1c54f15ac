package observed

import (
	"maps"
	"net/netip"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
)

// scopeDump renders a fold's scope in the state's text form.
func scopeDump(sc plan.Scope) string {
	st := model.State{Services: map[model.VSKey]*model.Service{}, Addrs: sc.Addrs, Sets: sc.Sets}
	for k := range sc.Keys {
		st.Services[k] = &model.Service{VirtualServer: model.VirtualServer{Key: k}}
	}
	return st.Dump()
}

// TestFold: a read folds what someone else changed before it, and skips
// exactly the keys the cache wrote after the read began, whatever kind.
func TestFold(t *testing.T) {
	webOnly := "-A -t 10.96.0.10:80 -s \n"
	for _, tc := range []struct {
		name    string
		foreign []model.Op // someone else, before the read
		during  []model.Op // the agent, after the read began
		tried   []model.Op // the agent, failed, after the read began
		scan    bool
		addrs   bool // a read of the link's addresses alone
		rules   bool // a read of nothing the cache holds (the rules alone)
		want    Folded
		scope   string
	}{
		{name: "nothing", want: Folded{}},
		{name: "real server deleted", foreign: []model.Op{delRS(web, rs1)}, want: Folded{Drifted: 1}, scope: webOnly},
		{name: "virtual server added", foreign: []model.Op{addVS(model.NewVSKey(model.TCP, vip, 443))}, want: Folded{Drifted: 1},
			scope: "-A -t 10.96.0.10:443 -s \n"},
		{name: "address unbound", foreign: []model.Op{unbind(vip2)}, want: Folded{Drifted: 1}, scope: "addr 10.96.0.53\n"},
		{name: "member removed", foreign: []model.Op{delMember(mem2)}, want: Folded{Drifted: 1},
			scope: "set KUBE-CLUSTER-IP 10.96.0.53,udp:53\n"},
		{name: "real server deleted, web written since", foreign: []model.Op{delRS(web, rs1)},
			during: []model.Op{addRS(web, model.RealServer{Addr: rs3.Addr, Weight: 1})}, want: Folded{Drifted: 1}, scope: webOnly},
		{name: "real server deleted, then written since", foreign: []model.Op{delRS(web, rs1)},
			during: []model.Op{addRS(web, rs1)}, want: Folded{}},
		{name: "web written since", during: []model.Op{delRS(web, rs1), addVS(dns), addRS(dns, rs3)}, want: Folded{}},
		{name: "real server deleted, a write to web failed since", foreign: []model.Op{delRS(web, rs1)},
			tried: []model.Op{addRS(web, model.RealServer{Addr: rs3.Addr, Weight: 1})}, want: Folded{}},
		{name: "real server deleted, dns written since", foreign: []model.Op{delRS(web, rs1)},
			during: []model.Op{delRS(dns, rs3)}, want: Folded{Drifted: 1}, scope: webOnly},
		{name: "address unbound, bound again since", foreign: []model.Op{unbind(vip2)}, during: []model.Op{bind(vip2)}, want: Folded{}},
		{name: "member removed, added again since", foreign: []model.Op{delMember(mem2)}, during: []model.Op{addMember(mem2)}, want: Folded{}},
		{name: "scan, nothing", scan: true, want: Folded{}},
		{name: "scan, web written since", scan: true, during: []model.Op{delRS(web, rs2), delMember(mem)}, want: Folded{}},
		{name: "scan, real server deleted", scan: true, foreign: []model.Op{delRS(dns, rs3)}, want: Folded{Whole: true}},
		{name: "scan, member removed", scan: true, foreign: []model.Op{delMember(mem2)}, want: Folded{Whole: true}},
		{name: "scan, address unbound", scan: true, foreign: []model.Op{unbind(vip2)}, want: Folded{Drifted: 1}, scope: "addr 10.96.0.53\n"},
		{name: "scan, real server deleted, web written since", scan: true, foreign: []model.Op{delRS(web, rs1)},
			during: []model.Op{addRS(web, model.RealServer{Addr: rs3.Addr, Weight: 1})}, want: Folded{Whole: true}},
		{name: "scan, web written twice since", scan: true,
			during: []model.Op{delRS(web, rs1), addRS(web, model.RealServer{Addr: rs3.Addr, Weight: 1}), {Kind: model.DeleteService, VS: model.VirtualServer{Key: dns}}},
			want:   Folded{}},
		{name: "scan, real server deleted, a write to web failed since", scan: true, foreign: []model.Op{delRS(web, rs1)},
			tried: []model.Op{addRS(web, model.RealServer{Addr: rs3.Addr, Weight: 1})}, want: Folded{}},
		{name: "addresses, address unbound", addrs: true, foreign: []model.Op{unbind(vip2)}, want: Folded{Drifted: 1}, scope: "addr 10.96.0.53\n"},
		{name: "addresses, address bound", addrs: true, foreign: []model.Op{bind(netip.MustParseAddr("10.96.0.99"))}, want: Folded{Drifted: 1}, scope: "addr 10.96.0.99\n"},
		{name: "addresses, address unbound, bound again since", addrs: true, foreign: []model.Op{unbind(vip2)}, during: []model.Op{bind(vip2)}, want: Folded{}},
		{name: "addresses, the table and the sets left alone", addrs: true, foreign: []model.Op{delRS(dns, rs3), delMember(mem2)}, want: Folded{}},
		{name: "rules alone, address unbound", rules: true, foreign: []model.Op{unbind(vip2)}, want: Folded{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newKernel(t, base()...)
			for _, op := range tc.foreign {
				k.foreign(op)
			}
			since := k.c.Begin()
			rd := k.whole(since)
			switch {
			case tc.scan:
				rd = k.scan(since)
			case tc.addrs:
				rd = AddrsRead(since, maps.Clone(k.state.Addrs))
			case tc.rules:
				rd = AddrsRead(since, nil)
			}
			k.apply(tc.during...)
			for _, op := range tc.tried {
				k.c.Tried(op)
			}
			scope := plan.NewScope()
			if got := k.c.Fold(rd, scope); got != tc.want {
				t.Fatalf("fold: %+v, want %+v", got, tc.want)
			}
			if got := scopeDump(scope); got != tc.scope {
				t.Fatalf("scope:\n%s\nwant:\n%s", got, tc.scope)
			}
			k.checkDigests()
			if tc.want == (Folded{}) {
				return
			}
			if tc.want.Whole {
				// The whole read the scan asks for repairs the cache.
				k.c.Fold(k.whole(k.c.Begin()), plan.NewScope())
			}
			k.checkDigests()
			if got, want := k.c.State().Dump(), k.state.Dump(); got != want {
				t.Fatalf("the cache is not the kernel after the fold:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestFoldAfterLoadIsStale: a read begun before a whole Load is older
// than the cache: nothing of it is folded.
func TestFoldAfterLoadIsStale(t *testing.T) {
	k := newKernel(t, base()...)
	k.foreign(delRS(web, rs1))
	rd := k.whole(k.c.Begin())
	k.foreign(addRS(web, rs1))
	k.c.Load(dataplane.Observation{State: k.state.Clone()})
	if got := k.c.Fold(rd, plan.NewScope()); got != (Folded{Stale: true}) {
		t.Fatalf("fold: %+v, want a stale read", got)
	}
	if s, _ := k.c.Service(web); s.Reals.Len() != 2 {
		t.Fatalf("a stale read was folded: %v", s.Reals.All())
	}
}

// TestRevisionsLetGo: the revisions of writes are kept only while a read
// is open, and let go of once every read is folded or dropped.
func TestRevisionsLetGo(t *testing.T) {
	held := func(c *Cache) int {
		c.revs.mu.Lock()
		defer c.revs.mu.Unlock()
		return len(c.revs.moved.vs) + len(c.revs.moved.addrs) + len(c.revs.moved.sets)
	}
	k := newKernel(t, base()...)
	if n := held(k.c); n != 0 {
		t.Fatalf("%d revisions kept with no read open", n)
	}
	for _, end := range []func(c *Cache){
		func(c *Cache) { c.Fold(k.whole(0), plan.NewScope()) },
		func(c *Cache) { c.Drop() },
	} {
		k.c.Begin()
		k.apply(delRS(web, rs1), unbind(vip), addMember(mem2))
		if n := held(k.c); n != 3 {
			t.Fatalf("%d revisions kept during a read, want 3", n)
		}
		end(k.c)
		if n := held(k.c); n != 0 {
			t.Fatalf("%d revisions kept after the read", n)
		}
		k.apply(addRS(web, rs1), bind(vip))
	}
}

// TestTriedMovesTheKey: an operation that failed may have been made: a
// read begun before it is not trusted on its key.
func TestTriedMovesTheKey(t *testing.T) {
	k := newKernel(t, base()...)
	k.foreign(delRS(web, rs1))
	rd := k.whole(k.c.Begin())
	k.c.Tried(addRS(web, rs1))
	if got := k.c.Fold(rd, plan.NewScope()); got != (Folded{}) {
		t.Fatalf("fold: %+v, want web skipped", got)
	}
}

// TestHashFollowsEquality: two virtual servers hash alike exactly when
// they are Equal: the hash is of the canonical form Equal compares.
func TestHashFollowsEquality(t *testing.T) {
	a := model.VirtualServer{Key: web, Scheduler: "rr", Flags: model.FlagPersistent, Timeout: 5}
	for _, tc := range []struct {
		name   string
		change func(*model.VirtualServer)
	}{
		{"kernel's hashed flag", func(v *model.VirtualServer) { v.Flags |= model.FlagHashed }},
		{"scheduler", func(v *model.VirtualServer) { v.Scheduler = "lc" }},
		{"timeout", func(v *model.VirtualServer) { v.Timeout = 6 }},
		{"flags", func(v *model.VirtualServer) { v.Flags = model.FlagOnePacket }},
		{"key", func(v *model.VirtualServer) { v.Key = dns }},
	} {
		b := a
		tc.change(&b)
		if eq, same := a.Equal(b), VSHash(a) == VSHash(b); eq != same {
			t.Errorf("%s: Equal %v, same hash %v", tc.name, eq, same)
		}
	}
}

// TestScanOrderFree: a scan digests the same whatever order the reader
// hands the entries in, the virtual servers first and their real servers
// interleaved after them as much as each after its own.
func TestScanOrderFree(t *testing.T) {
	k := newKernel(t, base()...)
	grouped := k.scan(0)
	s := NewScan(0, 0, 0)
	v := s.Visitor()
	keys := k.state.SortedKeys()
	for _, key := range keys {
		v.Service(k.state.Services[key].VirtualServer)
	}
	for i := 0; ; i++ { // the i-th real server of each virtual server in turn
		handed := false
		for j := len(keys) - 1; j >= 0; j-- {
			if reals := k.state.Services[keys[j]].Reals.All(); i < len(reals) {
				v.Real(keys[j], reals[i])
				handed = true
			}
		}
		if !handed {
			break
		}
	}
	for e := range k.state.Sets {
		v.Member(e)
	}
	mixed := s.Read()
	if len(keys) < 2 || mixed.table != grouped.table || !maps.Equal(mixed.perVS, grouped.perVS) {
		t.Fatalf("%d virtual servers: interleaved %+v %v, grouped %+v %v", len(keys), mixed.table, mixed.perVS, grouped.table, grouped.perVS)
	}
}
