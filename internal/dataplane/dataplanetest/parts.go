package dataplanetest

import (
	"maps"

	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// partsTests are about the partial reads (dataplane.Reader) the drift
// check spreads over time: each must show what the whole read shows.
var partsTests = []contractTest[dataplane.Dataplane]{
	{"ServicesAsObserved", testObserveServices},
	{"TableAsObserved", testObserveTable},
}

// partsFixture programs two virtual servers (one with two reals), a VIP
// and a set member, and returns the whole read of it.
func partsFixture(t *testing.T, dp dataplane.Dataplane) (dataplane.Reader, dataplane.Observation) {
	t.Helper()
	rd, ok := dp.(dataplane.Reader)
	if !ok {
		t.Fatalf("%T is no dataplane.Reader", dp)
	}
	ctx := ctxFor(t)
	a, b := tcp4(vip4, 80), model.NewVSKey(model.UDP, vip6, 53)
	must(t, "init", dp.Init(ctx))
	must(t, "bind", dp.AddAddr(ctx, vip4))
	must(t, "add service a", dp.AddService(ctx, rr(a)))
	must(t, "add real a", dp.AddReal(ctx, a, masq(real4a, 1)))
	must(t, "add real b", dp.AddReal(ctx, a, masq(real4b, 0)))
	must(t, "add service b", dp.AddService(ctx, rr(b)))
	must(t, "ensure shim", dp.EnsureShim(ctx, dualStack))
	must(t, "add set member", dp.AddSetEntry(ctx, shim.Entry(shim.ClusterIP, vip4, model.TCP, 80)))
	return rd, observe(t, ctx, dp)
}

// testObserveServices: the named virtual servers come back as Observe
// shows them, reals and counters included; a missing one is left out,
// not an error; nothing else is read.
func testObserveServices(t *testing.T, dp dataplane.Dataplane) {
	rd, whole := partsFixture(t, dp)
	a, b := tcp4(vip4, 80), model.NewVSKey(model.UDP, vip6, 53)
	missing := tcp4(vip4, 81)
	got, err := rd.ObserveServices(ctxFor(t), []model.VSKey{a, missing, b})
	must(t, "observe services", err)
	want := model.NewState()
	want.Services[a], want.Services[b] = whole.State.Services[a], whole.State.Services[b]
	wantState(t, got, want)
	for ref, c := range whole.Conns {
		if got.Conns[ref] != c {
			t.Errorf("counters of %v: got %+v, want %+v", ref, got.Conns[ref], c)
		}
	}
	if len(got.Conns) != len(whole.Conns) {
		t.Errorf("counters: got %d, want %d", len(got.Conns), len(whole.Conns))
	}
	none, err := rd.ObserveServices(ctxFor(t), nil)
	must(t, "observe no services", err)
	wantState(t, none, model.NewState())
}

// testObserveTable: the table read lists every virtual server (without
// reals), the addresses and the set members Observe shows.
func testObserveTable(t *testing.T, dp dataplane.Dataplane) {
	rd, whole := partsFixture(t, dp)
	got, err := rd.ObserveTable(ctxFor(t))
	must(t, "observe table", err)
	want := whole.State.Clone()
	for k, svc := range want.Services {
		want.Services[k] = &model.Service{VirtualServer: svc.VirtualServer}
	}
	if len(got.State.Services) != len(want.Services) {
		t.Fatalf("table: got %d virtual servers, want %d", len(got.State.Services), len(want.Services))
	}
	for k, svc := range want.Services {
		g, ok := got.State.Services[k]
		if !ok || !g.VirtualServer.Equal(svc.VirtualServer) || len(g.Reals) != 0 {
			t.Errorf("table: virtual server %s: got %+v, want %+v without reals", k, g, svc.VirtualServer)
		}
	}
	if !maps.Equal(got.State.Addrs, want.Addrs) || !maps.Equal(got.State.Sets, want.Sets) {
		t.Errorf("table: addresses %v sets %v, want %v and %v", got.State.Addrs, got.State.Sets, want.Addrs, want.Sets)
	}
}
