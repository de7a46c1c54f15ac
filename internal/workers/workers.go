// Package workers spreads independent pieces of work over the CPUs but one.
// The CPU left is the garbage collector's: its idle-time mark workers are
// what keep a single busy goroutine from paying for the collection itself.
// On two CPUs, work spread over both starves the collector and makes a
// cold start slower, not faster; there this is one piece at a time, in the
// caller's goroutine, and larger machines get the workers.
package workers

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Each calls f(i) for every i in [0, n) and returns when all have
// returned. It uses up to GOMAXPROCS-1 workers, and no more than leaves
// each at least perWorker pieces (starting a worker costs more than a few
// small pieces save); with one worker the pieces run in order, in line.
// The calls must be independent of each other.
func Each(n, perWorker int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0)-1, n/max(perWorker, 1))
	if workers < 2 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
}
