package reconciler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// events is a history of cluster changes over a few Services: creation,
// scale up and down, endpoints turning terminating, a protocol change,
// a scheduler change by annotation and deletions.
func events() []func(r *rig) {
	var evs []func(r *rig)
	for i := range 4 {
		name := fmt.Sprintf("s%d", i)
		ip := fmt.Sprintf("10.96.0.%d", 10+i)
		proto := corev1.ProtocolTCP
		if i%2 == 1 {
			proto = corev1.ProtocolUDP
		}
		ep := func(n int) string { return fmt.Sprintf("10.244.%d.%d", i, n) }
		evs = append(evs,
			func(r *rig) { r.store.SetService(service(name, ip, proto, 80)) },
			func(r *rig) { r.store.SetSlice(slice(name, proto, 8080, ready(ep(1)), ready(ep(2)))) },
			func(r *rig) {
				r.store.SetSlice(slice(name, proto, 8080, ready(ep(1)), terminating(ep(2)), ready(ep(3))))
			},
			func(r *rig) {
				s := service(name, ip, proto, 80)
				s.Annotations = map[string]string{"kube-ipvs.io/scheduler": "lc"}
				r.store.SetService(s)
			},
			func(r *rig) { r.store.SetSlice(slice(name, proto, 8080, ready(ep(3)))) },
		)
		if i == 3 {
			evs = append(evs, func(r *rig) { r.store.DeleteService(model.ServiceName{Namespace: "default", Name: name}) })
		}
	}
	return evs
}

// expected is what a fresh agent programs for the rig's final store.
func expected(t *testing.T, r *rig) string {
	fresh := newRig(t)
	fresh.store = r.store
	fresh.restart()
	fresh.sync(false)
	return fresh.fake.Dump()
}

func TestStateReplayConverges(t *testing.T) {
	for _, tc := range []struct {
		name    string
		shuffle bool
		faults  float64
	}{
		{"in order", false, 0},
		{"shuffled", true, 0},
		{"in order with faults", false, 0.3},
		{"shuffled with faults", true, 0.3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(20) {
				replay(t, seed, tc.shuffle, tc.faults)
			}
		})
	}
}

func replay(t *testing.T, seed uint64, shuffle bool, faults float64) {
	rng := rand.New(rand.NewPCG(seed, 42))
	r := newRig(t)
	evs := events()
	if shuffle {
		rng.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	}
	injected := errors.New("injected fault")
	r.fake.FailWhen(func(c fake.Call) error {
		if c.Method != "Observe" && c.Method != "Conns" && rng.Float64() < faults {
			return injected
		}
		return nil
	})
	for i, ev := range evs {
		ev(r)
		if i%2 == 1 || rng.IntN(3) == 0 { // sometimes several events fold into one sync
			if _, err := r.rec.Sync(context.Background(), false); err != nil && !errors.Is(err, injected) {
				t.Fatalf("seed %d: unexpected error: %v", seed, err)
			}
		}
	}
	r.fake.FailWhen(nil)
	// The Services whose operations failed are retried after their backoff.
	r.clock.advance(serviceRetryMax)
	for range 3 { // a failed sync is followed by a full one; the third must be a no-op
		r.sync(false)
	}
	if st := r.sync(false); st.Ops != 0 {
		t.Fatalf("seed %d: not converged, %d ops left", seed, st.Ops)
	}
	if got, want := r.fake.Dump(), expected(t, r); got != want {
		t.Fatalf("seed %d: kernel holds\n%s\nfresh agent would program\n%s", seed, got, want)
	}
}
