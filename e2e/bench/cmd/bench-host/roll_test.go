package main

import (
	"context"
	"slices"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/protocol"
)

// stored is every endpoint of the rolled Service as the API server holds
// it: address -> conditions.
func stored(t *testing.T, cs *fake.Clientset, name string) map[string]discoveryv1.EndpointConditions {
	t.Helper()
	list, err := cs.DiscoveryV1().EndpointSlices(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]discoveryv1.EndpointConditions{}
	for _, s := range list.Items {
		if s.Labels[discoveryv1.LabelServiceName] != name {
			continue
		}
		if len(s.Endpoints) > protocol.RollSliceSize {
			t.Errorf("slice %s holds %d endpoints", s.Name, len(s.Endpoints))
		}
		for _, e := range s.Endpoints {
			out[e.Addresses[0]] = e.Conditions
		}
	}
	return out
}

// A rolled Service keeps its size while every step replaces the batch that
// turned terminating the step before and turns the next one terminating,
// round the whole Service and past its end; what a step says is what the
// API server then holds.
func TestRollSteps(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	r := newRolls(cs, "vm")
	const size = 250 // three slices, the last one short
	ro, err := r.create(ctx, size)
	if err != nil {
		t.Fatal(err)
	}
	if ro.VIP != protocol.RollVIP(0).String() || ro.Size != size {
		t.Fatalf("created %+v", ro)
	}
	if got := stored(t, cs, ro.Name); len(got) != size {
		t.Fatalf("%d endpoints stored, want %d", len(got), size)
	}
	var terminating []string
	for k := range size/protocol.RollBatch + 3 {
		st, err := r.step(ctx, ro.Name, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(st.Removed, terminating) {
			t.Fatalf("step %d removed %v, want the step before's terminating %v", k, st.Removed, terminating)
		}
		if len(st.Add) != len(st.Removed) || len(st.Terminating) != protocol.RollBatch {
			t.Fatalf("step %d: %+v", k, st)
		}
		got := stored(t, cs, ro.Name)
		if len(got) != size {
			t.Fatalf("step %d: %d endpoints stored, want %d", k, len(got), size)
		}
		for _, a := range st.Removed {
			if _, ok := got[a]; ok {
				t.Errorf("step %d: removed %s still stored", k, a)
			}
		}
		for _, a := range st.Add {
			if c, ok := got[a]; !ok || c.Ready == nil || !*c.Ready {
				t.Errorf("step %d: added %s stored as %+v (%v)", k, a, c, ok)
			}
		}
		for _, a := range st.Terminating {
			if c := got[a]; c.Terminating == nil || !*c.Terminating || c.Ready == nil || *c.Ready {
				t.Errorf("step %d: terminating %s stored as %+v", k, a, c)
			}
		}
		ready := 0
		for _, c := range got {
			if c.Ready == nil || *c.Ready {
				ready++
			}
		}
		if ready != size-protocol.RollBatch {
			t.Errorf("step %d: %d ready, want %d", k, ready, size-protocol.RollBatch)
		}
		terminating = st.Terminating
	}
	if err := r.remove(ctx, ro.Name); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, cs, ro.Name); len(got) != 0 {
		t.Errorf("%d endpoints left after remove", len(got))
	}
}

func TestRollSizes(t *testing.T) {
	if got, err := rollSizes("1000, 10000"); err != nil || !slices.Equal(got, []int{1000, 10000}) {
		t.Errorf("got %v, %v", got, err)
	}
	if got, err := rollSizes(""); err != nil || got != nil {
		t.Errorf("empty: got %v, %v", got, err)
	}
	for _, bad := range []string{"10", "x", "1000,-5"} {
		if _, err := rollSizes(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
