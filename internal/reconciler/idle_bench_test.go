package reconciler

import (
	"context"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/plan"
)

// BenchmarkIdleFold is what the sync loop pays per period for a drift
// read that found nothing among 10,000 Services: taking the read over,
// comparing it with the cache and a sync with an empty scope. The read
// itself happens beside the syncs (the fake's Observe, outside the timer).
func BenchmarkIdleFold(b *testing.B) {
	r := rigWith(b, 10000)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		obs, err := r.fake.Observe(ctx)
		if err != nil {
			b.Fatal(err)
		}
		r.rec.drift.begin()
		r.rec.drift.hand(&driftRead{obs: obs, sets: membersDigest(obs.State.Sets), table: tableDigest(obs.State.Services), done: make(chan struct{})})
		b.StartTimer()
		st, err := r.rec.Sync(ctx, false)
		if err != nil || st.Ops != 0 || st.Drift != 0 {
			b.Fatalf("idle fold: %+v, %v", st, err)
		}
	}
}

// BenchmarkFoldDrift is the comparison alone.
func BenchmarkFoldDrift(b *testing.B) {
	r := rigWith(b, 10000)
	obs, err := r.fake.Observe(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r.rec.drift.begin()
		r.rec.drift.hand(&driftRead{obs: obs, sets: membersDigest(obs.State.Sets), table: tableDigest(obs.State.Services), done: make(chan struct{})})
		if _, n := r.rec.foldDrift(plan.NewScope()); n != 0 {
			b.Fatalf("%d drifted", n)
		}
	}
}
