package reconciler

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// rigWith builds a synced rig with n Services of one endpoint each.
func rigWith(b *testing.B, n int) *rig {
	r := newRig(b)
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		ip := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
		r.store.SetService(service(name, ip, corev1.ProtocolTCP, 80))
		r.store.SetSlice(slice(name, corev1.ProtocolTCP, 8080, ready(fmt.Sprintf("10.244.%d.%d", i/250, i%250+1))))
	}
	if _, err := r.rec.Sync(context.Background(), false); err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkSync compares one endpoint change among 10,000 Services synced
// incrementally with a full resync of the same table (fake kernel: this
// measures the agent's own work, not netlink).
func BenchmarkSync(b *testing.B) {
	for _, full := range []bool{false, true} {
		name := "incremental"
		if full {
			name = "full"
		}
		b.Run(name+"/10000-services", func(b *testing.B) {
			r := rigWith(b, 10000)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				eps := []endpoint{ready("10.244.16.243")}
				if i%2 == 0 {
					eps = append(eps, ready("10.245.0.1"))
				}
				r.store.SetSlice(slice("svc-4242", corev1.ProtocolTCP, 8080, eps...))
				st, err := r.rec.Sync(ctx, full)
				if err != nil || st.Ops == 0 {
					b.Fatalf("ops %d err %v", st.Ops, err)
				}
			}
		})
	}
}

// BenchmarkColdStart is a cold start's work in the agent itself, on the
// fake kernel: N Services × 10 endpoints translated, planned and applied
// from an empty kernel, with no allocation per object beyond what it keeps. It
// reports the kernel operations of a start and, per operation, the time
// and allocations: flat in N when the cold path is linear.
func BenchmarkColdStart(b *testing.B) {
	for _, n := range []int{1000, 5000, 10000} {
		b.Run(fmt.Sprintf("%d-services", n), func(b *testing.B) {
			var ops int
			var mallocs uint64
			var elapsed time.Duration
			for range b.N {
				b.StopTimer()
				r := newRig(b)
				fill(r, n)
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				start := time.Now()
				b.StartTimer()
				st, err := r.rec.Sync(context.Background(), true)
				b.StopTimer()
				elapsed += time.Since(start)
				runtime.ReadMemStats(&after)
				if err != nil || st.Failed > 0 {
					b.Fatalf("cold start: %d failed, %v", st.Failed, err)
				}
				ops += st.Ops
				mallocs += after.Mallocs - before.Mallocs
			}
			b.ReportMetric(float64(ops)/float64(b.N), "kernel-ops/start")
			b.ReportMetric(float64(elapsed.Nanoseconds())/float64(ops), "ns/kernel-op")
			b.ReportMetric(float64(mallocs)/float64(ops), "allocs/kernel-op")
		})
	}
}

// fill gives the rig's store n Services of 10 ready endpoints each.
func fill(r *rig, n int) {
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		r.store.SetService(service(name, fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), corev1.ProtocolTCP, 80))
		eps := make([]endpoint, 10)
		for j := range eps {
			eps[j] = ready(fmt.Sprintf("10.%d.%d.%d", 128+j, i/250, i%250+1))
		}
		r.store.SetSlice(slice(name, corev1.ProtocolTCP, 8080, eps...))
	}
}

// BenchmarkRollingUpdate is a rolling update of one Service of S
// endpoints (slices of 100, as the EndpointSlice controller makes them)
// on the fake kernel: every pod is replaced in turn at 100 a second, and
// the runner, coalescing what comes between syncs, syncs every 100 ms: a
// sync per step of 10 pods, whose slice updates turn 10 old endpoints
// terminating, remove the 10 that turned terminating the step before and
// add 10 new ready ones in their slots (30 endpoint changes). One op is
// one step and its sync; the metrics are per endpoint change, and flat in
// S when a change costs what it changes, not what the Service holds.
// Removed endpoints have no connection left: a small Service's go at
// once, a large one's (pacedReads) in the sync after the read behind the
// one they left in.
func BenchmarkRollingUpdate(b *testing.B) {
	for _, size := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("%d-endpoints", size), func(b *testing.B) {
			r := newTimedRig(b)
			ro := newRollout("big", size, 10)
			r.store.SetService(service("big", "10.96.0.10", corev1.ProtocolTCP, 80))
			for j := range ro.slots {
				r.store.SetSlice(ro.sliceObj(j))
			}
			ctx := context.Background()
			if _, err := r.rec.Sync(ctx, false); err != nil {
				b.Fatal(err)
			}
			var mallocs uint64
			var elapsed time.Duration
			var before, after runtime.MemStats
			b.ResetTimer()
			b.StopTimer()
			for range b.N {
				for _, j := range ro.step() {
					r.store.SetSlice(ro.sliceObj(j))
				}
				r.clock.advance(100 * time.Millisecond)
				runtime.ReadMemStats(&before)
				b.StartTimer() // it reads the memory statistics too: not timed here
				start := time.Now()
				st, err := r.rec.Sync(ctx, false)
				elapsed += time.Since(start)
				b.StopTimer()
				runtime.ReadMemStats(&after)
				if err != nil || st.Failed > 0 || st.Ops == 0 {
					b.Fatalf("sync: %d ops, %d failed, %v", st.Ops, st.Failed, err)
				}
				mallocs += after.Mallocs - before.Mallocs
			}
			changes := float64(b.N * ro.endpointChanges())
			b.ReportMetric(float64(elapsed.Nanoseconds())/changes, "ns/endpoint-change")
			b.ReportMetric(float64(mallocs)/changes, "allocs/endpoint-change")
		})
	}
}
