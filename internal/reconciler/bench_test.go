package reconciler

import (
	"context"
	"fmt"
	"testing"

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
