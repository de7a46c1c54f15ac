package fake_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/dataplanetest"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

func TestContract(t *testing.T) {
	dataplanetest.Run(t, func(t *testing.T) dataplane.Dataplane {
		f := fake.New()
		t.Cleanup(func() {
			if err := f.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		return f
	})
}

var (
	key  = model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.1"), 443)
	rsA  = netip.MustParseAddrPort("10.244.0.5:6443")
	rsB  = netip.MustParseAddrPort("10.244.0.6:6443")
	errX = errors.New("injected")
)

// seeded returns a fake holding one service with two reals.
func seeded(t *testing.T) *fake.Fake {
	t.Helper()
	f := fake.New()
	ctx := t.Context()
	if err := f.Do(ctx, model.Op{Kind: model.AddService, VS: model.VirtualServer{Key: key, Scheduler: "rr"}}); err != nil {
		t.Fatal(err)
	}
	for _, a := range []netip.AddrPort{rsA, rsB} {
		if err := f.Do(ctx, model.Op{Kind: model.AddReal, VS: model.VirtualServer{Key: key}, RS: model.RealServer{Addr: a, Weight: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	f.ResetCalls()
	return f
}

const seededDump = "-A -t 10.96.0.1:443 -s rr\n" +
	"  -a -t 10.96.0.1:443 -r 10.244.0.5:6443 -m -w 1\n" +
	"  -a -t 10.96.0.1:443 -r 10.244.0.6:6443 -m -w 1\n"

func TestFailNextFailsOnceAndChangesNothing(t *testing.T) {
	f := seeded(t)
	ctx := t.Context()
	f.FailNext("DeleteReal", errX)
	if err := f.Do(ctx, model.Op{Kind: model.DeleteReal, VS: model.VirtualServer{Key: key}, RS: model.RealServer{Addr: rsA}}); !errors.Is(err, errX) {
		t.Fatalf("first DeleteReal: got %v, want the injected error", err)
	}
	if got := f.Dump(); got != seededDump {
		t.Fatalf("a failed call changed the table:\n%s", got)
	}
	if err := f.Do(ctx, model.Op{Kind: model.DeleteReal, VS: model.VirtualServer{Key: key}, RS: model.RealServer{Addr: rsA}}); err != nil {
		t.Fatalf("second DeleteReal: %v", err)
	}
	want := "-A -t 10.96.0.1:443 -s rr\n  -a -t 10.96.0.1:443 -r 10.244.0.6:6443 -m -w 1\n"
	if got := f.Dump(); got != want {
		t.Fatalf("after delete:\n%s\nwant:\n%s", got, want)
	}
	if got := f.Calls()["DeleteReal"]; got != 2 {
		t.Errorf("DeleteReal calls: got %d, want 2 (failed ones count)", got)
	}
}

func TestFailWhenNthCall(t *testing.T) {
	f := fake.New()
	ctx := t.Context()
	if err := f.Do(ctx, model.Op{Kind: model.AddService, VS: model.VirtualServer{Key: key, Scheduler: "rr"}}); err != nil {
		t.Fatal(err)
	}
	f.FailWhen(func(c fake.Call) error {
		if c.Method == "AddReal" && c.N == 2 {
			return errX
		}
		return nil
	})
	var errs []error
	for _, a := range []netip.AddrPort{rsA, rsB, netip.MustParseAddrPort("10.244.0.7:6443")} {
		errs = append(errs, f.Do(ctx, model.Op{Kind: model.AddReal, VS: model.VirtualServer{Key: key}, RS: model.RealServer{Addr: a, Weight: 1}}))
	}
	if errs[0] != nil || !errors.Is(errs[1], errX) || errs[2] != nil {
		t.Fatalf("want only the 2nd AddReal to fail, got %v", errs)
	}
	want := "-A -t 10.96.0.1:443 -s rr\n" +
		"  -a -t 10.96.0.1:443 -r 10.244.0.5:6443 -m -w 1\n" +
		"  -a -t 10.96.0.1:443 -r 10.244.0.7:6443 -m -w 1\n"
	if got := f.Dump(); got != want {
		t.Fatalf("table:\n%s\nwant:\n%s", got, want)
	}
	log := f.Log()
	if last := log[len(log)-1]; last.Arg != (dataplane.RealRef{VS: key, RS: netip.MustParseAddrPort("10.244.0.7:6443")}) {
		t.Errorf("last logged call's Arg: %#v", last.Arg)
	}
}

func TestObserveErrAndDeepCopy(t *testing.T) {
	f := seeded(t)
	ctx := t.Context()
	f.ObserveErr(errX)
	if _, err := f.Observe(ctx); !errors.Is(err, errX) {
		t.Fatalf("Observe: got %v, want the injected error", err)
	}
	f.ObserveErr(nil)
	obs, err := f.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Changing the observation must not change the kernel.
	obs.State.Services[key].Reals.Delete(rsA)
	obs.State.Services[key].Scheduler = "wrr"
	obs.State.Addrs[netip.MustParseAddr("10.0.0.1")] = struct{}{}
	if got := f.Dump(); got != seededDump {
		t.Fatalf("observation aliases the fake's table:\n%s", got)
	}
}

func TestSetConnsShowsInObserveAndConns(t *testing.T) {
	f := seeded(t)
	ctx := t.Context()
	refA := dataplane.RealRef{VS: key, RS: rsA}
	f.SetConns(refA, model.Conns{Active: 3, Inactive: 4})
	obs, err := f.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := obs.Conns[refA]; got != (model.Conns{Active: 3, Inactive: 4}) {
		t.Errorf("observed conns of a: %+v", got)
	}
	if got, ok := obs.Conns[dataplane.RealRef{VS: key, RS: rsB}]; !ok || got.Total() != 0 {
		t.Errorf("observed conns of b: %+v present=%v, want zero and present", got, ok)
	}
	// A deleted and re-added real starts from zero, as in the kernel.
	if err := f.Do(ctx, model.Op{Kind: model.DeleteReal, VS: model.VirtualServer{Key: key}, RS: model.RealServer{Addr: rsA}}); err != nil {
		t.Fatal(err)
	}
	if err := f.Do(ctx, model.Op{Kind: model.AddReal, VS: model.VirtualServer{Key: key}, RS: model.RealServer{Addr: rsA, Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	conns, err := f.Conns(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if conns[rsA].Total() != 0 {
		t.Errorf("re-added real kept its counters: %+v", conns[rsA])
	}
}

func TestSetTimeoutsKeepsZeroFields(t *testing.T) {
	f := fake.New()
	ctx := t.Context()
	if err := f.SetTimeouts(ctx, dataplane.Timeouts{TCP: time.Hour, UDP: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := f.SetTimeouts(ctx, dataplane.Timeouts{UDP: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	want := dataplane.Timeouts{TCP: time.Hour, TCPFin: 120 * time.Second, UDP: 2 * time.Minute}
	if got := f.Timeouts(); got != want {
		t.Fatalf("timeouts: got %+v, want %+v", got, want)
	}
}

// TestClearConntrack: a clear deletes the entries its keys name, of its
// protocol only, and reads each family's table once whatever the number of
// keys.
func TestClearConntrack(t *testing.T) {
	ap := netip.MustParseAddrPort
	vip, vip6 := ap("10.96.0.10:53"), ap("[fd00:96::10]:53")
	planted := []fake.ConntrackFlow{
		{Proto: model.UDP, Dst: vip, Reply: rsA},
		{Proto: model.UDP, Dst: vip, Reply: rsB},
		{Proto: model.TCP, Dst: vip, Reply: rsA},
		{Proto: model.UDP, Dst: vip6, Reply: vip6},
		{Proto: model.UDP, Dst: ap("10.96.0.11:53"), Reply: ap("10.96.0.11:53")},
		// NATed to the first endpoint after the apply: it stays.
		{Proto: model.UDP, Dst: ap("10.96.0.11:53"), Reply: ap("10.244.0.7:53")},
	}
	for _, c := range []struct {
		name         string
		reals, dests []netip.AddrPort
		deleted      int
		dumps        [2]int
		left         string
	}{
		{name: "nothing", left: "tcp dst 10.96.0.10:53 reply 10.244.0.5:6443 x2\n" +
			"udp dst 10.96.0.10:53 reply 10.244.0.5:6443 x2\nudp dst 10.96.0.10:53 reply 10.244.0.6:6443 x2\n" +
			"udp dst 10.96.0.11:53 reply 10.244.0.7:53 x2\nudp dst 10.96.0.11:53 reply 10.96.0.11:53 x2\n" +
			"udp dst [fd00:96::10]:53 reply [fd00:96::10]:53 x2\n"},
		{name: "a real server", reals: []netip.AddrPort{rsA}, deleted: 2, dumps: [2]int{1, 0},
			left: "tcp dst 10.96.0.10:53 reply 10.244.0.5:6443 x2\nudp dst 10.96.0.10:53 reply 10.244.0.6:6443 x2\n" +
				"udp dst 10.96.0.11:53 reply 10.244.0.7:53 x2\nudp dst 10.96.0.11:53 reply 10.96.0.11:53 x2\n" +
				"udp dst [fd00:96::10]:53 reply [fd00:96::10]:53 x2\n"},
		{name: "reals and frontends of both families", reals: []netip.AddrPort{rsA, rsB, ap("[::ffff:10.244.0.9]:53")},
			dests: []netip.AddrPort{vip6, ap("[::ffff:10.96.0.11]:53")}, deleted: 8, dumps: [2]int{1, 1},
			left: "tcp dst 10.96.0.10:53 reply 10.244.0.5:6443 x2\nudp dst 10.96.0.11:53 reply 10.244.0.7:53 x2\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := fake.New()
			for _, fl := range planted {
				f.PlantConntrack(fl, 2)
			}
			s := dataplane.NewStaleFlows(model.UDP)
			for _, k := range c.reals {
				s.AddReal(k)
			}
			for _, k := range c.dests {
				s.AddDest(k)
			}
			n, err := f.ClearConntrack(t.Context(), s)
			if err != nil || n != c.deleted {
				t.Fatalf("clear: got %d, %v; want %d, nil", n, err, c.deleted)
			}
			if v4, v6 := f.ConntrackDumps(); [2]int{v4, v6} != c.dumps {
				t.Errorf("tables read %d (IPv4) and %d (IPv6) times, want %v", v4, v6, c.dumps)
			}
			if got := f.Conntrack(); got != c.left {
				t.Errorf("left:\n%swant:\n%s", got, c.left)
			}
		})
	}
}

func TestInitSetsSysctlsAndLink(t *testing.T) {
	f := fake.New()
	if f.HasLink() {
		t.Fatal("a new fake has a link")
	}
	if err := f.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !f.HasLink() {
		t.Fatal("Init made no link")
	}
	for _, k := range []string{"net/ipv4/vs/conntrack", "net/ipv4/vs/expire_nodest_conn", "net/ipv4/vs/expire_quiescent_template", "net/ipv4/ip_forward"} {
		if f.Sysctls()[k] != "1" {
			t.Errorf("sysctl %s = %q, want 1", k, f.Sysctls()[k])
		}
	}
}

func TestLoadSeedsTable(t *testing.T) {
	src := seeded(t)
	s := src.State()
	s.Addrs[netip.MustParseAddr("10.96.0.1")] = struct{}{}
	f := fake.New()
	f.Load(s)
	if got, want := f.Dump(), seededDump+"addr 10.96.0.1\n"; got != want {
		t.Fatalf("loaded:\n%s\nwant:\n%s", got, want)
	}
	// The loaded addresses imply a link: unbinding works.
	if err := f.Do(t.Context(), model.Op{Kind: model.UnbindAddr, Addr: netip.MustParseAddr("10.96.0.1")}); err != nil {
		t.Fatal(err)
	}
}

func TestClosedFails(t *testing.T) {
	f := seeded(t)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Observe(context.Background()); err == nil {
		t.Fatal("Observe after Close succeeded")
	}
}
