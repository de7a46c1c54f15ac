package dataplanetest

import (
	"errors"
	"io/fs"
	"net/netip"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// linkTests are the contract of dataplane.Link.
var linkTests = []contractTest[dataplane.Dataplane]{
	{"Addresses", testAddresses},
	{"AddressesNeedLink", testAddressesNeedLink},
	{"InitIdempotent", testInitIdempotent},
	{"DeleteLink", testDeleteLink},
	{"Probe", testProbe},
	{"IPv6Disabled", testIPv6Disabled},
}

// IPv6Switch is what a dataplane under test offers to switch IPv6 off on
// its link, as a node's sysctls do (net.ipv6.conf.*.disable_ipv6): the
// fake's control, or a sysctl write on a real kernel. A dataplane without
// it skips the test that needs it.
type IPv6Switch interface {
	SetIPv6Disabled(off bool) error
}

func testAddresses(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	must(t, "init", dp.Init(ctx))
	// The link's own addresses (an up link gets an IPv6 link-local one)
	// are not VIPs: a fresh link shows none.
	wantState(t, observe(t, ctx, dp), stateOf(nil))

	for _, a := range []netip.Addr{vip4, vip4b, vip6, vip6b} {
		must(t, "bind "+a.String(), bindAddr(ctx, dp, a))
	}
	wantState(t, observe(t, ctx, dp), stateOf([]netip.Addr{vip4, vip4b, vip6, vip6b}))

	mustFailWith(t, "bind v4 again", bindAddr(ctx, dp, vip4), dataplane.ErrExist)
	mustFailWith(t, "bind v6 again", bindAddr(ctx, dp, vip6), dataplane.ErrExist)

	must(t, "unbind v4", unbindAddr(ctx, dp, vip4))
	must(t, "unbind v6", unbindAddr(ctx, dp, vip6))
	wantState(t, observe(t, ctx, dp), stateOf([]netip.Addr{vip4b, vip6b}))

	mustFailWith(t, "unbind v4 again", unbindAddr(ctx, dp, vip4), dataplane.ErrNotExist)
	mustFailWith(t, "unbind v6 again", unbindAddr(ctx, dp, vip6), dataplane.ErrNotExist)
}

func testAddressesNeedLink(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	mustFailWith(t, "bind before init", bindAddr(ctx, dp, vip4), dataplane.ErrNotExist)
	// Without the link nothing is bound, and that is not an error.
	wantState(t, observe(t, ctx, dp), stateOf(nil))
}

func testInitIdempotent(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	must(t, "first init", dp.Init(ctx))
	must(t, "bind", bindAddr(ctx, dp, vip4))
	must(t, "add service", addService(ctx, dp, rr(tcp4(vip4, 80))))
	must(t, "second init", dp.Init(ctx))
	// A restarted agent runs Init again: nothing it finds may be lost.
	wantState(t, observe(t, ctx, dp), stateOf([]netip.Addr{vip4}, svcOf(rr(tcp4(vip4, 80)))))
}

func testDeleteLink(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	must(t, "init", dp.Init(ctx))
	must(t, "bind v4", bindAddr(ctx, dp, vip4))
	must(t, "bind v6", bindAddr(ctx, dp, vip6))
	must(t, "add service", addService(ctx, dp, rr(tcp4(vip4, 80))))
	must(t, "delete link", dp.DeleteLink(ctx))
	// The addresses go with the link; the IPVS table does not.
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(rr(tcp4(vip4, 80)))))
	mustFailWith(t, "bind without link", bindAddr(ctx, dp, vip4), dataplane.ErrNotExist)
	mustFailWith(t, "delete link again", dp.DeleteLink(ctx), dataplane.ErrNotExist)

	must(t, "init again", dp.Init(ctx))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(rr(tcp4(vip4, 80)))))
	must(t, "bind after re-init", bindAddr(ctx, dp, vip4))
	wantState(t, observe(t, ctx, dp), stateOf([]netip.Addr{vip4}, svcOf(rr(tcp4(vip4, 80)))))
}

// testProbe: the canary answers on a kernel the agent can program, and
// fails once the link is gone (nothing could be bound any more).
func testProbe(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	must(t, "init", dp.Init(ctx))
	must(t, "probe", dp.Probe(ctx))
	must(t, "delete link", dp.DeleteLink(ctx))
	if err := dp.Probe(ctx); err == nil {
		t.Fatal("probe without the link succeeded")
	}
	must(t, "init again", dp.Init(ctx))
	must(t, "probe after re-init", dp.Probe(ctx))
}

// testIPv6Disabled: with IPv6 disabled on the link the kernel drops the
// link's IPv6 addresses and refuses new ones with EACCES (a permission
// error about that one address: the probe still answers and IPv4 binds
// go on), and LinkFamilies says so; switched on again, IPv6 binds work.
func testIPv6Disabled(t *testing.T, dp dataplane.Dataplane) {
	sw, ok := dp.(IPv6Switch)
	if !ok {
		t.Skip("this dataplane cannot switch IPv6 off")
	}
	ctx := ctxFor(t)
	must(t, "init", dp.Init(ctx))
	families := func(want model.Families) {
		t.Helper()
		got, err := dp.LinkFamilies(ctx)
		must(t, "link families", err)
		if got != want {
			t.Fatalf("link families %s, want %s", got, want)
		}
	}
	dual := model.Families{IPv4: true, IPv6: true}
	families(dual)
	must(t, "bind v6", bindAddr(ctx, dp, vip6))
	must(t, "bind v4", bindAddr(ctx, dp, vip4))

	must(t, "switch IPv6 off", sw.SetIPv6Disabled(true))
	t.Cleanup(func() { _ = sw.SetIPv6Disabled(false) })
	families(model.Families{IPv4: true})
	wantState(t, observe(t, ctx, dp), stateOf([]netip.Addr{vip4}))
	err := bindAddr(ctx, dp, vip6b)
	if !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("bind v6 with IPv6 off: %v, want a permission error (EACCES)", err)
	}
	must(t, "bind v4 with IPv6 off", bindAddr(ctx, dp, vip4b))
	must(t, "add a v6 virtual server with IPv6 off", addService(ctx, dp, rr(model.NewVSKey(model.TCP, vip6, 80))))
	must(t, "probe with IPv6 off", dp.Probe(ctx))

	must(t, "switch IPv6 on", sw.SetIPv6Disabled(false))
	families(dual)
	must(t, "bind v6 again", bindAddr(ctx, dp, vip6b))
}
