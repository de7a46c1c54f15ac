package dataplanetest

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// batchTests are the contract of dataplane.Batch: a batch fails operation
// by operation, each exactly as it would alone (the other parts' contracts
// make their writes as batches of one), and does the rest.
var batchTests = []contractTest[dataplane.Dataplane]{
	{"EachErrorItsChange", testBatchEachErrorItsChange},
	{"ManyWindows", testBatchManyWindows},
	{"CanceledNotTried", testBatchCanceled},
	{"SetPastKernelDefault", testBatchSetPastKernelDefault},
	{"FullSet", testBatchFullSet},
}

// step is one change of a batch and the error it must fail with (nil: made).
type step struct {
	c    model.Op
	want error
}

// applySteps applies the steps as one batch and checks each error.
func applySteps(t *testing.T, ctx context.Context, dp dataplane.Dataplane, steps []step) {
	t.Helper()
	changes := make([]model.Op, len(steps))
	for i, s := range steps {
		changes[i] = s.c
	}
	errs := dp.Apply(ctx, changes)
	if len(errs) != len(steps) {
		t.Fatalf("Apply of %d changes returned %d errors", len(steps), len(errs))
	}
	for i, s := range steps {
		switch {
		case s.want == nil && errs[i] != nil:
			t.Errorf("change %d (%s): %v, want it made", i, s.c.Kind, errs[i])
		case s.want != nil && !errors.Is(errs[i], s.want):
			t.Errorf("change %d (%s): got %v, want an error wrapping %q", i, s.c.Kind, errs[i], s.want)
		}
	}
}

func addSvc(vs model.VirtualServer) model.Op {
	return model.Op{Kind: model.AddService, VS: vs}
}

func realChange(kind model.OpKind, k model.VSKey, rs model.RealServer) model.Op {
	return model.Op{Kind: kind, VS: model.VirtualServer{Key: k}, RS: rs}
}

func addrChange(kind model.OpKind, a netip.Addr) model.Op {
	return model.Op{Kind: kind, Addr: a}
}

func setChange(kind model.OpKind, e model.SetEntry) model.Op {
	return model.Op{Kind: kind, Entry: e}
}

// testBatchEachErrorItsChange: one batch of every kind, in both families,
// where some changes fail (taken, missing, a missing service's real): each
// error is its own change's, and every other change is made.
func testBatchEachErrorItsChange(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	must(t, "init", dp.Init(ctx))
	must(t, "ensure shim", dp.EnsureShim(ctx, dualStack))
	k4, k6, gone := tcp4(vip4, 80), model.NewVSKey(model.UDP, vip6, 53), tcp4(vip4b, 80)
	wrr := rr(k4)
	wrr.Scheduler = "wrr"
	member := shim.Entry(shim.ClusterIP, vip4, model.TCP, 80)
	member6 := shim.LoopBackEntry(model.UDP, real6a)
	missing := shim.Entry(shim.NoEndpoints, vip4b, model.TCP, 80)
	applySteps(t, ctx, dp, []step{
		{addSvc(rr(k4)), nil},
		{addSvc(rr(k4)), dataplane.ErrExist},
		{addSvc(rr(k6)), nil},
		{model.Op{Kind: model.UpdateService, VS: wrr}, nil},
		{model.Op{Kind: model.UpdateService, VS: rr(gone)}, dataplane.ErrNotExist},
		{realChange(model.AddReal, k4, masq(real4a, 1)), nil},
		{realChange(model.AddReal, gone, masq(real4a, 1)), dataplane.ErrNotExist},
		{realChange(model.AddReal, k4, masq(real4a, 1)), dataplane.ErrExist},
		{realChange(model.AddReal, k4, masq(real4b, 1)), nil},
		{realChange(model.AddReal, k6, masq(real6a, 1)), nil},
		{realChange(model.UpdateReal, k4, masq(real4b, 0)), nil},
		{realChange(model.UpdateReal, k4, masq(netip.MustParseAddrPort("10.244.9.9:8080"), 0)), dataplane.ErrNotExist},
		{realChange(model.DeleteReal, k4, masq(real4a, 0)), nil},
		{realChange(model.DeleteReal, k4, masq(real4a, 0)), dataplane.ErrNotExist},
		{model.Op{Kind: model.DeleteService, VS: rr(gone)}, dataplane.ErrNotExist},
		{addrChange(model.BindAddr, vip4), nil},
		{addrChange(model.BindAddr, vip4), dataplane.ErrExist},
		{addrChange(model.BindAddr, vip6), nil},
		{addrChange(model.UnbindAddr, vip4b), dataplane.ErrNotExist},
		{addrChange(model.BindAddr, vip6b), nil},
		{addrChange(model.UnbindAddr, vip6b), nil},
		{setChange(model.AddSetEntry, member), nil},
		{setChange(model.AddSetEntry, member), dataplane.ErrExist},
		{setChange(model.DeleteSetEntry, missing), dataplane.ErrNotExist},
		{setChange(model.AddSetEntry, member6), nil},
	})
	want := stateOf([]netip.Addr{vip4, vip6}, svcOf(wrr, masq(real4b, 0)), svcOf(rr(k6), masq(real6a, 1)))
	want.Sets[member] = struct{}{}
	want.Sets[member6] = struct{}{}
	wantState(t, observe(t, ctx, dp), want)
}

// testBatchManyWindows: batches longer than any one send (hundreds of
// changes) with failures spread through them: the errors still land on
// their own changes.
func testBatchManyWindows(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	must(t, "init", dp.Init(ctx))
	must(t, "ensure shim", dp.EnsureShim(ctx, dualStack))
	k := tcp4(vip4, 80)
	must(t, "add service", addService(ctx, dp, rr(k)))
	want := stateOf(nil, svcOf(rr(k)))
	var reals, addrs, members []step
	for i := range 700 {
		rs := masq(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, byte(i / 250), byte(i%250 + 1)}), 8080), 1)
		vip := netip.AddrFrom4([4]byte{10, 97, byte(i / 250), byte(i%250 + 1)})
		m := shim.Entry(shim.ClusterIP, vip, model.TCP, 80)
		if i%97 == 13 { // made beforehand: the batch's change fails
			must(t, "add real", addReal(ctx, dp, k, rs))
			must(t, "bind", bindAddr(ctx, dp, vip))
			must(t, "add member", addSetEntry(ctx, dp, m))
			reals = append(reals, step{realChange(model.AddReal, k, rs), dataplane.ErrExist})
			addrs = append(addrs, step{addrChange(model.BindAddr, vip), dataplane.ErrExist})
			members = append(members, step{setChange(model.AddSetEntry, m), dataplane.ErrExist})
		} else {
			reals = append(reals, step{realChange(model.AddReal, k, rs), nil})
			addrs = append(addrs, step{addrChange(model.BindAddr, vip), nil})
			members = append(members, step{setChange(model.AddSetEntry, m), nil})
		}
		want.Services[k].Reals.Set(rs)
		want.Addrs[vip] = struct{}{}
		want.Sets[m] = struct{}{}
	}
	applySteps(t, ctx, dp, append(append(reals, addrs...), members...))
	wantState(t, observe(t, ctx, dp), want)
}

// testBatchSetPastKernelDefault: a set holds more members than the
// kernel's default maxelem (65,536): at 10,000 Services × 10 endpoints the
// LOOP-BACK set needs 100,000 (issue 12's 10k bench found it full).
func testBatchSetPastKernelDefault(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	must(t, "init", dp.Init(ctx))
	must(t, "ensure shim", dp.EnsureShim(ctx, shim.Config{Families: model.Families{IPv4: true}}))
	const n = 65536 + 1000
	steps := make([]step, 0, n)
	for i := range n {
		ep := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(128 + i>>16), byte(i >> 8), byte(i)}), 8080)
		steps = append(steps, step{setChange(model.AddSetEntry, shim.LoopBackEntry(model.TCP, ep)), nil})
	}
	applySteps(t, ctx, dp, steps)
	if got := len(observe(t, ctx, dp).State.Sets); got != n {
		t.Fatalf("after %d adds the kernel holds %d members", n, got)
	}
}

// testBatchFullSet: in a batch, each add past a full set's maxelem fails
// with ErrFull, and a delete in the same batch makes room for the next.
func testBatchFullSet(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	makeSet(t, ctx, dp, setDef(shim.VIPs, false), 2)
	m := vipMembers(5)
	add := func(e model.SetEntry) model.Op { return setChange(model.AddSetEntry, e) }
	applySteps(t, ctx, dp, []step{
		{add(m[0]), nil}, {add(m[1]), nil}, {add(m[2]), dataplane.ErrFull}, {add(m[3]), dataplane.ErrFull},
		{setChange(model.DeleteSetEntry, m[0]), nil}, {add(m[4]), nil}, {add(m[2]), dataplane.ErrFull},
	})
	want := stateOf(nil)
	want.Sets[m[1]], want.Sets[m[4]] = struct{}{}, struct{}{}
	wantState(t, observe(t, ctx, dp), want)
}

// testBatchCanceled: with its context ended, Apply sends nothing: every
// change fails as not tried, and the kernel is unchanged.
func testBatchCanceled(t *testing.T, dp dataplane.Dataplane) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var steps []step
	for i := range 3 {
		steps = append(steps, step{addSvc(rr(tcp4(vip4, uint16(80+i)))), dataplane.ErrNotTried})
	}
	applySteps(t, ctx, dp, steps)
	errs := dp.Apply(ctx, []model.Op{addSvc(rr(tcp4(vip4, 80)))})
	if !errors.Is(errs[0], context.Canceled) {
		t.Errorf("a change not tried: %v, want it to wrap context.Canceled", errs[0])
	}
	wantState(t, observe(t, ctxFor(t), dp), stateOf(nil))
}
