package objects

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Trigger is when the change behind an EndpointSlice update began, as the
// EndpointSlice controller stamps it (the endpoints.kubernetes.io/
// last-change-trigger-time annotation: the time of the Pod or Service change
// that made it rewrite the slice). From it to the end of the sync that puts
// the update in the kernel is kube-proxy's network programming latency.
type Trigger struct {
	Service model.ServiceName
	IPv6    bool // the slice's address family
	Time    time.Time
}

// triggerTime reads a slice's trigger time. A slice without the annotation
// (or with one that does not parse) has none: it is not measured, as
// kube-proxy does not measure it.
func triggerTime(slice *discoveryv1.EndpointSlice) (time.Time, bool) {
	v, ok := slice.Annotations[corev1.EndpointsLastChangeTriggerTime]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil && !t.IsZero()
}

// sliceFamily is a slice's address family; ok is false for FQDN slices,
// which no proxy serves.
func sliceFamily(slice *discoveryv1.EndpointSlice) (ipv6, ok bool) {
	switch slice.AddressType {
	case discoveryv1.AddressTypeIPv4:
		return false, true
	case discoveryv1.AddressTypeIPv6:
		return true, true
	}
	return false, false
}

// Counts are the changes put in, as kube-proxy's change trackers count
// them for its sync_proxy_rules_*_changes_{total,pending} metrics.
type Counts struct {
	// ServiceChanges counts every Service add, update and delete.
	ServiceChanges uint64
	// SliceChanges counts the adds, updates and deletes of EndpointSlices
	// of a Service, by address family ([0] IPv4, [1] IPv6).
	SliceChanges [2]uint64
	// ServicesPending counts the Services that differ, in what a proxy
	// reads of them, from what the last Take handed over: a Service
	// changed and changed back, or added and deleted, is not pending.
	ServicesPending int
	// SlicesPending counts the slice changes since the last Take, by family.
	SlicesPending [2]int
}

// Counts returns the change counts. It costs one comparison per Service
// changed since the last Take.
func (s *Store) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Counts{ServiceChanges: s.serviceChanges, SliceChanges: s.sliceChanges, SlicesPending: s.slicePending}
	for name, base := range s.serviceBase {
		if !sameForProxy(base, s.services[name]) {
			c.ServicesPending++
		}
	}
	return c
}

// noteServiceLocked counts a Service change and, on the first since the
// last Take, keeps the Service as it was.
func (s *Store) noteServiceLocked(name model.ServiceName) {
	s.serviceChanges++
	if _, ok := s.serviceBase[name]; !ok {
		s.serviceBase[name] = s.services[name]
	}
}

// noteSliceLocked counts a change of a Service's slice and keeps or drops
// its trigger time. A delete drops the Service's trigger times not yet
// taken: a deleted slice's annotation tells when it was last written, not
// when the deletion began, so kube-proxy measures nothing for it.
func (s *Store) noteSliceLocked(name model.ServiceName, slice *discoveryv1.EndpointSlice, deleted bool) {
	v6, ok := sliceFamily(slice)
	if !ok {
		return
	}
	i := 0
	if v6 {
		i = 1
	}
	s.sliceChanges[i]++
	s.slicePending[i]++
	if deleted {
		delete(s.triggers, name)
		return
	}
	// A trigger from before the agent started measures the time the agent
	// was not running; kube-proxy leaves those out too.
	if t, ok := triggerTime(slice); ok && t.After(s.start) {
		s.triggers[name] = append(s.triggers[name], Trigger{Service: name, IPv6: v6, Time: t})
	}
}

// sameForProxy tells whether two versions of a Service (nil: absent) agree
// on everything translation reads: spec, status, labels and annotations.
// An update that changed only other metadata is no change to program.
func sameForProxy(a, b *corev1.Service) bool {
	if a == nil || b == nil {
		return a == b
	}
	return equality.Semantic.DeepEqual(a.Spec, b.Spec) && equality.Semantic.DeepEqual(a.Status, b.Status) &&
		equality.Semantic.DeepEqual(a.Labels, b.Labels) && equality.Semantic.DeepEqual(a.Annotations, b.Annotations)
}
