package rescan

import (
	"context"
	"maps"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/observed"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// announcing is a kernel that is also a dataplane.Notifier: a test
// announces through it, and each read of the addresses costs cost.
type announcing struct {
	*kernel
	cost      time.Duration
	heard     func(dataplane.Event)
	addrReads int
	checks    int  // ShimInPlace
	deaf      bool // the announcements of addresses not followed
}

func (k *announcing) Watch(ctx context.Context, report func(dataplane.Event)) {
	k.heard = report
	<-ctx.Done()
}

// FollowsAddrs: the test's announcements are all there are, unless it
// says they are not heard (deaf).
func (k *announcing) FollowsAddrs() bool { return !k.deaf }

func (k *announcing) LinkAddrs(context.Context) (map[netip.Addr]struct{}, error) {
	k.addrReads++
	time.Sleep(k.cost)
	return maps.Clone(k.state.Addrs), nil
}

func (k *announcing) ShimInPlace(ctx context.Context, cfg shim.Config) (bool, error) {
	k.checks++
	return k.kernel.ShimInPlace(ctx, cfg)
}

// TestCheckPart: an announcement is read again alone: the addresses, the
// rules, or both; never the table.
func TestCheckPart(t *testing.T) {
	noVIP := webState(rs1)
	clear(noVIP.Addrs)
	for _, tc := range []struct {
		name                 string
		ev                   dataplane.Event
		kernel               model.State
		rulesOK              bool
		addrReads, checks    int
		drift                int
		rulesMissing, partly bool
	}{
		{name: "addresses, agree", ev: dataplane.AddrsChanged, kernel: webState(rs1), rulesOK: true, addrReads: 1},
		{name: "addresses, VIP gone", ev: dataplane.AddrsChanged, kernel: noVIP, rulesOK: true, addrReads: 1, drift: 1},
		{name: "addresses, real server gone: not read", ev: dataplane.AddrsChanged, kernel: webState(), rulesOK: true, addrReads: 1},
		{name: "rules, in place", ev: dataplane.RulesChanged, kernel: noVIP, rulesOK: true, checks: 1},
		{name: "rules, gone", ev: dataplane.RulesChanged, kernel: webState(rs1), checks: 1, rulesMissing: true},
		{name: "both", ev: dataplane.AddrsChanged | dataplane.RulesChanged, kernel: noVIP, addrReads: 1, checks: 1, drift: 1, rulesMissing: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &announcing{kernel: &kernel{state: tc.kernel, rulesOK: tc.rulesOK}}
			rd, drifted, _ := checked(k, k, func(c *Checker, ctx context.Context) *Read { return c.CheckPart(ctx, tc.ev) })
			if k.scans+k.observes != 0 || k.addrReads != tc.addrReads || k.checks != tc.checks || drifted != tc.drift {
				t.Fatalf("%d table reads, %d address reads, %d rules checks, %d drifted; want 0, %d, %d, %d",
					k.scans+k.observes, k.addrReads, k.checks, drifted, tc.addrReads, tc.checks, tc.drift)
			}
			if rd == nil || rd.RulesMissing != tc.rulesMissing {
				t.Fatalf("read %v, want one with rules missing %v", rd, tc.rulesMissing)
			}
		})
	}
}

// TestScanLeavesAddrsToAnnouncements: while the link's addresses are
// followed, the periodic scan reads the table and the members but not the
// addresses, and a VIP gone from the kernel is not its to find (the
// announcement's read is); while they are not followed, the scan reads
// them and finds it.
func TestScanLeavesAddrsToAnnouncements(t *testing.T) {
	noVIP := webState(rs1)
	clear(noVIP.Addrs)
	for _, tc := range []struct {
		name  string
		deaf  bool
		drift int
	}{
		{name: "followed", drift: 0},
		{name: "not followed", deaf: true, drift: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &announcing{kernel: &kernel{state: noVIP, rulesOK: true}, deaf: tc.deaf}
			rd, drifted, _ := checked(k, k, (*Checker).Check)
			if rd == nil || k.scans != 1 || drifted != tc.drift {
				t.Fatalf("read %v, %d scans, %d drifted; want a read, 1 scan, %d drifted", rd != nil, k.scans, drifted, tc.drift)
			}
			if read := rd.State.Addrs != nil; read != tc.deaf {
				t.Fatalf("addresses read by the scan: %v, want %v", read, tc.deaf)
			}
		})
	}
}

// TestAnnouncementsSettle: a burst of announcements is one read, settle
// after it; announcements that never stop are read at most once per
// partShare times a read's time, plus the read.
func TestAnnouncementsSettle(t *testing.T) {
	for _, tc := range []struct {
		name             string
		cost             time.Duration // of one read of the addresses
		every, lasting   time.Duration // an announcement every, for lasting
		minRead, maxRead int
	}{
		{name: "a burst", every: time.Millisecond, lasting: 100 * time.Millisecond, minRead: 1, maxRead: 1},
		{name: "a storm, cheap reads", every: 10 * time.Millisecond, lasting: 10 * time.Second, minRead: 40, maxRead: 67},
		{name: "a storm, dear reads", cost: time.Second, every: 10 * time.Millisecond, lasting: time.Minute, minRead: 5, maxRead: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				k := &announcing{kernel: &kernel{state: webState(rs1), rulesOK: true}, cost: tc.cost}
				m, end := running(k)
				m.SyncEnded()
				time.Sleep(time.Second) // the first whole read
				synctest.Wait()
				for until := time.Now().Add(tc.lasting); time.Now().Before(until); time.Sleep(tc.every) {
					k.heard(dataplane.AddrsChanged)
				}
				time.Sleep(tc.cost + time.Second)
				synctest.Wait()
				end()
				if k.addrReads < tc.minRead || k.addrReads > tc.maxRead {
					t.Fatalf("%d reads of the addresses, want %d to %d", k.addrReads, tc.minRead, tc.maxRead)
				}
			})
		})
	}
}

// TestAnnouncedBeforeAScan: an announcement heard before a periodic scan
// is covered by it when the scan reads the addresses, and still read
// after it when the scan leaves them to the announcements (the opening
// report of a subscription comes before the first scan).
func TestAnnouncedBeforeAScan(t *testing.T) {
	for _, tc := range []struct {
		name      string
		deaf      bool
		addrReads int
	}{
		{name: "scan leaves the addresses out", addrReads: 1},
		{name: "scan reads them", deaf: true, addrReads: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				k := &announcing{kernel: &kernel{state: webState(rs1), rulesOK: true}, deaf: tc.deaf}
				m, end := running(k)
				synctest.Wait() // Watch is under way
				k.heard(dataplane.AddrsChanged)
				m.SyncEnded()
				time.Sleep(time.Second)
				synctest.Wait()
				end()
				if k.scans != 1 || k.addrReads != tc.addrReads {
					t.Fatalf("%d scans, %d reads of the addresses; want 1, %d", k.scans, k.addrReads, tc.addrReads)
				}
			})
		})
	}
}

// running runs a Checker of period an hour on k, over a cache that holds
// webState(rs1), with the sync loop's folding beside
// it; end stops both and waits for them.
func running(k *announcing) (m *Mailbox, end func()) {
	ctx, cancel := context.WithCancel(context.Background())
	cache := observed.New()
	cache.Load(dataplane.Observation{State: webState(rs1)})
	m = NewMailbox(cache)
	_, stop := folder(ctx, m, cache)
	c := &Checker{Mailbox: m, Reader: k, Notify: k, Period: time.Hour}
	ran := make(chan struct{})
	go func() { c.Run(ctx); close(ran) }()
	return m, func() {
		cancel()
		<-ran
		stop()
	}
}
