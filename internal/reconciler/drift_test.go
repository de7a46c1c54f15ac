package reconciler

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/observed"
	"github.com/kube-ipvs/kube-ipvs/internal/rescan"
	"github.com/kube-ipvs/kube-ipvs/internal/runner"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

var (
	webKey = model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80)
	dnsKey = model.NewVSKey(model.UDP, netip.MustParseAddr("10.96.0.53"), 53)
)

// blockingReader reads the fake kernel at once, then holds its answer
// until released: a drift read that takes as long as the test wants. It
// holds the first read only (the scan), not the whole read a scan that
// found drift asks for.
type blockingReader struct {
	dataplane.Reader
	entered chan struct{} // one value, sent after the kernel was read
	release chan struct{}
	held    atomic.Bool
}

func (b *blockingReader) Observe(ctx context.Context) (dataplane.Observation, error) {
	obs, err := b.Reader.Observe(ctx)
	b.hold()
	return obs, err
}

func (b *blockingReader) Scan(ctx context.Context, v dataplane.Visitor) error {
	err := b.Reader.Scan(ctx, v)
	b.hold()
	return err
}

func (b *blockingReader) hold() {
	if b.held.CompareAndSwap(false, true) {
		b.entered <- struct{}{}
		<-b.release
	}
}

func newBlockingReader(rd dataplane.Reader) *blockingReader {
	return &blockingReader{Reader: rd, entered: make(chan struct{}), release: make(chan struct{})}
}

// isScan tells whether a read is a scan (digests), not a whole read.
func isScan(rd *rescan.Read) bool {
	scan, _, _ := rd.Scanned()
	return scan
}

// foldNext waits for the checker's cue and runs the sync that folds its
// read.
func (r *rig) foldNext() Status {
	r.t.Helper()
	select {
	case <-r.rec.RescanWake():
	case <-time.After(time.Minute): // a hang, not a timing assert
		r.t.Fatal("the drift read never asked for a sync")
	}
	return r.sync(false)
}

// TestChangeDuringDriftReadIsAppliedWithoutWaiting: while a drift read is
// stuck in the kernel, an endpoint change is synced and reaches the kernel;
// the read, older than the change, then neither undoes it nor fails the
// next sync, and a foreign change it saw is repaired.
func TestChangeDuringDriftReadIsAppliedWithoutWaiting(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Someone else deletes dns's real server before the read.
	if err := r.fake.Do(ctx, model.Op{Kind: model.DeleteReal, VS: model.VirtualServer{Key: dnsKey}, RS: model.RealServer{Addr: netip.MustParseAddrPort("10.244.1.3:53")}}); err != nil {
		t.Fatal(err)
	}
	br := newBlockingReader(r.fake)
	d := &rescan.Checker{Mailbox: r.rec.Rescans(), Reader: br}
	read := make(chan *rescan.Read)
	go func() { read <- d.Check(ctx) }()
	<-br.entered // the read saw the kernel and is stuck

	r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2"), ready("10.244.2.2"), ready("10.244.3.2")))
	st := r.sync(false)
	if st.Ops == 0 || !strings.Contains(r.fake.Dump(), "10.244.3.2:8080") {
		t.Fatalf("change not applied while the drift read is stuck: ops %d\n%s", st.Ops, r.fake.Dump())
	}
	if st.Checked {
		t.Fatal("a sync with no read to fold says it checked the kernel")
	}
	close(br.release)
	// The scan differs from the cache (dns's real server): the checker
	// reads the kernel whole, and that read is folded.
	if st = r.foldNext(); st.Drift != 0 || st.Ops != 0 || !st.Checked {
		t.Fatalf("scan's fold: %+v, want a checked sync that repaired nothing yet", st)
	}
	st = r.foldNext()
	if rd := <-read; rd == nil || isScan(rd) {
		t.Fatalf("drift read failed or was no whole read: %+v", rd)
	}
	if st.Failed != 0 || st.Drift != 1 || !st.Checked {
		t.Fatalf("fold: %+v, want a checked sync, one drifted virtual server and no failure", st)
	}
	two := "  -a -t 10.96.0.10:80 -r 10.244.2.2:8080 -m -w 1\n"
	r.expectDump(strings.Replace(webAndDNS, two, two+"  -a -t 10.96.0.10:80 -r 10.244.3.2:8080 -m -w 1\n", 1))
	if st := r.sync(false); st.Ops != 0 {
		t.Fatalf("after the fold: %d more operations, want none", st.Ops)
	}
}

// TestFullSyncMakesDriftReadStale: a full sync during a read re-read
// everything; the read is dropped, not folded.
func TestFullSyncMakesDriftReadStale(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	ctx := context.Background()
	br := newBlockingReader(r.fake)
	d := &rescan.Checker{Mailbox: r.rec.Rescans(), Reader: br}
	read := make(chan *rescan.Read)
	go func() { read <- d.Check(ctx) }()
	<-br.entered
	if err := r.fake.Do(ctx, model.Op{Kind: model.DeleteService, VS: model.VirtualServer{Key: webKey}}); err != nil { // after the read
		t.Fatal(err)
	}
	r.sync(true) // repairs it
	close(br.release)
	if st := r.foldNext(); st.Drift != 0 || st.Ops != 0 {
		t.Fatalf("a stale read was folded: %+v", st)
	}
	<-read
	r.expectDump(webAndDNS)
}

// TestIdleFoldChangesNothing: a read that finds the kernel as the cache
// has it plans nothing, reads no rules again, and publishes no new
// virtual server: the view's values are the same ones as before.
func TestIdleFoldChangesNothing(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	before, _ := r.rec.View().Server(webKey)
	r.fake.ResetCalls()
	d := &rescan.Checker{Mailbox: r.rec.Rescans(), Reader: r.fake}
	go d.Check(context.Background())
	st := r.foldNext()
	if st.Drift != 0 || st.Ops != 0 || st.Full {
		t.Fatalf("idle fold: %+v, want nothing", st)
	}
	calls := r.fake.Calls()
	if calls["Scan"] != 1 || calls["Observe"] != 0 || calls["ShimInPlace"] != 1 || calls["EnsureShim"] != 0 || mutating(r.fake) != 1 {
		t.Fatalf("idle fold calls %v: want one scan, no whole read, one rules check, no write", calls)
	}
	if after, _ := r.rec.View().Server(webKey); after != before {
		t.Fatal("the idle fold published a new copy of a virtual server that did not change")
	}
}

// TestForeignChangesRepairedWithinPeriod runs the runner and the drift
// checker on a fake clock: changes made by someone else to every part of
// the kernel (a virtual server deleted, a real server deleted, added or
// reweighted, a VIP unbound, a set member removed, the rules flushed) are
// each repaired within one period plus twice the sync's minimum interval
// (the scan's fold, then the whole read's), and no full sync runs after
// the first.
func TestForeignChangesRepairedWithinPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.webAndDNS()
		const period, minInterval = 30 * time.Second, time.Second
		ctx, cancel := context.WithCancel(context.Background())
		fulls := 0
		run := &runner.Runner{
			Sync: func(ctx context.Context, full bool) (time.Duration, error) {
				st, err := r.rec.Sync(ctx, full)
				if st.Full {
					fulls++
				}
				return st.Requeue, err
			},
			Trigger: r.rec.RescanWake(), MinInterval: minInterval,
		}
		d := &rescan.Checker{Mailbox: r.rec.Rescans(), Reader: r.fake, Period: period}
		done := make(chan struct{}, 2)
		go func() { _ = run.Run(ctx); done <- struct{}{} }()
		go func() { d.Run(ctx); done <- struct{}{} }()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		r.expectDump(webAndDNS)
		want := r.fake.State()

		for i, foreign := range []func() error{
			func() error {
				return r.fake.Do(ctx, model.Op{Kind: model.DeleteService, VS: model.VirtualServer{Key: dnsKey}})
			},
			func() error {
				return r.fake.Do(ctx, model.Op{Kind: model.DeleteReal, VS: model.VirtualServer{Key: webKey}, RS: model.RealServer{Addr: netip.MustParseAddrPort("10.244.1.2:8080")}})
			},
			func() error {
				return r.fake.Do(ctx, model.Op{Kind: model.AddReal, VS: model.VirtualServer{Key: webKey}, RS: model.RealServer{Addr: netip.MustParseAddrPort("10.244.9.9:8080"), Weight: 1}})
			},
			func() error {
				return r.fake.Do(ctx, model.Op{Kind: model.UpdateReal, VS: model.VirtualServer{Key: webKey}, RS: model.RealServer{Addr: netip.MustParseAddrPort("10.244.2.2:8080"), Weight: 7}})
			},
			func() error {
				return r.fake.Do(ctx, model.Op{Kind: model.UnbindAddr, Addr: netip.MustParseAddr("10.96.0.53")})
			},
			func() error {
				return r.fake.Do(ctx, model.Op{Kind: model.DeleteSetEntry, Entry: shim.Entry(shim.ClusterIP, webKey.Addr, model.TCP, 80)})
			},
			func() error { r.fake.FlushRules(); return nil },
		} {
			if err := foreign(); err != nil {
				t.Fatalf("change %d: %v", i, err)
			}
			if r.fake.State().Equal(want) && r.fake.ShimConfig() != nil {
				t.Fatalf("change %d changed nothing", i)
			}
			time.Sleep(period + 2*minInterval)
			synctest.Wait()
			if got := r.fake.State(); !got.Equal(want) || r.fake.ShimConfig() == nil {
				t.Fatalf("change %d not repaired within %s:\n%s\nwant:\n%s(rules %v)", i, period+2*minInterval, got.Dump(), want.Dump(), r.fake.ShimConfig())
			}
		}
		if fulls != 1 {
			t.Fatalf("%d full syncs, want only the first", fulls)
		}
		cancel()
		<-done
		<-done
	})
}

// TestFailedDriftReadRepairsNothing: a read that fails is dropped; the
// sync loop is not woken and the cache is left as it was. So is a whole
// read that fails after a scan found the kernel differs.
func TestFailedDriftReadRepairsNothing(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	ctx := context.Background()
	if err := r.fake.Do(ctx, model.Op{Kind: model.DeleteService, VS: model.VirtualServer{Key: dnsKey}}); err != nil {
		t.Fatal(err)
	}
	r.fake.FailNext("Scan", errors.New("interrupted dump"))
	d := &rescan.Checker{Mailbox: r.rec.Rescans(), Reader: r.fake}
	if rd := d.Check(ctx); rd != nil {
		t.Fatal("a failed read was handed over")
	}
	select {
	case <-r.rec.RescanWake():
		t.Fatal("a failed read woke the sync loop")
	default:
	}
	if st := r.sync(false); st.Drift != 0 || st.Ops != 0 {
		t.Fatalf("sync after a failed read: %+v, want nothing", st)
	}

	r.fake.FailNext("Observe", errors.New("interrupted dump"))
	read := make(chan *rescan.Read)
	go func() { read <- d.Check(ctx) }()
	if st := r.foldNext(); st.Drift != 0 || st.Ops != 0 {
		t.Fatalf("the scan's fold: %+v, want nothing repaired", st)
	}
	if rd := <-read; rd != nil {
		t.Fatal("a failed whole read was handed over")
	}
	if st := r.sync(false); st.Drift != 0 || st.Ops != 0 {
		t.Fatalf("sync after a failed whole read: %+v, want nothing", st)
	}
	if _, ok := r.fake.State().Services[dnsKey]; ok {
		t.Fatal("a failed read repaired dns")
	}
}

// slowReader reads the fake kernel in take (fake) time and counts reads.
type slowReader struct {
	dataplane.Reader
	take  time.Duration
	reads int
}

func (s *slowReader) Observe(ctx context.Context) (dataplane.Observation, error) {
	s.reads++
	time.Sleep(s.take)
	return s.Reader.Observe(ctx)
}

func (s *slowReader) Scan(ctx context.Context, v dataplane.Visitor) error {
	s.reads++
	time.Sleep(s.take)
	return s.Reader.Scan(ctx, v)
}

// TestSlowReadsSpreadOut: on a fake clock, a kernel that reads slowly is
// read once per readShare reads' time, not once a period, and one that
// reads fast once a period; the first read comes as soon as the first
// sync has ended.
func TestSlowReadsSpreadOut(t *testing.T) {
	for _, tc := range []struct {
		take time.Duration
		want int // reads in 1,000 s after the first sync
	}{
		{take: 10 * time.Millisecond, want: 34},  // at once, then every 30 s
		{take: 500 * time.Millisecond, want: 33}, // under a second: every 30.5 s (a hundred times it would be 50.5)
		{take: 2 * time.Second, want: 5},         // every 202 s, read included
	} {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t)
			r.webAndDNS()
			r.sync(false)
			ctx, cancel := context.WithCancel(context.Background())
			sr := &slowReader{Reader: r.fake, take: tc.take}
			d := &rescan.Checker{Mailbox: r.rec.Rescans(), Reader: sr, Period: 30 * time.Second}
			done := make(chan struct{})
			go func() { d.Run(ctx); close(done) }()
			go func() { // the sync loop's part: fold each read
				for {
					select {
					case <-ctx.Done():
						return
					case <-r.rec.RescanWake():
						_, _ = r.rec.Sync(ctx, false)
					}
				}
			}()
			time.Sleep(1000*time.Second + time.Millisecond)
			synctest.Wait()
			if sr.reads != tc.want {
				t.Errorf("read taking %s: %d reads in 1,000 s, want %d", tc.take, sr.reads, tc.want)
			}
			cancel()
			<-done
		})
	}
}

// readBesideChange starts a drift read of the rig's kernel (web and dns,
// synced) and, while it is under way, syncs a change to web: a third
// endpoint, which touches web's virtual server and its set members.
func readBesideChange(t *testing.T, r *rig) *rescan.Read {
	t.Helper()
	d := &rescan.Checker{Mailbox: r.rec.Rescans(), Reader: r.fake}
	return besideChange(t, r, d.Whole)
}

// besideChange begins a read, takes it with take, then syncs the change
// of readBesideChange before the read is handed over.
func besideChange(t *testing.T, r *rig, take func(context.Context, observed.Revision) (*rescan.Read, error)) *rescan.Read {
	t.Helper()
	_, since := r.rec.Rescans().Begin()
	rd, err := take(context.Background(), since)
	if err != nil {
		t.Fatal(err)
	}
	r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2"), ready("10.244.2.2"), ready("10.244.3.2")))
	if st := r.sync(false); st.Ops == 0 {
		t.Fatal("the change during the read planned nothing")
	}
	return rd
}

// TestFoldTrustsUntouchedDigests: a read that overlapped a change is
// compared entry by entry only if the digests of what the syncs did not
// touch differ. The read handed over here differs from the cache in dns's
// real server and dns's frontend record (untouched) while its digests, taken
// before, say it agrees, as a digest collision would: a fold that trusts
// them finds no drift. A fold that compared whole digests (which differ:
// web changed) would walk every entry and find both.
func TestFoldTrustsUntouchedDigests(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	rd := readBesideChange(t, r)
	dns := rd.State.Services[dnsKey].Clone()
	dns.Reals = model.Reals{}
	rd.State.Services[dnsKey] = dns
	delete(rd.State.Sets, shim.Entry(shim.Frontends, dnsKey.Addr, dnsKey.Proto, dnsKey.Port))
	r.rec.Rescans().Hand(rd)
	if st := r.foldNext(); st.Drift != 0 || st.Ops != 0 || !st.Checked {
		t.Fatalf("fold: %+v, want a checked sync that compared nothing one by one", st)
	}
}

// TestDriftBesideChangeRepaired: what someone else changed before a read
// that overlapped one of the agent's changes is still found and repaired,
// in the IPVS table and in the sets alike.
func TestDriftBesideChangeRepaired(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	ctx := context.Background()
	member := shim.Entry(shim.ClusterIP, dnsKey.Addr, dnsKey.Proto, dnsKey.Port)
	if err := r.fake.Do(ctx, model.Op{Kind: model.DeleteSetEntry, Entry: member}); err != nil {
		t.Fatal(err)
	}
	if err := r.fake.Do(ctx, model.Op{Kind: model.DeleteReal, VS: model.VirtualServer{Key: dnsKey}, RS: model.RealServer{Addr: netip.MustParseAddrPort("10.244.1.3:53")}}); err != nil {
		t.Fatal(err)
	}
	r.rec.Rescans().Hand(readBesideChange(t, r))
	if st := r.foldNext(); st.Drift != 2 || st.Ops != 2 {
		t.Fatalf("fold: %+v, want the real server and the member found and put back", st)
	}
	if _, ok := r.fake.State().Sets[member]; !ok {
		t.Fatalf("member %s not repaired", member.Member())
	}
	if !strings.Contains(r.fake.Dump(), "-a -u 10.96.0.53:53 -r 10.244.1.3:53") {
		t.Fatalf("real server not repaired:\n%s", r.fake.Dump())
	}
}

// scanBesideChange is readBesideChange with a scan: digests and what takes
// the syncs' changes out of them, no copy of the kernel.
func scanBesideChange(t *testing.T, r *rig) *rescan.Read {
	t.Helper()
	d := &rescan.Checker{Mailbox: r.rec.Rescans(), Reader: r.fake}
	return besideChange(t, r, d.Scan)
}

// TestScanBesideChangeAgrees: a scan that overlapped one of the agent's
// changes agrees with the cache once what the change touched is taken out
// of both: no whole read is asked for. Taking the touched virtual server
// or set members out of one side only would make them differ.
func TestScanBesideChangeAgrees(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	rd := scanBesideChange(t, r)
	if _, _, members := rd.Scanned(); rd.State.Services != nil || rd.State.Sets != nil || members == 0 {
		t.Fatalf("a scan kept the table or no member hashes: %d services, %d members", len(rd.State.Services), members)
	}
	r.rec.Rescans().Hand(rd)
	if st := r.foldNext(); st.Drift != 0 || st.Ops != 0 || !st.Checked || rd.WantWhole {
		t.Fatalf("fold: %+v (whole read asked: %v), want a checked sync that needs no whole read", st, rd.WantWhole)
	}
}

// TestScanFindsDriftBesideChange: what someone else changed before a scan
// that overlapped one of the agent's changes makes the digests differ, in
// the table and in the sets alike: the fold asks for a whole read.
func TestScanFindsDriftBesideChange(t *testing.T) {
	ctx := context.Background()
	for name, foreign := range map[string]func(r *rig) error{
		"real server": func(r *rig) error {
			return r.fake.Do(ctx, model.Op{Kind: model.DeleteReal, VS: model.VirtualServer{Key: dnsKey}, RS: model.RealServer{Addr: netip.MustParseAddrPort("10.244.1.3:53")}})
		},
		"set member": func(r *rig) error {
			return r.fake.Do(ctx, model.Op{Kind: model.DeleteSetEntry, Entry: shim.Entry(shim.ClusterIP, dnsKey.Addr, dnsKey.Proto, dnsKey.Port)})
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t)
			r.webAndDNS()
			r.sync(false)
			if err := foreign(r); err != nil {
				t.Fatal(err)
			}
			rd := scanBesideChange(t, r)
			r.rec.Rescans().Hand(rd)
			if st := r.foldNext(); st.Drift != 0 || !rd.WantWhole {
				t.Fatalf("fold: %+v (whole read asked: %v), want a whole read asked for", st, rd.WantWhole)
			}
		})
	}
}

// TestDriftCheckReadsWholeOnlyOnDrift: the checker's read is one scan when
// the kernel agrees, and a scan then a whole read, which repairs, when it
// does not.
func TestDriftCheckReadsWholeOnlyOnDrift(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	ctx := context.Background()
	d := &rescan.Checker{Mailbox: r.rec.Rescans(), Reader: r.fake}
	check := func(wantScans, wantWhole, wantDrift int) {
		t.Helper()
		r.fake.ResetCalls()
		read := make(chan *rescan.Read)
		go func() { read <- d.Check(ctx) }()
		drift := r.foldNext().Drift
		if wantWhole > 0 {
			drift += r.foldNext().Drift
		}
		<-read
		calls := r.fake.Calls()
		if calls["Scan"] != wantScans || calls["Observe"] != wantWhole || drift != wantDrift {
			t.Fatalf("%d scans, %d whole reads, %d drifted; want %d, %d, %d", calls["Scan"], calls["Observe"], drift, wantScans, wantWhole, wantDrift)
		}
	}
	check(1, 0, 0)
	if err := r.fake.Do(ctx, model.Op{Kind: model.DeleteService, VS: model.VirtualServer{Key: dnsKey}}); err != nil {
		t.Fatal(err)
	}
	check(1, 1, 1)
	r.expectDump(webAndDNS)
	check(1, 0, 0)
}

// busyReader reads the fake kernel, then, before the read is handed
// over, has the sync loop's goroutine run a change (during): a sync that
// every read overlaps.
type busyReader struct {
	dataplane.Reader
	during chan chan struct{}
}

func (b *busyReader) Observe(ctx context.Context) (dataplane.Observation, error) {
	obs, err := b.Reader.Observe(ctx)
	b.change()
	return obs, err
}

func (b *busyReader) Scan(ctx context.Context, v dataplane.Visitor) error {
	err := b.Reader.Scan(ctx, v)
	b.change()
	return err
}

func (b *busyReader) change() {
	done := make(chan struct{})
	b.during <- done
	<-done
}

// TestDriftOnBusyServiceRepaired: drift on a virtual server whose
// endpoints change during every read (a busy Service) is still repaired:
// the reads are folded with the syncs' writes replayed onto them, not
// skipped on the virtual server the syncs wrote.
func TestDriftOnBusyServiceRepaired(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	ctx := context.Background()
	gone := netip.MustParseAddrPort("10.244.1.2:8080")
	if err := r.fake.Do(ctx, model.Op{Kind: model.DeleteReal, VS: model.VirtualServer{Key: webKey}, RS: model.RealServer{Addr: gone}}); err != nil {
		t.Fatal(err)
	}
	changes := 0
	busy := &busyReader{Reader: r.fake, during: make(chan chan struct{})}
	d := &rescan.Checker{Mailbox: r.rec.Rescans(), Reader: busy}
	for check := 1; check <= 3; check++ {
		done := make(chan struct{})
		go func() { d.Check(ctx); close(done) }()
	loop:
		for {
			select {
			case <-done:
				break loop
			case <-r.rec.RescanWake():
				r.sync(false)
			case changed := <-busy.during:
				changes++
				r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2"), ready("10.244.2.2"),
					ready(netip.AddrFrom4([4]byte{10, 244, 3, byte(changes)}).String())))
				if st := r.sync(false); st.Ops == 0 {
					t.Error("the change during the read planned nothing")
				}
				close(changed)
			case <-time.After(time.Minute): // a hang, not a timing assert
				t.Fatal("the check never ended")
			}
		}
		if r.fake.State().Services[webKey].Reals.Has(gone) {
			t.Logf("repaired by check %d, %d changes beside the reads", check, changes)
			return
		}
	}
	t.Fatalf("web's real server %s not repaired after 3 checks, each beside a change to web:\n%s", gone, r.fake.Dump())
}
