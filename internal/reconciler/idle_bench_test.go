package reconciler

import (
	"context"
	"testing"
)

// BenchmarkIdleSync is one sync with nothing changed among 10,000
// Services: what the drift checker's fold costs when it found nothing.
func BenchmarkIdleSync(b *testing.B) {
	r := rigWith(b, 10000)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := r.rec.Sync(ctx, false); err != nil {
			b.Fatal(err)
		}
	}
}
