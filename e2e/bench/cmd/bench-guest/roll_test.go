package main

import (
	"net/netip"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/protocol"
	"github.com/kube-ipvs/kube-ipvs/e2e/bench/result"
)

// A step is seen only once its new pods take traffic and none of the pods
// that turned terminating or left does; a step waited for too long is a
// timeout, and the rest wait on.
func TestRollStepsSeen(t *testing.T) {
	a := netip.MustParseAddr
	st := protocol.RollStep{Add: []string{"10.32.0.21"}, Terminating: []string{"10.32.0.11"}, Removed: []string{"10.32.0.1"}}
	for _, tc := range []struct {
		what  string
		reals map[netip.Addr]int
		want  bool
	}{
		{"all of it", map[netip.Addr]int{a("10.32.0.21"): 1, a("10.32.0.11"): 0}, true},
		{"removed one draining", map[netip.Addr]int{a("10.32.0.21"): 1, a("10.32.0.11"): 0, a("10.32.0.1"): 0}, true},
		{"new one missing", map[netip.Addr]int{a("10.32.0.11"): 0}, false},
		{"new one at weight 0", map[netip.Addr]int{a("10.32.0.21"): 0}, false},
		{"terminating one still live", map[netip.Addr]int{a("10.32.0.21"): 1, a("10.32.0.11"): 1}, false},
		{"removed one still live", map[netip.Addr]int{a("10.32.0.21"): 1, a("10.32.0.1"): 1}, false},
	} {
		if got := stepSeen(tc.reals, st); got != tc.want {
			t.Errorf("%s: seen %v, want %v", tc.what, got, tc.want)
		}
	}

	t0 := time.Now()
	other := protocol.RollStep{Add: []string{"10.32.0.99"}}
	wait := []pendingStep{{st: st, start: t0}, {st: other, start: t0.Add(time.Second)}, {st: other, start: t0}}
	var r result.Roll
	left := seenSteps(&r, wait, map[netip.Addr]int{a("10.32.0.21"): 1}, t0.Add(3*time.Second), 2500*time.Millisecond)
	if len(r.Lags) != 1 || r.Lags[0] != 3 || r.Timeouts != 1 || len(left) != 1 || left[0].start != t0.Add(time.Second) {
		t.Errorf("lags %v, timeouts %d, left %v", r.Lags, r.Timeouts, left)
	}
}

// The observer reads again at once without a rest, and after rest times the
// read's own time with one.
func TestRestUntil(t *testing.T) {
	start := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	end := start.Add(400 * time.Millisecond)
	for _, tc := range []struct {
		rest float64
		want time.Duration // after end
	}{{0, 0}, {1, 400 * time.Millisecond}, {0.5, 200 * time.Millisecond}, {3, 1200 * time.Millisecond}} {
		if got := restUntil(start, end, tc.rest).Sub(end); got != tc.want {
			t.Errorf("rest %v: next read %v after the last ended, want %v", tc.rest, got, tc.want)
		}
	}
}
