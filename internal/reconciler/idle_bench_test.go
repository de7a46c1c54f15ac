package reconciler

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/observed"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/rescan"
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
		_, since := r.rec.Rescans().Begin()
		r.rec.Rescans().Hand(rescan.NewRead(observed.WholeRead(since, obs)))
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
		_, since := r.rec.Rescans().Begin()
		r.rec.Rescans().Hand(rescan.NewRead(observed.WholeRead(since, obs)))
		if _, n := r.rec.foldRescan(plan.NewScope()); n != 0 {
			b.Fatalf("%d drifted", n)
		}
	}
}

// BenchmarkFoldBesideChange is what the sync loop pays to fold a read
// that overlapped one endpoint change among 10,000 Services, as nearly
// every read does while endpoints change: the read is taken before the
// change, the change synced, then the fold (the timed part) runs.
func BenchmarkFoldBesideChange(b *testing.B) {
	r := rigWith(b, 10000)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		_, since := r.rec.Rescans().Begin()
		obs, err := r.fake.Observe(ctx)
		if err != nil {
			b.Fatal(err)
		}
		rd := rescan.NewRead(observed.WholeRead(since, obs))
		ep := fmt.Sprintf("10.245.%d.%d", i/250%250, i%250+1)
		r.store.SetSlice(slice("svc-7", corev1.ProtocolTCP, 8080, ready(ep)))
		if st, err := r.rec.Sync(ctx, false); err != nil || st.Ops == 0 {
			b.Fatalf("change: %+v, %v", st, err)
		}
		r.rec.Rescans().Hand(rd)
		b.StartTimer()
		st, err := r.rec.Sync(ctx, false)
		if err != nil || st.Ops != 0 || st.Drift != 0 {
			b.Fatalf("fold: %+v, %v", st, err)
		}
	}
}
