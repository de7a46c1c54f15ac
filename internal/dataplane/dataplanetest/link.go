package dataplanetest

import (
	"net/netip"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
)

// linkTests are the contract of dataplane.Link.
var linkTests = []contractTest[dataplane.Dataplane]{
	{"Addresses", testAddresses},
	{"AddressesNeedLink", testAddressesNeedLink},
	{"InitIdempotent", testInitIdempotent},
	{"DeleteLink", testDeleteLink},
}

func testAddresses(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	must(t, "init", dp.Init(ctx))
	// The link's own addresses (an up link gets an IPv6 link-local one)
	// are not VIPs: a fresh link shows none.
	wantState(t, observe(t, ctx, dp), stateOf(nil))

	for _, a := range []netip.Addr{vip4, vip4b, vip6, vip6b} {
		must(t, "bind "+a.String(), dp.AddAddr(ctx, a))
	}
	wantState(t, observe(t, ctx, dp), stateOf([]netip.Addr{vip4, vip4b, vip6, vip6b}))

	mustFailWith(t, "bind v4 again", dp.AddAddr(ctx, vip4), dataplane.ErrExist)
	mustFailWith(t, "bind v6 again", dp.AddAddr(ctx, vip6), dataplane.ErrExist)

	must(t, "unbind v4", dp.DeleteAddr(ctx, vip4))
	must(t, "unbind v6", dp.DeleteAddr(ctx, vip6))
	wantState(t, observe(t, ctx, dp), stateOf([]netip.Addr{vip4b, vip6b}))

	mustFailWith(t, "unbind v4 again", dp.DeleteAddr(ctx, vip4), dataplane.ErrNotExist)
	mustFailWith(t, "unbind v6 again", dp.DeleteAddr(ctx, vip6), dataplane.ErrNotExist)
}

func testAddressesNeedLink(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	mustFailWith(t, "bind before init", dp.AddAddr(ctx, vip4), dataplane.ErrNotExist)
	// Without the link nothing is bound, and that is not an error.
	wantState(t, observe(t, ctx, dp), stateOf(nil))
}

func testInitIdempotent(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	must(t, "first init", dp.Init(ctx))
	must(t, "bind", dp.AddAddr(ctx, vip4))
	must(t, "add service", dp.AddService(ctx, rr(tcp4(vip4, 80))))
	must(t, "second init", dp.Init(ctx))
	// A restarted agent runs Init again: nothing it finds may be lost.
	wantState(t, observe(t, ctx, dp), stateOf([]netip.Addr{vip4}, svcOf(rr(tcp4(vip4, 80)))))
}

func testDeleteLink(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	must(t, "init", dp.Init(ctx))
	must(t, "bind v4", dp.AddAddr(ctx, vip4))
	must(t, "bind v6", dp.AddAddr(ctx, vip6))
	must(t, "add service", dp.AddService(ctx, rr(tcp4(vip4, 80))))
	must(t, "delete link", dp.DeleteLink(ctx))
	// The addresses go with the link; the IPVS table does not.
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(rr(tcp4(vip4, 80)))))
	mustFailWith(t, "bind without link", dp.AddAddr(ctx, vip4), dataplane.ErrNotExist)
	mustFailWith(t, "delete link again", dp.DeleteLink(ctx), dataplane.ErrNotExist)

	must(t, "init again", dp.Init(ctx))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(rr(tcp4(vip4, 80)))))
	must(t, "bind after re-init", dp.AddAddr(ctx, vip4))
	wantState(t, observe(t, ctx, dp), stateOf([]netip.Addr{vip4}, svcOf(rr(tcp4(vip4, 80)))))
}
