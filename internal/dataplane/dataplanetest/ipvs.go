package dataplanetest

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// ipvsTests are the contract of dataplane.IPVS.
var ipvsTests = []contractTest[dataplane.Dataplane]{
	{"ServiceRoundTrip", testServiceRoundTrip},
	{"UpdateService", testUpdateService},
	{"AddExistingService", testAddExistingService},
	{"MissingService", testMissingService},
	{"UnknownScheduler", testUnknownScheduler},
	{"RealServers", testRealServers},
	{"IPv6RealServers", testIPv6RealServers},
	{"ForeignForwarding", testForeignForwarding},
	{"DeleteServiceDeletesReals", testDeleteServiceDeletesReals},
	{"FreshRealHasNoConns", testFreshRealConns},
	{"SetTimeouts", testSetTimeouts},
}

func testServiceRoundTrip(t *testing.T, dp dataplane.Dataplane) {
	cases := []struct {
		name string
		vs   model.VirtualServer
	}{
		{"tcp4", rr(tcp4(vip4, 80))},
		{"udp4", model.VirtualServer{Key: model.NewVSKey(model.UDP, vip4, 53), Scheduler: "wrr"}},
		{"sctp4", model.VirtualServer{Key: model.NewVSKey(model.SCTP, vip4, 3868), Scheduler: "lc"}},
		{"tcp6", rr(model.NewVSKey(model.TCP, vip6, 443))},
		{"udp6", model.VirtualServer{Key: model.NewVSKey(model.UDP, vip6, 53), Scheduler: "wlc"}},
		{"sctp6", rr(model.NewVSKey(model.SCTP, vip6, 3868))},
		{"persistent4", model.VirtualServer{Key: tcp4(vip4, 8443), Scheduler: "rr", Flags: model.FlagPersistent, Timeout: 10800}},
		{"persistent6", model.VirtualServer{Key: model.NewVSKey(model.TCP, vip6, 8443), Scheduler: "rr", Flags: model.FlagPersistent, Timeout: 60}},
		{"sh-flags", model.VirtualServer{Key: tcp4(vip4, 81), Scheduler: "sh", Flags: model.FlagSchedSH1 | model.FlagSchedSH2}},
		{"mh", model.VirtualServer{Key: tcp4(vip4, 82), Scheduler: "mh"}},
		{"mh-port", model.VirtualServer{Key: model.NewVSKey(model.UDP, vip6, 82), Scheduler: "mh", Flags: model.FlagSchedSH2}},
		{"fwmark4", model.VirtualServer{Key: model.VSKey{FWMark: 7, Addr: netip.IPv4Unspecified()}, Scheduler: "rr"}},
		{"fwmark6", model.VirtualServer{Key: model.VSKey{FWMark: 8, Addr: netip.IPv6Unspecified()}, Scheduler: "rr"}},
	}
	ctx := ctxFor(t)
	var all []*model.Service
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			must(t, "add "+c.vs.String(), addService(ctx, dp, c.vs))
			obs := observe(t, ctx, dp)
			got, ok := obs.State.Services[c.vs.Key]
			if !ok {
				t.Fatalf("added %s, observed:\n%s", c.vs, describe(obs.State))
			}
			if !got.VirtualServer.Equal(c.vs) || got.Reals.Len() != 0 {
				t.Fatalf("added %s (flags %#x), observed %s (flags %#x, %d reals)",
					c.vs, uint32(c.vs.Flags), got.VirtualServer, uint32(got.Flags), got.Reals.Len())
			}
			// The kernel sets its hashed flag on every listed service; a
			// dump that lacks it did not come from (a faithful) kernel.
			if got.Flags&model.FlagHashed == 0 {
				t.Errorf("observed flags %#x of %s lack the kernel's hashed flag", uint32(got.Flags), c.vs.Key)
			}
			all = append(all, svcOf(c.vs))
		})
	}
	// Every service is still there, and nothing else is.
	wantState(t, observe(t, ctx, dp), stateOf(nil, all...))
}

func testUpdateService(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	k := tcp4(vip4, 80)
	must(t, "add", addService(ctx, dp, rr(k)))
	must(t, "add real", addReal(ctx, dp, k, masq(real4a, 1)))
	steps := []model.VirtualServer{
		{Key: k, Scheduler: "wrr", Flags: model.FlagPersistent, Timeout: 60},
		{Key: k, Scheduler: "sh", Flags: model.FlagSchedSH1 | model.FlagSchedSH2},
		// An update overwrites every flag: back to none.
		{Key: k, Scheduler: "rr"},
	}
	for _, vs := range steps {
		must(t, "update to "+vs.String(), updateService(ctx, dp, vs))
		// The real server survives an update of its service.
		wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(vs, masq(real4a, 1))))
	}
}

func testAddExistingService(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	for _, k := range []model.VSKey{tcp4(vip4, 80), model.NewVSKey(model.UDP, vip6, 53)} {
		must(t, "add "+k.String(), addService(ctx, dp, rr(k)))
		mustFailWith(t, "add again", addService(ctx, dp, rr(k)), dataplane.ErrExist)
		// Same key, other settings: still the same virtual server.
		other := model.VirtualServer{Key: k, Scheduler: "wrr", Flags: model.FlagPersistent, Timeout: 30}
		mustFailWith(t, "add again with other settings", addService(ctx, dp, other), dataplane.ErrExist)
	}
	wantState(t, observe(t, ctx, dp), stateOf(nil,
		svcOf(rr(tcp4(vip4, 80))), svcOf(rr(model.NewVSKey(model.UDP, vip6, 53)))))
}

func testMissingService(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	k := tcp4(vip4, 80)
	// Another service on the same address, so "missing" is about the key.
	must(t, "add neighbour", addService(ctx, dp, rr(tcp4(vip4, 81))))
	mustFailWith(t, "update missing", updateService(ctx, dp, rr(k)), dataplane.ErrNotExist)
	mustFailWith(t, "delete missing", deleteService(ctx, dp, k), dataplane.ErrNotExist)
	mustFailWith(t, "add real to missing", addReal(ctx, dp, k, masq(real4a, 1)), dataplane.ErrNotExist)
	mustFailWith(t, "update real of missing", updateReal(ctx, dp, k, masq(real4a, 1)), dataplane.ErrNotExist)
	mustFailWith(t, "delete real of missing", deleteReal(ctx, dp, k, real4a), dataplane.ErrNotExist)
	_, err := dp.Conns(ctx, k)
	mustFailWith(t, "conns of missing", err, dataplane.ErrNotExist)
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(rr(tcp4(vip4, 81)))))
}

func testUnknownScheduler(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	k := tcp4(vip4, 80)
	bad := model.VirtualServer{Key: k, Scheduler: "nosuchsched"}
	mustFailWith(t, "add with unknown scheduler", addService(ctx, dp, bad), dataplane.ErrUnsupported)
	wantState(t, observe(t, ctx, dp), stateOf(nil))

	must(t, "add", addService(ctx, dp, rr(k)))
	mustFailWith(t, "update to unknown scheduler", updateService(ctx, dp, bad), dataplane.ErrUnsupported)
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(rr(k))))
}

func testRealServers(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	k := tcp4(vip4, 80)
	vs := model.VirtualServer{Key: k, Scheduler: "wrr"}
	must(t, "add service", addService(ctx, dp, vs))
	must(t, "add real a", addReal(ctx, dp, k, masq(real4a, 1)))
	must(t, "add real b", addReal(ctx, dp, k, masq(real4b, 3)))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(vs, masq(real4a, 1), masq(real4b, 3))))

	mustFailWith(t, "add real a again", addReal(ctx, dp, k, masq(real4a, 2)), dataplane.ErrExist)

	// Weight 0 is how a terminating endpoint drains: it must stick.
	must(t, "drain real a", updateReal(ctx, dp, k, masq(real4a, 0)))
	must(t, "reweight real b", updateReal(ctx, dp, k, masq(real4b, 5)))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(vs, masq(real4a, 0), masq(real4b, 5))))

	missing := netip.MustParseAddrPort("10.244.3.9:8080")
	otherPort := netip.AddrPortFrom(real4a.Addr(), 9090)
	mustFailWith(t, "update missing real", updateReal(ctx, dp, k, masq(missing, 1)), dataplane.ErrNotExist)
	mustFailWith(t, "delete missing real", deleteReal(ctx, dp, k, missing), dataplane.ErrNotExist)
	mustFailWith(t, "delete real on another port", deleteReal(ctx, dp, k, otherPort), dataplane.ErrNotExist)

	must(t, "delete real a", deleteReal(ctx, dp, k, real4a))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(vs, masq(real4b, 5))))
	// A real added with weight 0 (all endpoints terminating) stays at 0.
	must(t, "re-add real a at 0", addReal(ctx, dp, k, masq(real4a, 0)))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(vs, masq(real4a, 0), masq(real4b, 5))))
}

func testIPv6RealServers(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	k := model.NewVSKey(model.UDP, vip6, 53)
	vs := rr(k)
	must(t, "add service", addService(ctx, dp, vs))
	must(t, "add real a", addReal(ctx, dp, k, masq(real6a, 1)))
	must(t, "add real b", addReal(ctx, dp, k, masq(real6b, 1)))
	must(t, "drain real b", updateReal(ctx, dp, k, masq(real6b, 0)))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(vs, masq(real6a, 1), masq(real6b, 0))))
	must(t, "delete real a", deleteReal(ctx, dp, k, real6a))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(vs, masq(real6b, 0))))
}

// testForeignForwarding: kube-ipvs only masquerades, but a dump must render
// other tools' real servers truthfully. The kernel keeps a routed or
// tunnelled real's port as given (ipvsadm is what forces it to the
// service's port; checked on 6.1).
func testForeignForwarding(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	k := tcp4(vip4, 80)
	must(t, "add service", addService(ctx, dp, rr(k)))
	route := model.RealServer{Addr: netip.MustParseAddrPort("10.244.3.1:81"), Weight: 1, Forward: model.Route}
	tunnel := model.RealServer{Addr: netip.MustParseAddrPort("10.244.3.2:82"), Weight: 2, Forward: model.Tunnel}
	must(t, "add routed real", addReal(ctx, dp, k, route))
	must(t, "add tunnelled real", addReal(ctx, dp, k, tunnel))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(rr(k), route, tunnel)))
}

func testDeleteServiceDeletesReals(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	k, keep := tcp4(vip4, 80), tcp4(vip4b, 80)
	for _, key := range []model.VSKey{k, keep} {
		must(t, "add service", addService(ctx, dp, rr(key)))
		must(t, "add real", addReal(ctx, dp, key, masq(real4a, 1)))
	}
	must(t, "delete service", deleteService(ctx, dp, k))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(rr(keep), masq(real4a, 1))))
	// Re-created, the service starts with no real servers.
	must(t, "re-add service", addService(ctx, dp, rr(k)))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(rr(k)), svcOf(rr(keep), masq(real4a, 1))))
}

func testFreshRealConns(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	k := tcp4(vip4, 80)
	must(t, "add service", addService(ctx, dp, rr(k)))
	conns, err := dp.Conns(ctx, k)
	must(t, "conns of empty service", err)
	if len(conns) != 0 {
		t.Fatalf("conns of a service without reals: %v", conns)
	}
	must(t, "add real a", addReal(ctx, dp, k, masq(real4a, 1)))
	must(t, "add real b", addReal(ctx, dp, k, masq(real4b, 0)))
	conns, err = dp.Conns(ctx, k)
	must(t, "conns", err)
	want := map[netip.AddrPort]model.Conns{real4a: {}, real4b: {}}
	if fmt.Sprint(conns) != fmt.Sprint(want) {
		t.Fatalf("conns of fresh reals: got %v, want %v", conns, want)
	}
	obs := observe(t, ctx, dp)
	wantObs := map[dataplane.RealRef]model.Conns{{VS: k, RS: real4a}: {}, {VS: k, RS: real4b}: {}}
	if fmt.Sprint(obs.Conns) != fmt.Sprint(wantObs) {
		t.Fatalf("observed conns of fresh reals: got %v, want %v", obs.Conns, wantObs)
	}
}

func testSetTimeouts(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	must(t, "set all", dp.SetTimeouts(ctx, dataplane.Timeouts{TCP: time.Hour, TCPFin: 30 * time.Second, UDP: 2 * time.Minute}))
	must(t, "set udp only", dp.SetTimeouts(ctx, dataplane.Timeouts{UDP: 5 * time.Minute}))
	must(t, "set nothing", dp.SetTimeouts(ctx, dataplane.Timeouts{}))
}
