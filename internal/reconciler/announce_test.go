package reconciler

import (
	"context"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/rescan"
	"github.com/kube-ipvs/kube-ipvs/internal/runner"
)

// announceRig runs the runner and a rescan.Checker that follows the fake's
// announcements, on a fake clock, with a period far longer than any test
// waits: whatever is repaired within the test was repaired because it was
// announced.
type announceRig struct {
	*rig
	cancel func()
	done   chan struct{}
	// checked counts the incremental syncs that compared the whole kernel
	// with the cache (Status.Checked).
	checked int
}

const (
	announcePeriod      = time.Hour
	announceMinInterval = time.Second
)

func newAnnounceRig(t *testing.T) *announceRig {
	r := &announceRig{rig: newRig(t), done: make(chan struct{}, 2)}
	r.webAndDNS()
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	trigger := make(chan struct{}, 1)
	go func() { // the store's changes and the rescan's repairs, as the agent merges them
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.store.Notify():
			case <-r.rec.RescanWake():
			}
			select {
			case trigger <- struct{}{}:
			default:
			}
		}
	}()
	run := &runner.Runner{
		Sync: func(ctx context.Context, full bool) (time.Duration, error) {
			st, err := r.rec.Sync(ctx, full)
			if st.Checked && !st.Full {
				r.checked++
			}
			return st.Requeue, err
		},
		Trigger: trigger, MinInterval: announceMinInterval,
	}
	d := &rescan.Checker{Mailbox: r.rec.Rescans(), Reader: r.fake, Notify: r.fake, Period: announcePeriod}
	go func() { _ = run.Run(ctx); r.done <- struct{}{} }()
	go func() { d.Run(ctx); r.done <- struct{}{} }()
	time.Sleep(5 * time.Second)
	synctest.Wait()
	r.expectDump(webAndDNS)
	return r
}

func (r *announceRig) stop() {
	r.cancel()
	<-r.done
	<-r.done
}

// TestAnnouncedChangesRepairedAtOnce: a VIP unbound or the rules flushed by
// someone else is announced by the kernel, read again alone and repaired
// within a second, not a period.
func TestAnnouncedChangesRepairedAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		foreign func(context.Context, *rig) error
	}{
		{"VIP unbound", func(ctx context.Context, r *rig) error {
			return r.fake.Do(ctx, model.Op{Kind: model.UnbindAddr, Addr: netip.MustParseAddr("10.96.0.53")})
		}},
		{"rules flushed", func(_ context.Context, r *rig) error { r.fake.FlushRules(); return nil }},
		{"both", func(ctx context.Context, r *rig) error {
			r.fake.FlushRules()
			return r.fake.Do(ctx, model.Op{Kind: model.UnbindAddr, Addr: netip.MustParseAddr("10.96.0.10")})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newAnnounceRig(t)
				defer r.stop()
				want := r.fake.State()
				if err := tc.foreign(context.Background(), r.rig); err != nil {
					t.Fatal(err)
				}
				if r.fake.State().Equal(want) && r.fake.ShimConfig() != nil {
					t.Fatal("the change changed nothing")
				}
				time.Sleep(time.Second)
				synctest.Wait()
				if got := r.fake.State(); !got.Equal(want) || r.fake.ShimConfig() == nil {
					t.Fatalf("not repaired within a second:\n%s\nwant:\n%s(rules %v)", got.Dump(), want.Dump(), r.fake.ShimConfig())
				}
			})
		})
	}
}

// TestOwnAnnouncementsRepairNothing: the agent's own binds and rule writes
// are announced too; reading them back finds what the cache holds, so they
// cause no operation and no further read: no loop.
func TestOwnAnnouncementsRepairNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newAnnounceRig(t)
		defer r.stop()
		calls := r.fake.Calls()
		if calls["AddAddr"] != 2 || calls["DeleteAddr"] != 0 || r.fake.RuleWrites() != 1 {
			t.Fatalf("start: %d binds, %d unbinds, %d rule writes; want 2, 0, 1", calls["AddAddr"], calls["DeleteAddr"], r.fake.RuleWrites())
		}

		// A new Service: its VIP is bound by a sync, announced, read
		// alone (no sync folding it claims to have checked the kernel).
		r.fake.ResetCalls()
		checked := r.checked
		r.store.SetService(service("api", "10.96.0.1", corev1.ProtocolTCP, 443))
		r.store.SetSlice(slice("api", corev1.ProtocolTCP, 6443, ready("10.244.1.9")))
		time.Sleep(5 * time.Second)
		synctest.Wait()
		calls = r.fake.Calls()
		if calls["AddAddr"] != 1 || calls["DeleteAddr"] != 0 || calls["LinkAddrs"] != 1 {
			t.Fatalf("a new Service: %d binds, %d unbinds, %d reads of the addresses; want 1, 0, 1", calls["AddAddr"], calls["DeleteAddr"], calls["LinkAddrs"])
		}
		if r.checked != checked {
			t.Fatalf("%d syncs folding a read of the addresses alone said they checked the whole kernel", r.checked-checked)
		}

		// At rest: nothing is announced, nothing read, nothing written.
		r.fake.ResetCalls()
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if calls := r.fake.Calls(); len(calls) != 0 {
			t.Fatalf("at rest the agent called the kernel: %v", calls)
		}
	})
}
