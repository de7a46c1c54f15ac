// Package objects is the hand-over point between the sources (informers or
// a manifest folder) and the reconciler. Sources only put objects in and mark
// what changed; the reconciler takes the changed names and reads the objects
// it needs. Objects stored here are never modified: sources replace them.
package objects

import (
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Changes is what happened since the last Take.
type Changes struct {
	Services []model.ServiceName // sorted; each was added, changed or deleted
	Node     bool                // the node object or the host's addresses changed: every Service may translate differently
	// Triggers are the trigger times of the EndpointSlice changes taken in
	// (see Trigger), for the Services they belong to.
	Triggers []Trigger
}

// Empty tells whether nothing changed.
func (c Changes) Empty() bool { return len(c.Services) == 0 && !c.Node }

type sliceKey struct{ namespace, name string }

// Store holds the current cluster objects. Safe for concurrent use.
type Store struct {
	mu        sync.Mutex
	services  map[model.ServiceName]*corev1.Service
	slices    map[model.ServiceName]map[sliceKey]*discoveryv1.EndpointSlice
	sliceSvc  map[sliceKey]model.ServiceName // where each slice is filed, for moves and deletes
	node      *corev1.Node
	hostAddrs []netip.Addr // nil until first set
	// nodes are every Node's addresses; nodesAll all of them together,
	// nil until asked for after a change.
	nodes     map[string]NodeAddrs
	nodesAll  *NodeAddrs
	dirty     map[model.ServiceName]struct{}
	nodeDirty bool
	pending   map[string]bool // source name -> not yet synced
	notify    chan struct{}

	// What kube-proxy's change trackers count (see Counts): Service
	// changes; EndpointSlice changes by family, in all and since the last
	// Take; and each Service changed since the last Take as that Take left
	// it (nil: absent), to tell a net change from one undone.
	serviceChanges uint64
	sliceChanges   [2]uint64
	slicePending   [2]int
	serviceBase    map[model.ServiceName]*corev1.Service
	// triggers are the trigger times not yet taken; start is when the
	// store was made: earlier triggers are not the agent's to measure.
	triggers map[model.ServiceName][]Trigger
	start    time.Time
}

// NewStore returns an empty store waiting for the named sources to sync.
func NewStore(sources ...string) *Store {
	s := &Store{
		services: map[model.ServiceName]*corev1.Service{},
		slices:   map[model.ServiceName]map[sliceKey]*discoveryv1.EndpointSlice{},
		sliceSvc: map[sliceKey]model.ServiceName{},
		nodes:    map[string]NodeAddrs{},
		dirty:    map[model.ServiceName]struct{}{},
		pending:  map[string]bool{},
		notify:   make(chan struct{}, 1),

		serviceBase: map[model.ServiceName]*corev1.Service{},
		triggers:    map[model.ServiceName][]Trigger{},
		start:       time.Now(),
	}
	for _, src := range sources {
		s.pending[src] = true
	}
	return s
}

// Notify is signalled (coalesced) whenever something changes.
func (s *Store) Notify() <-chan struct{} { return s.notify }

func (s *Store) poke() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// SetSynced records that a source has delivered its initial state. Nothing
// is pruned before every source has synced.
func (s *Store) SetSynced(source string) {
	s.mu.Lock()
	delete(s.pending, source)
	s.mu.Unlock()
	s.poke()
}

// Synced tells whether every source has delivered its initial state.
func (s *Store) Synced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending) == 0
}

// SetService adds or replaces a Service.
func (s *Store) SetService(svc *corev1.Service) { s.Edit(func(e Edit) { e.SetService(svc) }) }

// DeleteService removes a Service.
func (s *Store) DeleteService(name model.ServiceName) { s.Edit(func(e Edit) { e.DeleteService(name) }) }

// SetSlice adds or replaces an EndpointSlice.
func (s *Store) SetSlice(slice *discoveryv1.EndpointSlice) {
	s.Edit(func(e Edit) { e.SetSlice(slice) })
}

// DeleteSlice removes an EndpointSlice by namespace and name.
func (s *Store) DeleteSlice(namespace, name string) {
	s.Edit(func(e Edit) { e.DeleteSlice(namespace, name) })
}

// Edit makes the changes fn makes at once: no Take, and no read of a
// Service after one, sees some of them without the others. A manifest
// file is one change: its Service with a bad annotation and its
// EndpointSlice with a new endpoint, put in one after the other, would
// otherwise let a sync between them program the endpoint that the file's
// refusal should have kept out. fn must not call the Store's methods.
func (s *Store) Edit(fn func(Edit)) {
	s.mu.Lock()
	fn(Edit{s: s})
	s.mu.Unlock()
	s.poke()
}

// Edit is the Store's changes under its lock (see Store.Edit).
type Edit struct{ s *Store }

// SetService adds or replaces a Service.
func (e Edit) SetService(svc *corev1.Service) {
	s, name := e.s, model.ServiceName{Namespace: svc.Namespace, Name: svc.Name}
	s.noteServiceLocked(name)
	s.services[name] = svc
	s.dirty[name] = struct{}{}
}

// DeleteService removes a Service.
func (e Edit) DeleteService(name model.ServiceName) {
	s := e.s
	s.noteServiceLocked(name)
	delete(s.services, name)
	s.dirty[name] = struct{}{}
}

// ServiceOf names the Service an EndpointSlice belongs to (its
// kubernetes.io/service-name label); ok is false for slices of no Service.
func ServiceOf(slice *discoveryv1.EndpointSlice) (model.ServiceName, bool) {
	svc := slice.Labels[discoveryv1.LabelServiceName]
	return model.ServiceName{Namespace: slice.Namespace, Name: svc}, svc != ""
}

// SetSlice adds or replaces an EndpointSlice.
func (e Edit) SetSlice(slice *discoveryv1.EndpointSlice) {
	s, key := e.s, sliceKey{slice.Namespace, slice.Name}
	s.removeSliceLocked(key)
	if name, ok := ServiceOf(slice); ok {
		s.noteSliceLocked(name, slice, false)
		if s.slices[name] == nil {
			s.slices[name] = map[sliceKey]*discoveryv1.EndpointSlice{}
		}
		s.slices[name][key] = slice
		s.sliceSvc[key] = name
		s.dirty[name] = struct{}{}
	}
}

// DeleteSlice removes an EndpointSlice by namespace and name.
func (e Edit) DeleteSlice(namespace, name string) {
	s, key := e.s, sliceKey{namespace, name}
	if svc, ok := s.sliceSvc[key]; ok {
		s.noteSliceLocked(svc, s.slices[svc][key], true)
	}
	s.removeSliceLocked(key)
}

func (s *Store) removeSliceLocked(key sliceKey) {
	name, ok := s.sliceSvc[key]
	if !ok {
		return
	}
	delete(s.sliceSvc, key)
	delete(s.slices[name], key)
	if len(s.slices[name]) == 0 {
		delete(s.slices, name)
	}
	s.dirty[name] = struct{}{}
}

// SetNode replaces this node's Node object (nil: unknown). Only a change
// to what translation reads (its addresses, pod CIDRs, labels) marks every
// Service for translation again, as kube-proxy acts only on those (its
// NodeManager on the addresses and pod CIDRs, its proxier on the labels);
// one to what health reads (deletion, the autoscaler's taint) asks for a
// sync that translates nothing; a kubelet's status update, its volumes or
// another controller's annotations change neither and ask for nothing.
func (s *Store) SetNode(node *corev1.Node) {
	s.mu.Lock()
	change := nodeChangeOf(s.node, node)
	s.node = node
	if change == nodeTranslated {
		s.nodeDirty = true
	}
	s.mu.Unlock()
	if change != nodeSame {
		s.poke()
	}
}

// nodeChange is what a new version of this node's Node changes.
type nodeChange int

const (
	nodeSame       nodeChange = iota // nothing the agent reads
	nodeHealth                       // whether it may take load-balancer traffic
	nodeTranslated                   // what translation reads
)

func nodeChangeOf(old, node *corev1.Node) nodeChange {
	switch {
	case (old == nil) != (node == nil):
		return nodeTranslated
	case old == nil:
		return nodeSame
	case !maps.Equal(old.Labels, node.Labels) || !slices.Equal(old.Status.Addresses, node.Status.Addresses) ||
		old.Spec.PodCIDR != node.Spec.PodCIDR || !slices.Equal(old.Spec.PodCIDRs, node.Spec.PodCIDRs):
		return nodeTranslated
	case old.DeletionTimestamp.IsZero() != node.DeletionTimestamp.IsZero() || !equality.Semantic.DeepEqual(old.Spec.Taints, node.Spec.Taints):
		return nodeHealth // health.NodeEligible reads these
	}
	return nodeSame
}

// SetHostAddrs replaces the node's own addresses (those NodePorts may
// listen on), as a watcher of the host's interfaces sees them. A change
// counts as a change of the node: every Service may translate differently.
// The same addresses again change nothing.
func (s *Store) SetHostAddrs(addrs []netip.Addr) {
	addrs = slices.Clone(addrs)
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	if addrs == nil {
		addrs = []netip.Addr{} // known to be none
	}
	s.mu.Lock()
	changed := s.hostAddrs == nil || !slices.Equal(s.hostAddrs, addrs)
	if changed {
		s.hostAddrs = addrs
		s.nodeDirty = true
	}
	s.mu.Unlock()
	if changed {
		s.poke()
	}
}

// HostAddrs returns the node's own addresses, sorted; ok is false until
// SetHostAddrs was first called.
func (s *Store) HostAddrs() (addrs []netip.Addr, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hostAddrs, s.hostAddrs != nil
}

// Take returns and clears what changed since the last Take.
func (s *Store) Take() Changes {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Changes{Services: slices.SortedFunc(maps.Keys(s.dirty), model.ServiceName.Compare), Node: s.nodeDirty}
	for _, name := range c.Services {
		c.Triggers = append(c.Triggers, s.triggers[name]...)
	}
	clear(s.dirty)
	clear(s.triggers)
	clear(s.serviceBase)
	s.slicePending = [2]int{}
	s.nodeDirty = false
	return c
}

// Service returns a Service (nil if absent) and its EndpointSlices sorted by name.
func (s *Store) Service(name model.ServiceName) (*corev1.Service, []*discoveryv1.EndpointSlice) {
	s.mu.Lock()
	defer s.mu.Unlock()
	byKey := s.slices[name]
	keys := slices.SortedFunc(maps.Keys(byKey), func(a, b sliceKey) int {
		if a.name < b.name {
			return -1
		} else if a.name > b.name {
			return 1
		}
		return 0
	})
	out := make([]*discoveryv1.EndpointSlice, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return s.services[name], out
}

// ClusterIPShared tells whether another Service held lists one of the
// named Service's ClusterIPs as its own (false if it is absent). The API
// server's allocator never does that; a folder of manifests may.
func (s *Store) ClusterIPShared(name model.ServiceName) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	svc := s.services[name]
	if svc == nil {
		return false
	}
	mine := clusterIPs(svc)
	for other, o := range s.services {
		if other == name {
			continue
		}
		for _, ip := range clusterIPs(o) {
			if slices.Contains(mine, ip) {
				return true
			}
		}
	}
	return false
}

// clusterIPs are a Service's ClusterIPs, its clusterIP field too (an
// object written without clusterIPs), without "None".
func clusterIPs(svc *corev1.Service) []string {
	ips := append([]string{svc.Spec.ClusterIP}, svc.Spec.ClusterIPs...)
	return slices.DeleteFunc(ips, func(ip string) bool { return ip == "" || ip == corev1.ClusterIPNone })
}

// ServiceNames lists every Service held, sorted.
func (s *Store) ServiceNames() []model.ServiceName {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.SortedFunc(maps.Keys(s.services), model.ServiceName.Compare)
}

// Node returns this node's Node object, or nil.
func (s *Store) Node() *corev1.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node
}
