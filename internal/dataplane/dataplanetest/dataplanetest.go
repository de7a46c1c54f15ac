// Package dataplanetest is the contract every dataplane.Dataplane must meet:
// the kernel's behaviour as seen through the interface. The fake runs it on
// every `go test`; the linux implementation runs it inside a VM with IPVS, so
// the fake cannot drift from what a real kernel does.
package dataplanetest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Factory returns a dataplane over an empty kernel: no IPVS services and no
// link. It registers its own cleanup with t, closing the dataplane included.
type Factory func(t *testing.T) dataplane.Dataplane

// Run runs every contract subtest, each on a fresh dataplane from newDP.
func Run(t *testing.T, newDP Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, dp dataplane.Dataplane)
	}{
		{"ServiceRoundTrip", testServiceRoundTrip},
		{"UpdateService", testUpdateService},
		{"AddExistingService", testAddExistingService},
		{"MissingService", testMissingService},
		{"UnknownScheduler", testUnknownScheduler},
		{"RealServers", testRealServers},
		{"IPv6RealServers", testIPv6RealServers},
		{"ForeignForwarding", testForeignForwarding},
		{"DeleteServiceDeletesReals", testDeleteServiceDeletesReals},
		{"Addresses", testAddresses},
		{"AddressesNeedLink", testAddressesNeedLink},
		{"InitIdempotent", testInitIdempotent},
		{"DeleteLink", testDeleteLink},
		{"FreshRealHasNoConns", testFreshRealConns},
		{"SetTimeouts", testSetTimeouts},
		{"FlushConntrackNothing", testFlushConntrackNothing},
		{"CanceledContext", testCanceledContext},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newDP(t))
		})
	}
	t.Run("Shim", func(t *testing.T) {
		RunShim(t, func(t *testing.T) ShimPlane { return newDP(t) })
	})
}

// Clean deletes every IPVS service, the link and the shim, leaving an empty kernel.
// Factories over a shared kernel call it before and after each test.
func Clean(ctx context.Context, dp dataplane.Dataplane) error {
	obs, err := dp.Observe(ctx)
	if err != nil {
		return fmt.Errorf("observe before cleaning: %w", err)
	}
	var errs []error
	for k := range obs.State.Services {
		if err := dp.DeleteService(ctx, k); err != nil && !errors.Is(err, dataplane.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := dp.DeleteLink(ctx); err != nil && !errors.Is(err, dataplane.ErrNotExist) {
		errs = append(errs, err)
	}
	if err := dp.DeleteShim(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

var (
	vip4  = netip.MustParseAddr("10.96.0.10")
	vip4b = netip.MustParseAddr("10.96.0.11")
	vip6  = netip.MustParseAddr("fd00:96::10")
	vip6b = netip.MustParseAddr("fd00:96::11")

	real4a = netip.MustParseAddrPort("10.244.1.5:8080")
	real4b = netip.MustParseAddrPort("10.244.2.7:8080")
	real6a = netip.MustParseAddrPort("[fd00:244::5]:8080")
	real6b = netip.MustParseAddrPort("[fd00:244::7]:8080")
)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func tcp4(addr netip.Addr, port uint16) model.VSKey { return model.NewVSKey(model.TCP, addr, port) }

func rr(k model.VSKey) model.VirtualServer { return model.VirtualServer{Key: k, Scheduler: "rr"} }

func masq(addr netip.AddrPort, weight int) model.RealServer {
	return model.RealServer{Addr: addr, Weight: weight, Forward: model.Masq}
}

// must fails the test on err, naming what was being done.
func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// mustFailWith asserts err wraps want.
func mustFailWith(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want one wrapping %q", what, err, want)
	}
}

func observe(t *testing.T, ctx context.Context, dp dataplane.Dataplane) dataplane.Observation {
	t.Helper()
	obs, err := dp.Observe(ctx)
	must(t, "observe", err)
	return obs
}

// describe prints a state with the fields Dump leaves out (raw flags and
// the timeout of non-persistent services), so a mismatch is readable.
func describe(s model.State) string {
	var b strings.Builder
	b.WriteString(s.Dump())
	for _, k := range s.SortedKeys() {
		svc := s.Services[k]
		fmt.Fprintf(&b, "# %s flags=%#x timeout=%d\n", k, uint32(svc.Flags), svc.Timeout)
	}
	return b.String()
}

// wantState asserts the observed table and addresses equal want exactly.
func wantState(t *testing.T, obs dataplane.Observation, want model.State) {
	t.Helper()
	if !obs.State.Equal(want) {
		t.Fatalf("observed:\n%s\nwant:\n%s", describe(obs.State), describe(want))
	}
}

// stateOf builds the expected state from services (each with its reals)
// and addresses.
func stateOf(addrs []netip.Addr, svcs ...*model.Service) model.State {
	s := model.NewState()
	for _, svc := range svcs {
		if svc.Reals == nil {
			svc.Reals = map[netip.AddrPort]model.RealServer{}
		}
		s.Services[svc.Key] = svc
	}
	for _, a := range addrs {
		s.Addrs[a] = struct{}{}
	}
	return s
}

func svcOf(vs model.VirtualServer, reals ...model.RealServer) *model.Service {
	s := &model.Service{VirtualServer: vs, Reals: map[netip.AddrPort]model.RealServer{}}
	for _, r := range reals {
		s.Reals[r.Addr] = r
	}
	return s
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
			must(t, "add "+c.vs.String(), dp.AddService(ctx, c.vs))
			obs := observe(t, ctx, dp)
			got, ok := obs.State.Services[c.vs.Key]
			if !ok {
				t.Fatalf("added %s, observed:\n%s", c.vs, describe(obs.State))
			}
			if !got.VirtualServer.Equal(c.vs) || len(got.Reals) != 0 {
				t.Fatalf("added %s (flags %#x), observed %s (flags %#x, %d reals)",
					c.vs, uint32(c.vs.Flags), got.VirtualServer, uint32(got.Flags), len(got.Reals))
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
	must(t, "add", dp.AddService(ctx, rr(k)))
	must(t, "add real", dp.AddReal(ctx, k, masq(real4a, 1)))
	steps := []model.VirtualServer{
		{Key: k, Scheduler: "wrr", Flags: model.FlagPersistent, Timeout: 60},
		{Key: k, Scheduler: "sh", Flags: model.FlagSchedSH1 | model.FlagSchedSH2},
		// An update overwrites every flag: back to none.
		{Key: k, Scheduler: "rr"},
	}
	for _, vs := range steps {
		must(t, "update to "+vs.String(), dp.UpdateService(ctx, vs))
		// The real server survives an update of its service.
		wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(vs, masq(real4a, 1))))
	}
}

func testAddExistingService(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	for _, k := range []model.VSKey{tcp4(vip4, 80), model.NewVSKey(model.UDP, vip6, 53)} {
		must(t, "add "+k.String(), dp.AddService(ctx, rr(k)))
		mustFailWith(t, "add again", dp.AddService(ctx, rr(k)), dataplane.ErrExist)
		// Same key, other settings: still the same virtual server.
		other := model.VirtualServer{Key: k, Scheduler: "wrr", Flags: model.FlagPersistent, Timeout: 30}
		mustFailWith(t, "add again with other settings", dp.AddService(ctx, other), dataplane.ErrExist)
	}
	wantState(t, observe(t, ctx, dp), stateOf(nil,
		svcOf(rr(tcp4(vip4, 80))), svcOf(rr(model.NewVSKey(model.UDP, vip6, 53)))))
}

func testMissingService(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	k := tcp4(vip4, 80)
	// Another service on the same address, so "missing" is about the key.
	must(t, "add neighbour", dp.AddService(ctx, rr(tcp4(vip4, 81))))
	mustFailWith(t, "update missing", dp.UpdateService(ctx, rr(k)), dataplane.ErrNotExist)
	mustFailWith(t, "delete missing", dp.DeleteService(ctx, k), dataplane.ErrNotExist)
	mustFailWith(t, "add real to missing", dp.AddReal(ctx, k, masq(real4a, 1)), dataplane.ErrNotExist)
	mustFailWith(t, "update real of missing", dp.UpdateReal(ctx, k, masq(real4a, 1)), dataplane.ErrNotExist)
	mustFailWith(t, "delete real of missing", dp.DeleteReal(ctx, k, real4a), dataplane.ErrNotExist)
	_, err := dp.Conns(ctx, k)
	mustFailWith(t, "conns of missing", err, dataplane.ErrNotExist)
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(rr(tcp4(vip4, 81)))))
}

func testUnknownScheduler(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	k := tcp4(vip4, 80)
	bad := model.VirtualServer{Key: k, Scheduler: "nosuchsched"}
	mustFailWith(t, "add with unknown scheduler", dp.AddService(ctx, bad), dataplane.ErrUnsupported)
	wantState(t, observe(t, ctx, dp), stateOf(nil))

	must(t, "add", dp.AddService(ctx, rr(k)))
	mustFailWith(t, "update to unknown scheduler", dp.UpdateService(ctx, bad), dataplane.ErrUnsupported)
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(rr(k))))
}

func testRealServers(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	k := tcp4(vip4, 80)
	vs := model.VirtualServer{Key: k, Scheduler: "wrr"}
	must(t, "add service", dp.AddService(ctx, vs))
	must(t, "add real a", dp.AddReal(ctx, k, masq(real4a, 1)))
	must(t, "add real b", dp.AddReal(ctx, k, masq(real4b, 3)))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(vs, masq(real4a, 1), masq(real4b, 3))))

	mustFailWith(t, "add real a again", dp.AddReal(ctx, k, masq(real4a, 2)), dataplane.ErrExist)

	// Weight 0 is how a terminating endpoint drains: it must stick.
	must(t, "drain real a", dp.UpdateReal(ctx, k, masq(real4a, 0)))
	must(t, "reweight real b", dp.UpdateReal(ctx, k, masq(real4b, 5)))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(vs, masq(real4a, 0), masq(real4b, 5))))

	missing := netip.MustParseAddrPort("10.244.3.9:8080")
	otherPort := netip.AddrPortFrom(real4a.Addr(), 9090)
	mustFailWith(t, "update missing real", dp.UpdateReal(ctx, k, masq(missing, 1)), dataplane.ErrNotExist)
	mustFailWith(t, "delete missing real", dp.DeleteReal(ctx, k, missing), dataplane.ErrNotExist)
	mustFailWith(t, "delete real on another port", dp.DeleteReal(ctx, k, otherPort), dataplane.ErrNotExist)

	must(t, "delete real a", dp.DeleteReal(ctx, k, real4a))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(vs, masq(real4b, 5))))
	// A real added with weight 0 (all endpoints terminating) stays at 0.
	must(t, "re-add real a at 0", dp.AddReal(ctx, k, masq(real4a, 0)))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(vs, masq(real4a, 0), masq(real4b, 5))))
}

func testIPv6RealServers(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	k := model.NewVSKey(model.UDP, vip6, 53)
	vs := rr(k)
	must(t, "add service", dp.AddService(ctx, vs))
	must(t, "add real a", dp.AddReal(ctx, k, masq(real6a, 1)))
	must(t, "add real b", dp.AddReal(ctx, k, masq(real6b, 1)))
	must(t, "drain real b", dp.UpdateReal(ctx, k, masq(real6b, 0)))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(vs, masq(real6a, 1), masq(real6b, 0))))
	must(t, "delete real a", dp.DeleteReal(ctx, k, real6a))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(vs, masq(real6b, 0))))
}

func testDeleteServiceDeletesReals(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	k, keep := tcp4(vip4, 80), tcp4(vip4b, 80)
	for _, key := range []model.VSKey{k, keep} {
		must(t, "add service", dp.AddService(ctx, rr(key)))
		must(t, "add real", dp.AddReal(ctx, key, masq(real4a, 1)))
	}
	must(t, "delete service", dp.DeleteService(ctx, k))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(rr(keep), masq(real4a, 1))))
	// Re-created, the service starts with no real servers.
	must(t, "re-add service", dp.AddService(ctx, rr(k)))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(rr(k)), svcOf(rr(keep), masq(real4a, 1))))
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

func testFreshRealConns(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	k := tcp4(vip4, 80)
	must(t, "add service", dp.AddService(ctx, rr(k)))
	conns, err := dp.Conns(ctx, k)
	must(t, "conns of empty service", err)
	if len(conns) != 0 {
		t.Fatalf("conns of a service without reals: %v", conns)
	}
	must(t, "add real a", dp.AddReal(ctx, k, masq(real4a, 1)))
	must(t, "add real b", dp.AddReal(ctx, k, masq(real4b, 0)))
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

func testFlushConntrackNothing(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	for _, c := range []struct {
		proto model.Protocol
		real  netip.AddrPort
	}{{model.UDP, real4a}, {model.TCP, real4b}, {model.UDP, real6a}, {model.SCTP, real6b}} {
		n, err := dp.FlushConntrack(ctx, c.proto, c.real)
		must(t, fmt.Sprintf("flush %s %s", c.proto, c.real), err)
		if n != 0 {
			t.Errorf("flush %s %s with no traffic deleted %d entries", c.proto, c.real, n)
		}
	}
}

func testCanceledContext(t *testing.T, dp dataplane.Dataplane) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := dp.AddService(ctx, rr(tcp4(vip4, 80)))
	mustFailWith(t, "add with a canceled context", err, context.Canceled)
	_, err = dp.Observe(ctx)
	mustFailWith(t, "observe with a canceled context", err, context.Canceled)
	// A dataplane stays usable after a canceled call.
	wantState(t, observe(t, ctxFor(t), dp), stateOf(nil))
}

// testForeignForwarding: kube-ipvs only masquerades, but a dump must render
// other tools' real servers truthfully. The kernel keeps a routed or
// tunnelled real's port as given (ipvsadm is what forces it to the
// service's port; checked on 6.1).
func testForeignForwarding(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	k := tcp4(vip4, 80)
	must(t, "add service", dp.AddService(ctx, rr(k)))
	route := model.RealServer{Addr: netip.MustParseAddrPort("10.244.3.1:81"), Weight: 1, Forward: model.Route}
	tunnel := model.RealServer{Addr: netip.MustParseAddrPort("10.244.3.2:82"), Weight: 2, Forward: model.Tunnel}
	must(t, "add routed real", dp.AddReal(ctx, k, route))
	must(t, "add tunnelled real", dp.AddReal(ctx, k, tunnel))
	wantState(t, observe(t, ctx, dp), stateOf(nil, svcOf(rr(k), route, tunnel)))
}
