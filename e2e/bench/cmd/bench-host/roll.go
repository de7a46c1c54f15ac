package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/protocol"
)

// rolls are the Services being rolled, by name. The host is their only
// writer, so each rollout keeps its slices as last written.
type rolls struct {
	cs   kubernetes.Interface
	node string
	mu   sync.Mutex
	made int                 // rolled Services created so far: names the next
	pods int                 // pod addresses handed out so far
	by   map[string]*rollout // by Service name
}

// rollout is one rolled Service: slices of protocol.RollSliceSize
// endpoints, every pod replaced in turn. A step removes the pods that
// turned terminating the step before (a new ready pod takes each slot) and
// turns the next batch terminating, as a Deployment's rolling update with
// the EndpointSlice controller shows it.
type rollout struct {
	protocol.Roll
	slices []*discoveryv1.EndpointSlice
	cursor int // the next slot to turn terminating
}

func newRolls(cs kubernetes.Interface, node string) *rolls {
	return &rolls{cs: cs, node: node, by: map[string]*rollout{}}
}

// create writes a Service of size endpoints and its slices.
func (r *rolls) create(ctx context.Context, size int) (protocol.Roll, error) {
	r.mu.Lock()
	// The guest deletes each rolled Service before it asks for the next,
	// so their names and VIPs can come round again.
	k := r.made % protocol.MaxRolls
	r.made++
	ro := &rollout{Roll: protocol.Roll{Name: protocol.RollName(k), VIP: protocol.RollVIP(k).String(), Size: size}}
	for j := 0; j < size; j += protocol.RollSliceSize {
		s := ro.newSlice(len(ro.slices))
		for range min(protocol.RollSliceSize, size-j) {
			s.Endpoints = append(s.Endpoints, r.newPod())
		}
		ro.slices = append(ro.slices, s)
	}
	r.mu.Unlock()

	svc := benchService(ro.Name, ro.VIP)
	if _, err := r.cs.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return protocol.Roll{}, fmt.Errorf("create Service %s: %w", ro.Name, err)
	}
	err := parallel(len(ro.slices), 8, func(i int) error {
		got, err := r.cs.DiscoveryV1().EndpointSlices(namespace).Create(ctx, ro.slices[i], metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create EndpointSlice %s: %w", ro.slices[i].Name, err)
		}
		r.mu.Lock()
		ro.slices[i] = got
		r.mu.Unlock()
		return nil
	})
	if err != nil {
		return protocol.Roll{}, err
	}
	r.mu.Lock()
	r.by[ro.Name] = ro
	r.mu.Unlock()
	return ro.Roll, nil
}

// newPod is a ready endpoint at the next pod address; one pod in ten runs
// on the VM's node, as in the bench's "tenth" variant.
func (r *rolls) newPod() discoveryv1.Endpoint {
	k := r.pods
	r.pods++
	ready := true
	e := discoveryv1.Endpoint{
		Addresses:  []string{protocol.RollPod(k).String()},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready},
	}
	if k%10 == 0 {
		e.NodeName = &r.node
	}
	return e
}

// newSlice is the i-th slice of the rollout, empty.
func (ro *rollout) newSlice(i int) *discoveryv1.EndpointSlice {
	return emptySlice(ro.Name, fmt.Sprintf("%s-%03d", ro.Name, i))
}

// step moves the rollout of the named Service on by one batch and writes
// the slices it touched, all at once.
func (r *rolls) step(ctx context.Context, name string, at time.Time) (protocol.RollStep, error) {
	r.mu.Lock()
	ro, ok := r.by[name]
	if !ok {
		r.mu.Unlock()
		return protocol.RollStep{}, fmt.Errorf("no rolled Service %q", name)
	}
	st, touched := r.advance(ro, at)
	r.mu.Unlock()

	start := time.Now()
	err := parallel(len(touched), len(touched), func(i int) error {
		got, err := r.cs.DiscoveryV1().EndpointSlices(namespace).Update(ctx, touched[i], metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("update EndpointSlice %s: %w", touched[i].Name, err)
		}
		r.mu.Lock()
		ro.replace(got)
		r.mu.Unlock()
		return nil
	})
	st.WriteSeconds = time.Since(start).Seconds()
	return st, err
}

// advance changes the rollout's slices in memory (copies of the touched
// ones, stamped with the trigger time) and says what the kernel should
// show. Called with r.mu held.
func (r *rolls) advance(ro *rollout, at time.Time) (protocol.RollStep, []*discoveryv1.EndpointSlice) {
	var st protocol.RollStep
	edits := map[int]*discoveryv1.EndpointSlice{}
	edit := func(slot int) *discoveryv1.Endpoint {
		slot %= ro.Size
		i := slot / protocol.RollSliceSize
		s, ok := edits[i]
		if !ok {
			s = ro.slices[i].DeepCopy()
			if s.Annotations == nil { // created without any, as the API server hands it back
				s.Annotations = map[string]string{}
			}
			s.Annotations[triggerTime] = at.UTC().Format(time.RFC3339Nano)
			edits[i] = s
		}
		return &s.Endpoints[slot%protocol.RollSliceSize]
	}
	for slot := ro.cursor - protocol.RollBatch; slot < ro.cursor; slot++ {
		if slot < 0 {
			continue
		}
		e := edit(slot)
		st.Removed = append(st.Removed, e.Addresses[0])
		*e = r.newPod()
		st.Add = append(st.Add, e.Addresses[0])
	}
	for slot := ro.cursor; slot < ro.cursor+protocol.RollBatch; slot++ {
		e := edit(slot)
		ready, serving, terminating := false, true, true
		e.Conditions = discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating}
		st.Terminating = append(st.Terminating, e.Addresses[0])
	}
	ro.cursor += protocol.RollBatch
	touched := make([]*discoveryv1.EndpointSlice, 0, len(edits))
	for _, s := range edits {
		ro.replace(s) // the next step builds on this one, written or not
		touched = append(touched, s)
	}
	return st, touched
}

// replace keeps s as the rollout's slice of its name.
func (ro *rollout) replace(s *discoveryv1.EndpointSlice) {
	for i, old := range ro.slices {
		if old.Name == s.Name {
			ro.slices[i] = s
			return
		}
	}
}

// remove deletes the named rolled Service and its slices.
func (r *rolls) remove(ctx context.Context, name string) error {
	r.mu.Lock()
	ro, ok := r.by[name]
	delete(r.by, name)
	r.mu.Unlock()
	if !ok {
		return fmt.Errorf("no rolled Service %q", name)
	}
	if err := r.cs.CoreV1().Services(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete Service %s: %w", name, err)
	}
	return parallel(len(ro.slices), 8, func(i int) error {
		if err := r.cs.DiscoveryV1().EndpointSlices(namespace).Delete(ctx, ro.slices[i].Name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("delete EndpointSlice %s: %w", ro.slices[i].Name, err)
		}
		return nil
	})
}
