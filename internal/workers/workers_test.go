package workers

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// TestEachCallsEveryIndexOnce: on several workers every index is called
// exactly once and Each returns only after all; on one CPU left (two in
// all), in order, in line.
func TestEachCallsEveryIndexOnce(t *testing.T) {
	for _, procs := range []int{2, 4} {
		prev := runtime.GOMAXPROCS(procs)
		const n = 1000
		var calls [n]atomic.Int32
		var order []int
		Each(n, 10, func(i int) {
			calls[i].Add(1)
			if procs == 2 {
				order = append(order, i) // in line: no other goroutine
			}
		})
		runtime.GOMAXPROCS(prev)
		for i := range calls {
			if c := calls[i].Load(); c != 1 {
				t.Fatalf("GOMAXPROCS %d: index %d called %d times", procs, i, c)
			}
		}
		if procs == 2 {
			for i, got := range order {
				if got != i {
					t.Fatalf("GOMAXPROCS 2: call %d was index %d, want in order", i, got)
				}
			}
		}
	}
}

// TestEachLeavesEachWorkerItsShare: fewer pieces than perWorker per CPU
// run in line, on the caller's goroutine, in order.
func TestEachLeavesEachWorkerItsShare(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	var order []int
	Each(300, 256, func(i int) { order = append(order, i) }) // one worker's share: in line
	for i, got := range order {
		if got != i {
			t.Fatalf("call %d was index %d: not run in line", i, got)
		}
	}
	if len(order) != 300 {
		t.Fatalf("%d calls, want 300", len(order))
	}
}
