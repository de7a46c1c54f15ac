package runner

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// call is one sync the runner made, with its time since start.
type call struct {
	at   time.Duration
	full bool
}

// harness runs a runner under synctest's fake clock and records its syncs.
type harness struct {
	start   time.Time
	calls   []call
	trigger chan struct{}
	fail    func(n int) error
	requeue func(n int) time.Duration
	takes   time.Duration // each sync's length
}

func (h *harness) sync(ctx context.Context, full bool) (time.Duration, error) {
	n := len(h.calls)
	h.calls = append(h.calls, call{at: time.Since(h.start), full: full})
	var err error
	if h.fail != nil {
		err = h.fail(n)
	}
	var rq time.Duration
	if h.requeue != nil {
		rq = h.requeue(n)
	}
	time.Sleep(h.takes)
	return rq, err
}

func (h *harness) poke() {
	select {
	case h.trigger <- struct{}{}:
	default:
	}
}

func run(t *testing.T, h *harness, body func()) {
	synctest.Test(t, func(t *testing.T) {
		h.start = time.Now()
		h.trigger = make(chan struct{}, 1)
		r := &Runner{Sync: h.sync, Trigger: h.trigger, MinInterval: time.Second,
			Backoff: time.Second, MaxBackoff: 8 * time.Second}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { r.Run(ctx); close(done) }()
		body()
		cancel()
		<-done
	})
}

func TestBurstIsCoalescedAndMinIntervalKept(t *testing.T) {
	h := &harness{}
	run(t, h, func() {
		time.Sleep(100 * time.Millisecond)
		for range 50 {
			h.poke()
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(5 * time.Second)
	})
	// Start (full at 0), then the burst: one sync at 1s (min interval after
	// the first), one more for pokes that came after it... the burst ends at
	// 0.6s, so all of it folds into the sync at 1s.
	if len(h.calls) != 2 || !h.calls[0].full || h.calls[1].full || h.calls[1].at != time.Second {
		t.Fatalf("calls %+v, want full at 0 then one incremental at 1s", h.calls)
	}
}

func TestFailureRetriesWithBackoffAsFullSync(t *testing.T) {
	h := &harness{fail: func(n int) error {
		if n < 3 {
			return errors.New("boom")
		}
		return nil
	}}
	run(t, h, func() { time.Sleep(20 * time.Second) })
	// Fails at 0, retries after 1s, 2s, 4s: at 1, 3, 7; succeeds at 7.
	want := []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second}
	if len(h.calls) < 4 {
		t.Fatalf("calls %+v", h.calls)
	}
	for i, at := range want {
		if h.calls[i].at != at || !h.calls[i].full {
			t.Fatalf("calls %+v, want full syncs at %v", h.calls, want)
		}
	}
	if len(h.calls) != 4 {
		t.Fatalf("synced again after recovering with nothing to do: %+v", h.calls)
	}
}

func TestRequeueAsksForAnEarlyIncrementalSync(t *testing.T) {
	h := &harness{requeue: func(n int) time.Duration {
		if n < 2 {
			return 2 * time.Second
		}
		return 0
	}}
	run(t, h, func() { time.Sleep(10 * time.Second) })
	want := []call{{0, true}, {2 * time.Second, false}, {4 * time.Second, false}}
	if len(h.calls) != len(want) {
		t.Fatalf("calls %+v, want %+v", h.calls, want)
	}
	for i := range want {
		if h.calls[i] != want[i] {
			t.Fatalf("calls %+v, want %+v", h.calls, want)
		}
	}
}

// TestWaitsForTriggers: only the first sync is full; a trigger (a change, or a rescan read to fold) brings an incremental sync,
// MinInterval after the last, like a change does.
func TestWaitsForTriggers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &harness{start: time.Now()}
		trigger := make(chan struct{}, 1)
		r := &Runner{Sync: h.sync, Trigger: trigger, MinInterval: time.Second, Backoff: time.Second, MaxBackoff: 8 * time.Second}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { r.Run(ctx); close(done) }()
		time.Sleep(10 * time.Minute)
		trigger <- struct{}{}
		time.Sleep(time.Minute)
		cancel()
		<-done
		want := []call{{at: 0, full: true}, {at: 10 * time.Minute, full: false}}
		if len(h.calls) != len(want) || h.calls[0] != want[0] || h.calls[1] != want[1] {
			t.Fatalf("calls %+v, want %+v", h.calls, want)
		}
	})
}

// TestFailureReadsWholeAgain: a failed sync is
// retried as a full one after its backoff (the cache is in doubt), a
// trigger during the backoff waits for it, and once a sync succeeds
// nothing full runs again.
func TestFailureReadsWholeAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &harness{start: time.Now(), fail: func(n int) error {
			if n == 1 {
				return errors.New("kernel said no")
			}
			return nil
		}}
		trigger := make(chan struct{}, 1)
		r := &Runner{Sync: h.sync, Trigger: trigger, MinInterval: time.Second, Backoff: 4 * time.Second, MaxBackoff: 8 * time.Second}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { r.Run(ctx); close(done) }()
		time.Sleep(time.Minute)
		trigger <- struct{}{} // fails
		time.Sleep(time.Second)
		trigger <- struct{}{} // within the backoff
		time.Sleep(10 * time.Minute)
		cancel()
		<-done
		want := []call{{at: 0, full: true}, {at: time.Minute, full: false}, {at: time.Minute + 4*time.Second, full: true}}
		if len(h.calls) != len(want) {
			t.Fatalf("calls %+v, want %+v", h.calls, want)
		}
		for i := range want {
			if h.calls[i] != want[i] {
				t.Fatalf("calls %+v, want %+v", h.calls, want)
			}
		}
	})
}

// MinInterval spaces the syncs' beginnings: under a steady stream of
// changes, syncs shorter than it begin MinInterval apart, and syncs longer
// than it follow each other at once rather than an interval after each
// one ends (a backlog is worked off, as kube-proxy's runner does).
func TestMinIntervalSpacesBeginnings(t *testing.T) {
	for _, tc := range []struct {
		takes time.Duration
		want  []time.Duration
	}{
		{300 * time.Millisecond, []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}},
		{1500 * time.Millisecond, []time.Duration{0, 1500 * time.Millisecond, 3 * time.Second, 4500 * time.Millisecond}},
	} {
		h := &harness{takes: tc.takes}
		run(t, h, func() {
			for range 450 { // a change every 10 ms for 4.5 s
				h.poke()
				time.Sleep(10 * time.Millisecond)
			}
			// Then none, while the last syncs run: the runner is not
			// stopped at the instant one would begin.
			time.Sleep(3 * time.Second)
		})
		var got []time.Duration
		for _, c := range h.calls[:min(len(h.calls), len(tc.want))] {
			got = append(got, c.at)
		}
		if len(got) != len(tc.want) {
			t.Fatalf("syncs of %v: began at %v, want %v", tc.takes, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("syncs of %v: began at %v, want %v", tc.takes, got, tc.want)
			}
		}
	}
}
