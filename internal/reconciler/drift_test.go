package reconciler

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/runner"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// blockingReader reads the fake kernel at once, then holds its answer
// until released: a drift read that takes as long as the test wants.
type blockingReader struct {
	dataplane.Reader
	entered chan struct{} // one value per read, sent after the kernel was read
	release chan struct{}
}

func (b *blockingReader) ObserveServices(ctx context.Context, keys []model.VSKey) (dataplane.Observation, error) {
	obs, err := b.Reader.ObserveServices(ctx, keys)
	b.entered <- struct{}{}
	<-b.release
	return obs, err
}

func (b *blockingReader) ObserveTable(ctx context.Context) (dataplane.Observation, error) {
	obs, err := b.Reader.ObserveTable(ctx)
	b.entered <- struct{}{}
	<-b.release
	return obs, err
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
	web := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80)
	dns := model.NewVSKey(model.UDP, netip.MustParseAddr("10.96.0.53"), 53)
	// Someone else deletes dns's real server before the read.
	if err := r.fake.DeleteReal(ctx, dns, netip.MustParseAddrPort("10.244.1.3:53")); err != nil {
		t.Fatal(err)
	}
	br := &blockingReader{Reader: r.fake, entered: make(chan struct{}), release: make(chan struct{})}
	d := &DriftChecker{Rec: r.rec, Reader: br}
	read := make(chan *driftRead)
	go func() { read <- d.read(ctx, []model.VSKey{web, dns}, false) }()
	<-br.entered // the read saw the kernel and is stuck

	r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2"), ready("10.244.2.2"), ready("10.244.3.2")))
	st := r.sync(false)
	if st.Ops == 0 || !strings.Contains(r.fake.Dump(), "10.244.3.2:8080") {
		t.Fatalf("change not applied while the drift read is stuck: ops %d\n%s", st.Ops, r.fake.Dump())
	}
	close(br.release)
	select {
	case <-r.rec.DriftWake():
	case <-time.After(time.Minute): // a hang, not a timing assert
		t.Fatal("the drift read never asked for a sync")
	}
	st = r.sync(false) // folds the read
	if rd := <-read; rd == nil {
		t.Fatal("drift read failed")
	}
	if st.Failed != 0 || st.Drift != 1 {
		t.Fatalf("fold: %+v, want one drifted virtual server and no failure", st)
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
	web := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80)
	br := &blockingReader{Reader: r.fake, entered: make(chan struct{}), release: make(chan struct{})}
	d := &DriftChecker{Rec: r.rec, Reader: br}
	read := make(chan *driftRead)
	go func() { read <- d.read(ctx, []model.VSKey{web}, false) }()
	<-br.entered
	if err := r.fake.DeleteService(ctx, web); err != nil { // after the read
		t.Fatal(err)
	}
	r.sync(true) // repairs it
	close(br.release)
	<-r.rec.DriftWake()
	if st := r.sync(false); st.Drift != 0 || st.Ops != 0 {
		t.Fatalf("a stale read was folded: %+v", st)
	}
	<-read
	r.expectDump(webAndDNS)
}

// TestForeignChangesRepairedWithinPeriod runs the runner and the drift
// checker on a fake clock: changes made by someone else to every part of
// the kernel (a virtual server deleted, a real server deleted or
// reweighted, a VIP unbound, a set member removed, the rules flushed) are
// all repaired within one period plus the sync's minimum interval, and
// no full resync runs after the first.
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
			Repair: r.rec.DriftWake(), MinInterval: minInterval,
		}
		d := &DriftChecker{Rec: r.rec, Reader: r.fake, Period: period, Slices: 4}
		done := make(chan struct{}, 2)
		go func() { _ = run.Run(ctx); done <- struct{}{} }()
		go func() { d.Run(ctx); done <- struct{}{} }()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		r.expectDump(webAndDNS)
		want := r.fake.State()

		web := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80)
		dns := model.NewVSKey(model.UDP, netip.MustParseAddr("10.96.0.53"), 53)
		for i, foreign := range []func() error{
			func() error { return r.fake.DeleteService(ctx, dns) },
			func() error { return r.fake.DeleteReal(ctx, web, netip.MustParseAddrPort("10.244.1.2:8080")) },
			func() error {
				return r.fake.UpdateReal(ctx, web, model.RealServer{Addr: netip.MustParseAddrPort("10.244.2.2:8080"), Weight: 7})
			},
			func() error { return r.fake.DeleteAddr(ctx, netip.MustParseAddr("10.96.0.53")) },
			func() error { return r.fake.DeleteSetEntry(ctx, shim.Entry(shim.ClusterIP, web.Addr, model.TCP, 80)) },
			func() error { r.fake.FlushRules(); return nil },
		} {
			if err := foreign(); err != nil {
				t.Fatalf("change %d: %v", i, err)
			}
			if r.fake.State().Equal(want) && r.fake.ShimConfig() != nil {
				t.Fatalf("change %d changed nothing", i)
			}
			time.Sleep(period + minInterval)
			synctest.Wait()
			if got := r.fake.State(); !got.Equal(want) || r.fake.ShimConfig() == nil {
				t.Fatalf("change %d not repaired within %s:\n%s\nwant:\n%s(rules %v)", i, period+minInterval, got.Dump(), want.Dump(), r.fake.ShimConfig())
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
