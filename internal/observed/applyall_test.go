package observed

import (
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// TestApplyAllEqualsApply: folding random batches of operations at once
// leaves the cache that Apply one by one leaves (state, digests,
// connection counters), and never changes a virtual server it handed out.
func TestApplyAllEqualsApply(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	addr := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)}), 8080)
	}
	keys := []model.VSKey{web, dns}
	for round := range 300 {
		one, all := New(), New()
		var setup []model.Op
		for _, k := range keys {
			setup = append(setup, addVS(k))
			for i := range 40 {
				if rnd.IntN(2) == 0 {
					setup = append(setup, addRS(k, model.RealServer{Addr: addr(i), Weight: 1}))
				}
			}
		}
		for _, c := range []*Cache{one, all} {
			for _, op := range setup {
				c.Apply(op, nil)
			}
			for _, k := range keys {
				conns := map[netip.AddrPort]model.Conns{}
				svc, _ := c.Service(k)
				for _, rs := range svc.Reals.All() {
					conns[rs.Addr] = model.Conns{Active: 1}
				}
				c.NoteConns(k, conns)
			}
		}
		handed := maps.Clone(all.State().Services) // the maps are the cache's
		before := map[model.VSKey][]model.RealServer{}
		for k, svc := range handed {
			before[k] = slices.Clone(svc.Reals.All())
		}
		var ops []model.Op
		for _, k := range keys {
			for i := range 45 {
				if rnd.IntN(4) == 0 {
					kind := []model.OpKind{model.AddReal, model.UpdateReal, model.DeleteReal}[rnd.IntN(3)]
					ops = append(ops, model.Op{Kind: kind, VS: model.VirtualServer{Key: k}, RS: model.RealServer{Addr: addr(i), Weight: rnd.IntN(2)}})
				}
			}
		}
		if rnd.IntN(4) == 0 && len(ops) > 2 { // out of order: not one run
			ops[0], ops[len(ops)-1] = ops[len(ops)-1], ops[0]
		}
		for _, op := range ops {
			one.Apply(op, nil)
		}
		all.ApplyAll(ops, nil)
		if !reflect.DeepEqual(one.State(), all.State()) {
			t.Fatalf("round %d: states differ after %v", round, ops)
		}
		if t1, s1 := one.Digests(); true {
			if t2, s2 := all.Digests(); t1 != t2 || s1 != s2 {
				t.Fatalf("round %d: digests differ", round)
			}
		}
		if !maps.Equal(one.Conns(), all.Conns()) {
			t.Fatalf("round %d: connection counters differ", round)
		}
		for k, svc := range handed {
			if !slices.Equal(svc.Reals.All(), before[k]) {
				t.Fatalf("round %d: a virtual server handed out was changed in place", round)
			}
		}
	}
}

// TestConnsOfHeldRealServersOnly: a read of a virtual server's counters is
// taken over whole, but only the real servers the cache holds are
// answered for, and a real server added after the read has none known.
func TestConnsOfHeldRealServersOnly(t *testing.T) {
	c := New()
	for _, op := range []model.Op{addVS(web), addRS(web, rs1)} {
		c.Apply(op, nil)
	}
	c.NoteConns(web, map[netip.AddrPort]model.Conns{rs1.Addr: {Active: 1}, rs2.Addr: {Active: 2}})
	ref1, ref2 := dataplane.RealRef{VS: web, RS: rs1.Addr}, dataplane.RealRef{VS: web, RS: rs2.Addr}
	if n, ok := c.Conn(ref1); !ok || n.Active != 1 {
		t.Fatalf("held real server's counters %v, %v", n, ok)
	}
	if _, ok := c.Conn(ref2); ok || len(c.Conns()) != 1 {
		t.Fatalf("counters of a real server not held are answered: %v", c.Conns())
	}
	c.Apply(addRS(web, rs2), nil)
	if _, ok := c.Conn(ref2); ok {
		t.Fatal("a real server added after the read has its counters")
	}
}
