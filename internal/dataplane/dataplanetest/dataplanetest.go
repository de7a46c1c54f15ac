// Package dataplanetest is the contract every dataplane.Dataplane must meet:
// the kernel's behaviour as seen through the interface. The fake runs it on
// every `go test`; the linux implementation runs it inside a VM with IPVS, so
// the fake cannot drift from what a real kernel does.
//
// It is laid out like dataplane.Dataplane: one file per part (ipvs.go,
// link.go, shim.go for Netfilter, conntrack.go), each with its table of
// subtests; this file runs them all and holds what spans the parts. Every
// write is an operation made through Apply (ops.go), as the agent makes it.
package dataplanetest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// Factory returns a dataplane over an empty kernel: no IPVS services and no
// link. It registers its own cleanup with t, closing the dataplane included.
type Factory func(t *testing.T) dataplane.Dataplane

// Run runs every contract subtest, each on a fresh dataplane from newDP,
// grouped by the part of the interface they are about.
func Run(t *testing.T, newDP Factory) {
	groups := []struct {
		name  string
		tests []contractTest[dataplane.Dataplane]
	}{
		{"IPVS", ipvsTests},
		{"Link", linkTests},
		{"Conntrack", conntrackTests},
		{"Observe", observeTests},
		{"Batch", batchTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) { runTests(t, g.tests, newDP) })
	}
	// A Dataplane is a Netfilter: the shim's contract runs on it as it is.
	t.Run("Netfilter", func(t *testing.T) {
		RunNetfilter(t, func(t *testing.T) dataplane.Netfilter { return newDP(t) })
	})
}

// contractTest is one subtest of a part, run on a fresh P: the whole
// Dataplane, or the part alone (Netfilter).
type contractTest[P any] struct {
	name string
	fn   func(t *testing.T, p P)
}

// runTests runs each test on a fresh P from fresh.
func runTests[P any](t *testing.T, tests []contractTest[P], fresh func(t *testing.T) P) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, fresh(t)) })
	}
}

// observeTests are about the one read that spans every part.
var observeTests = []contractTest[dataplane.Dataplane]{
	{"EverythingAtOnce", testObserveEverything},
	{"ScanIsObserve", testScanIsObserve},
	{"CanceledContext", testCanceledContext},
	{"Announcements", testAnnouncements},
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
		if err := deleteService(ctx, dp, k); err != nil && !errors.Is(err, dataplane.ErrNotExist) {
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
		s.Services[svc.Key] = svc
	}
	for _, a := range addrs {
		s.Addrs[a] = struct{}{}
	}
	return s
}

func svcOf(vs model.VirtualServer, reals ...model.RealServer) *model.Service {
	return &model.Service{VirtualServer: vs, Reals: model.RealsOf(slices.Clone(reals))}
}

// testObserveEverything: one Observe shows every part's state: services
// with their reals, the link's addresses and the shim's set members.
func testObserveEverything(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	k := tcp4(vip4, 80)
	must(t, "init", dp.Init(ctx))
	must(t, "bind", bindAddr(ctx, dp, vip4))
	must(t, "add service", addService(ctx, dp, rr(k)))
	must(t, "add real", addReal(ctx, dp, k, masq(real4a, 1)))
	must(t, "ensure shim", dp.EnsureShim(ctx, dualStack))
	member := shim.Entry(shim.ClusterIP, vip4, model.TCP, 80)
	must(t, "add set member", addSetEntry(ctx, dp, member))
	want := stateOf([]netip.Addr{vip4}, svcOf(rr(k), masq(real4a, 1)))
	want.Sets[member] = struct{}{}
	wantState(t, observe(t, ctx, dp), want)
}

// testScanIsObserve: Scan hands over exactly what Observe returns (but
// the counters), every virtual server before its real servers, over both
// families, a service with no reals, a fwmark one, and a member of every
// set kind.
func testScanIsObserve(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	k4, k6, bare := tcp4(vip4, 80), model.NewVSKey(model.UDP, vip6, 53), tcp4(vip4b, 8080)
	mark := model.VirtualServer{Key: model.VSKey{FWMark: 7}, Scheduler: "sh"}
	must(t, "init", dp.Init(ctx))
	must(t, "ensure shim", dp.EnsureShim(ctx, dualStack))
	for _, a := range []netip.Addr{vip4, vip6, vip4b} {
		must(t, "bind", bindAddr(ctx, dp, a))
	}
	for _, vs := range []model.VirtualServer{rr(k4), rr(k6), rr(bare), mark} {
		must(t, "add service", addService(ctx, dp, vs))
	}
	must(t, "add real", addReal(ctx, dp, k4, masq(real4a, 1)))
	must(t, "add real", addReal(ctx, dp, k4, masq(real4b, 0)))
	must(t, "add real", addReal(ctx, dp, k6, masq(real6a, 3)))
	must(t, "add real", addReal(ctx, dp, mark.Key, masq(real4a, 1)))
	for _, e := range shimMembers() {
		must(t, "add set member", addSetEntry(ctx, dp, e))
	}
	obs := observe(t, ctx, dp)

	got := model.NewState()
	err := dp.Scan(ctx, dataplane.Visitor{
		Service: func(vs model.VirtualServer) {
			if _, dup := got.Services[vs.Key]; dup {
				t.Errorf("scan: %s handed twice", vs.Key)
			}
			got.Services[vs.Key] = &model.Service{VirtualServer: vs}
		},
		Real: func(k model.VSKey, rs model.RealServer) {
			svc, ok := got.Services[k]
			if !ok {
				t.Errorf("scan: real server %s of %s before its virtual server", rs.Addr, k)
				return
			}
			svc.Reals.Set(rs)
		},
		Addr:   func(a netip.Addr) { got.Addrs[a] = struct{}{} },
		Member: func(e model.SetEntry) { got.Sets[e] = struct{}{} },
	})
	must(t, "scan", err)
	if !got.Equal(obs.State) {
		t.Fatalf("scan:\n%s\nobserve:\n%s", describe(got), describe(obs.State))
	}
	if len(got.Sets) != len(shimMembers()) || len(got.Services) != 4 {
		t.Fatalf("scan saw %d members and %d services, want %d and 4", len(got.Sets), len(got.Services), len(shimMembers()))
	}
	// A visitor that wants only some kinds gets only those.
	n := 0
	must(t, "scan members only", dp.Scan(ctx, dataplane.Visitor{Member: func(model.SetEntry) { n++ }}))
	if n != len(shimMembers()) {
		t.Fatalf("members-only scan saw %d members, want %d", n, len(shimMembers()))
	}
}

func testCanceledContext(t *testing.T, dp dataplane.Dataplane) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := addService(ctx, dp, rr(tcp4(vip4, 80)))
	mustFailWith(t, "add with a canceled context", err, context.Canceled)
	_, err = dp.Observe(ctx)
	mustFailWith(t, "observe with a canceled context", err, context.Canceled)
	err = dp.Scan(ctx, dataplane.Visitor{})
	mustFailWith(t, "scan with a canceled context", err, context.Canceled)
	// A dataplane stays usable after a canceled call.
	wantState(t, observe(t, ctxFor(t), dp), stateOf(nil))
}
