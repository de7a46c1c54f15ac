package rescan

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/observed"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

var (
	web = model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80)
	rs1 = model.RealServer{Addr: netip.MustParseAddrPort("10.244.1.2:8080"), Weight: 1}
)

// kernel is a dataplane.Reader over a state, counting its reads.
type kernel struct {
	state           model.State
	rulesOK         bool
	failScan        error
	failObserve     error
	scans, observes int
}

func (k *kernel) Observe(context.Context) (dataplane.Observation, error) {
	k.observes++
	if k.failObserve != nil {
		return dataplane.Observation{}, k.failObserve
	}
	return dataplane.Observation{State: k.state.Clone()}, nil
}

func (k *kernel) Scan(_ context.Context, v dataplane.Visitor) error {
	k.scans++
	if k.failScan != nil {
		return k.failScan
	}
	for _, key := range k.state.SortedKeys() {
		svc := k.state.Services[key]
		v.Service(svc.VirtualServer)
		for _, rs := range svc.Reals.All() {
			v.Real(key, rs)
		}
	}
	for a := range k.state.Addrs {
		if v.Addr != nil { // nil: not read
			v.Addr(a)
		}
	}
	for e := range k.state.Sets {
		v.Member(e)
	}
	return nil
}

func (k *kernel) ShimInPlace(context.Context, shim.Config) (bool, error) { return k.rulesOK, nil }

func webState(reals ...model.RealServer) model.State {
	s := model.NewState()
	s.Services[web] = &model.Service{VirtualServer: model.VirtualServer{Key: web, Scheduler: "rr"}, Reals: model.RealsOf(reals)}
	s.Addrs[web.Addr] = struct{}{}
	s.Sets[model.NewSetEntry("KUBE-CLUSTER-IP", web.Addr, model.TCP, 80)] = struct{}{}
	return s
}

// folder is the sync loop's part: it folds every read handed over into
// the cache, as the reconciler does, and counts what differed.
func folder(ctx context.Context, m *Mailbox, c *observed.Cache) (drifted *int, stop func()) {
	n := new(int)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-m.Wake():
			}
			if rd := m.Take(); rd != nil {
				f := c.Fold(rd.Read, plan.NewScope())
				rd.WantWhole = f.Whole
				*n += f.Drifted
				rd.Done()
			}
		}
	}()
	return n, func() { <-done }
}

// checked makes one check, check, with a Checker reading r (n: following
// its announcements; nil: none) over a cache that holds webState(rs1) and
// has its rules ensured, the sync loop's folding beside it. It returns the
// read, how much the fold found drifted, and the cache after it.
func checked(r dataplane.Reader, n dataplane.Notifier, check func(c *Checker, ctx context.Context) *Read) (*Read, int, *observed.Cache) {
	ctx, cancel := context.WithCancel(context.Background())
	cache := observed.New()
	cache.Load(dataplane.Observation{State: webState(rs1)})
	m := NewMailbox(cache)
	m.Ensured(shim.Config{})
	drifted, stop := folder(ctx, m, cache)
	rd := check(&Checker{Mailbox: m, Reader: r, Notify: n, Period: time.Minute}, ctx)
	cancel()
	stop()
	return rd, *drifted, cache
}

// TestCheck: one check is a scan when the kernel agrees with the cache,
// and a scan then a whole read, folded, when it does not; a failed read
// hands nothing over.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		kernel                 model.State
		rulesOK                bool
		failScan, failObserve  error
		scans, observes, drift int
		handed                 bool
		rulesMissing           bool
	}{
		{name: "agrees", kernel: webState(rs1), rulesOK: true, scans: 1, handed: true},
		{name: "real server gone", kernel: webState(), rulesOK: true, scans: 1, observes: 1, drift: 1, handed: true},
		{name: "rules gone", kernel: webState(rs1), scans: 1, handed: true, rulesMissing: true},
		{name: "scan fails", kernel: webState(), rulesOK: true, failScan: errors.New("interrupted dump"), scans: 1},
		{name: "whole read fails", kernel: webState(), rulesOK: true, failObserve: errors.New("interrupted dump"), scans: 1, observes: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &kernel{state: tc.kernel, rulesOK: tc.rulesOK, failScan: tc.failScan, failObserve: tc.failObserve}
			rd, drifted, cache := checked(k, nil, (*Checker).Check)
			if k.scans != tc.scans || k.observes != tc.observes || drifted != tc.drift {
				t.Fatalf("%d scans, %d whole reads, %d drifted; want %d, %d, %d", k.scans, k.observes, drifted, tc.scans, tc.observes, tc.drift)
			}
			if (rd != nil) != tc.handed {
				t.Fatalf("read handed over: %v, want %v", rd != nil, tc.handed)
			}
			if rd != nil && rd.RulesMissing != tc.rulesMissing {
				t.Fatalf("rules missing: %v, want %v", rd.RulesMissing, tc.rulesMissing)
			}
			if got, want := cache.State().Dump(), tc.kernel.Dump(); tc.drift > 0 && got != want {
				t.Fatalf("cache after the check:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestPause: a read under slowRead waits fastReadShare times its time, a
// slower one readShare times, or repairWait where that is shorter, but
// never less than minReadShare times; never less than the period.
func TestPause(t *testing.T) {
	c := &Checker{Period: 30 * time.Second}
	for _, tc := range []struct{ took, want time.Duration }{
		{10 * time.Millisecond, 30 * time.Second},
		{500 * time.Millisecond, 30 * time.Second},
		{900 * time.Millisecond, 30 * time.Second},
		{2 * time.Second, 200 * time.Second},    // readShare × t
		{3 * time.Second, 4 * time.Minute},      // repairWait, not 300 s
		{30 * time.Second, 450 * time.Second},   // minReadShare × t, not 3,000 s
		{100 * time.Second, 1500 * time.Second}, // the share holds however slow
	} {
		if got := c.pause(tc.took); got != tc.want {
			t.Errorf("after a read of %s: %s, want %s", tc.took, got, tc.want)
		}
	}
	c.Period = time.Second
	if got := c.pause(900 * time.Millisecond); got != 18*time.Second {
		t.Errorf("short period, fast read: %s, want 18s", got)
	}
	c.Period = 10 * time.Minute
	if got := c.pause(3 * time.Second); got != 10*time.Minute {
		t.Errorf("a period longer than repairWait: %s, want the period", got)
	}
}

// TestReadCostsItsCPU: a read that took little time but much CPU (the
// kernel's answers, the garbage it leaves) is spaced by its CPU.
func TestReadCostsItsCPU(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cache := observed.New()
	cache.Load(dataplane.Observation{State: webState(rs1)})
	m := NewMailbox(cache)
	_, stop := folder(ctx, m, cache)
	var used time.Duration
	cpu := func() time.Duration { used += 3 * time.Second; return used } // 3 s between any two looks
	c := &Checker{Mailbox: m, Reader: &kernel{state: webState(rs1), rulesOK: true}, Period: 30 * time.Second, CPU: cpu}
	rd := c.Check(ctx)
	cancel()
	stop()
	if rd == nil || c.spent != 3*time.Second {
		t.Fatalf("a read of little time and 3 CPU-s: read %v, cost %s, want 3s", rd != nil, c.spent)
	}
	if got, want := c.pause(c.spent), repairWait; got != want {
		t.Fatalf("next read after %s, want %s", got, want)
	}
}

// TestRepairIsNotCharged: a check whose scan found drift and read the
// kernel whole is spaced by the scan's cost alone, so that the next
// repair is not held off by this one's.
func TestRepairIsNotCharged(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cache := observed.New()
	cache.Load(dataplane.Observation{State: webState(rs1)})
	m := NewMailbox(cache)
	drifted, stop := folder(ctx, m, cache)
	var used time.Duration
	cpu := func() time.Duration { used += 3 * time.Second; return used } // 3 s between any two looks
	k := &kernel{state: webState(), rulesOK: true}                       // rs1 deleted by someone else
	c := &Checker{Mailbox: m, Reader: k, Period: 30 * time.Second, CPU: cpu}
	c.Check(ctx)
	cancel()
	stop()
	if k.scans != 1 || k.observes != 1 || *drifted != 1 {
		t.Fatalf("%d scans, %d whole reads, %d drifted; want a scan, a whole read, 1 drifted", k.scans, k.observes, *drifted)
	}
	if c.spent != 3*time.Second {
		t.Fatalf("charged %s for a scan of 3 CPU-s and a whole read of 3, want the scan's 3s", c.spent)
	}
}

// TestSupersededReadIsDone: a read handed over and never taken is done
// once the next one begins, so nobody waits for it.
func TestSupersededReadIsDone(t *testing.T) {
	cache := observed.New()
	m := NewMailbox(cache)
	_, since := m.Begin()
	rd := NewRead(observed.WholeRead(since, dataplane.Observation{State: model.NewState()}))
	m.Hand(rd)
	m.Begin()
	select {
	case <-rd.done:
	default:
		t.Fatal("the superseded read is not done")
	}
	if m.Take() != nil {
		t.Fatal("the superseded read is still handed over")
	}
}

// TestChargeBeyondPace: a read is charged the CPU the process spent during
// it beyond the pace it kept before: a read at rest all of it, a read
// right after a busy start only what it added, and never less than its
// time.
func TestChargeBeyondPace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before time.Duration // CPU over the 100 s before the read
		during time.Duration // CPU during the 10 s read
		want   time.Duration
	}{
		{name: "at rest", before: time.Second, during: 25 * time.Second, want: 24900 * time.Millisecond},
		{name: "after a busy start", before: 150 * time.Second, during: 25 * time.Second, want: 10 * time.Second},
		{name: "busy, the read adding more", before: 100 * time.Second, during: 30 * time.Second, want: 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var used time.Duration
				c := &Checker{CPU: func() time.Duration { return used }}
				c.markPace()
				time.Sleep(100 * time.Second)
				used += tc.before
				began, cpuBegan := time.Now(), used
				time.Sleep(10 * time.Second)
				used += tc.during
				if got := c.charge(began, cpuBegan, time.Since(began), used-cpuBegan); got != tc.want {
					t.Fatalf("charged %s, want %s", got, tc.want)
				}
			})
		})
	}
}
