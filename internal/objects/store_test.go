package objects

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

func svc(name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
}

func slice(name, service string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
		Labels: map[string]string{discoveryv1.LabelServiceName: service}}, AddressType: discoveryv1.AddressTypeIPv4}
}

func names(ns ...string) []model.ServiceName {
	var out []model.ServiceName
	for _, n := range ns {
		out = append(out, model.ServiceName{Namespace: "ns", Name: n})
	}
	return out
}

func TestTakeReportsEachChangedServiceOnce(t *testing.T) {
	s := NewStore()
	s.SetService(svc("a"))
	s.SetSlice(slice("a-1", "a"))
	s.SetSlice(slice("b-1", "b")) // a slice before its Service
	if got := s.Take(); !slices.Equal(got.Services, names("a", "b")) || got.Node {
		t.Fatalf("take %+v", got)
	}
	if got := s.Take(); !got.Empty() {
		t.Fatalf("second take %+v, want empty", got)
	}
	// A slice relabelled to another Service dirties both.
	s.SetSlice(slice("a-1", "c"))
	if got := s.Take(); !slices.Equal(got.Services, names("a", "c")) {
		t.Fatalf("move: %+v", got)
	}
	if _, sl := s.Service(model.ServiceName{Namespace: "ns", Name: "a"}); len(sl) != 0 {
		t.Fatalf("a keeps the moved slice: %v", sl)
	}
	if _, sl := s.Service(model.ServiceName{Namespace: "ns", Name: "c"}); len(sl) != 1 {
		t.Fatalf("c lacks the moved slice")
	}
	s.DeleteSlice("ns", "a-1")
	s.SetNode(&corev1.Node{})
	if got := s.Take(); !slices.Equal(got.Services, names("c")) || !got.Node {
		t.Fatalf("delete and node: %+v", got)
	}
}

func TestSyncedWaitsForEverySource(t *testing.T) {
	s := NewStore("services", "endpointslices")
	s.SetSynced("services")
	if s.Synced() {
		t.Fatal("synced with a source pending")
	}
	s.SetSynced("endpointslices")
	if !s.Synced() {
		t.Fatal("not synced after every source")
	}
	select {
	case <-s.Notify():
	default:
		t.Fatal("no notification")
	}
}

func TestCountsFollowKubeProxysTrackers(t *testing.T) {
	s := NewStore()
	s.SetService(svc("a"))
	s.SetService(svc("a"))
	s.DeleteService(model.ServiceName{Namespace: "ns", Name: "a"})
	s.SetService(svc("b"))
	v6 := slice("b-2", "b")
	v6.AddressType = discoveryv1.AddressTypeIPv6
	fqdn := slice("b-3", "b")
	fqdn.AddressType = discoveryv1.AddressTypeFQDN
	for _, sl := range []*discoveryv1.EndpointSlice{slice("b-1", "b"), v6, fqdn, slice("x-1", "")} {
		s.SetSlice(sl)
	}
	s.DeleteSlice("ns", "b-1")
	s.DeleteSlice("ns", "never-held") // nothing to remove: no change
	want := Counts{
		ServiceChanges: 4,
		SliceChanges:   [2]uint64{2, 1}, // b-1 set and deleted; b-2; not FQDN, not a slice of no Service
		// a was added and deleted again: only b is a change to program.
		ServicesPending: 1,
		SlicesPending:   [2]int{2, 1},
	}
	if got := s.Counts(); got != want {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
	s.Take()
	want.ServicesPending, want.SlicesPending = 0, [2]int{}
	if got := s.Counts(); got != want {
		t.Fatalf("after take: %+v, want %+v", got, want)
	}
	// A new version that changes nothing a proxy reads is no pending change.
	b2 := svc("b")
	b2.ResourceVersion = "2"
	s.SetService(b2)
	b3 := svc("b")
	b3.Spec.ClusterIP = "10.96.0.1"
	s.SetService(b3)
	s.SetService(svc("b")) // and back
	if got := s.Counts(); got.ServicesPending != 0 || got.ServiceChanges != 7 {
		t.Fatalf("after no-op updates: %+v", got)
	}
	s.SetService(b3)
	if got := s.Counts(); got.ServicesPending != 1 {
		t.Fatalf("after a change: %+v", got)
	}
}

func stamped(name, service string, at time.Time) *discoveryv1.EndpointSlice {
	sl := slice(name, service)
	sl.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: at.Format(time.RFC3339Nano)}
	return sl
}

func TestTriggersGoToTheTakeThatCoversTheirService(t *testing.T) {
	s := NewStore()
	t1 := time.Now().Add(time.Second)
	t2 := t1.Add(time.Second)
	s.SetSlice(stamped("a-1", "a", t1))
	v6 := stamped("a-2", "a", t2)
	v6.AddressType = discoveryv1.AddressTypeIPv6
	s.SetSlice(v6)
	s.SetSlice(stamped("b-1", "b", time.Now().Add(-time.Hour))) // before the store: the agent was not running
	bad := slice("c-1", "c")
	bad.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: "yesterday"}
	s.SetSlice(bad)
	s.SetSlice(stamped("d-1", "d", t1))
	s.DeleteSlice("ns", "d-1") // a delete measures nothing, and drops what d had pending
	got := s.Take()
	a := model.ServiceName{Namespace: "ns", Name: "a"}
	want := []Trigger{{Service: a, Time: t1}, {Service: a, IPv6: true, Time: t2}}
	if !slices.EqualFunc(got.Triggers, want, func(x, y Trigger) bool { return x.Service == y.Service && x.IPv6 == y.IPv6 && x.Time.Equal(y.Time) }) {
		t.Fatalf("triggers %+v, want %+v", got.Triggers, want)
	}
	if got := s.Take(); len(got.Triggers) != 0 {
		t.Fatalf("second take: %+v", got.Triggers)
	}
}

func TestHostAddrsChangeTheNode(t *testing.T) {
	s := NewStore()
	if _, ok := s.HostAddrs(); ok {
		t.Fatal("host addresses known before any was set")
	}
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	s.SetHostAddrs(nil)
	if got, ok := s.HostAddrs(); !ok || len(got) != 0 || !s.Take().Node {
		t.Fatalf("none: %v %v", got, ok)
	}
	s.SetHostAddrs([]netip.Addr{b, a, b})
	if got, _ := s.HostAddrs(); !slices.Equal(got, []netip.Addr{a, b}) || !s.Take().Node {
		t.Fatalf("two: %v", got)
	}
	s.SetHostAddrs([]netip.Addr{a, b})
	if c := s.Take(); c.Node {
		t.Fatal("the same addresses again changed the node")
	}
}

// TestEditIsOneChange: a reader that runs while an edit is under way
// (another goroutine's Take, then its read of the Service) sees the edit
// whole, never the Service without the slice put in after it.
func TestEditIsOneChange(t *testing.T) {
	s := NewStore()
	got := make(chan []*discoveryv1.EndpointSlice)
	s.Edit(func(e Edit) {
		e.SetService(svc("a"))
		go func() {
			s.Take()
			_, slices := s.Service(names("a")[0])
			got <- slices
		}()
		time.Sleep(20 * time.Millisecond) // the reader's chance to run in between
		e.SetSlice(slice("a-1", "a"))
	})
	if slices := <-got; len(slices) != 1 {
		t.Fatalf("a read during the edit saw %d slices of a, want the edit whole (1)", len(slices))
	}
	select {
	case <-s.Notify():
	default:
		t.Fatal("an edit did not notify")
	}
}

// TestNodeUpdatesWakeOnlyForWhatIsRead: a Node update wakes the sync loop
// only when it changes what translation reads (and then marks the Node for
// translation) or what health reads (a sync that translates nothing); a
// kubelet's status heartbeat wakes nothing.
func TestNodeUpdatesWakeOnlyForWhatIsRead(t *testing.T) {
	base := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "a"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.1"}}}}
	deleting := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		name              string
		edit              func(n *corev1.Node)
		wake, translation bool
	}{
		{"heartbeat", func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, LastHeartbeatTime: deleting}}
			n.Status.VolumesInUse = []corev1.UniqueVolumeName{"v"}
			n.Annotations = map[string]string{"other.example/x": "y"}
		}, false, false},
		{"label", func(n *corev1.Node) { n.Labels = map[string]string{"zone": "b"} }, true, true},
		{"address", func(n *corev1.Node) {
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.2"}}
		}, true, true},
		{"pod CIDR", func(n *corev1.Node) { n.Spec.PodCIDRs = []string{"10.244.1.0/24"} }, true, true},
		{"taint", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "ToBeDeletedByClusterAutoscaler", Effect: corev1.TaintEffectNoSchedule}}
		}, true, false},
		{"deletion", func(n *corev1.Node) { n.DeletionTimestamp = &deleting }, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore()
			s.SetNode(base)
			s.Take()
			<-s.Notify()
			n := base.DeepCopy()
			tc.edit(n)
			s.SetNode(n)
			woke := false
			select {
			case <-s.Notify():
				woke = true
			default:
			}
			if woke != tc.wake {
				t.Errorf("woke the sync loop: %v, want %v", woke, tc.wake)
			}
			if got := s.Take().Node; got != tc.translation {
				t.Errorf("marked the Node for translation: %v, want %v", got, tc.translation)
			}
		})
	}
}

// A ClusterIP is shared when another Service lists it, in clusterIP or in
// clusterIPs; headless Services ("None") share nothing.
func TestClusterIPShared(t *testing.T) {
	svc := func(name string, ips ...string) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
		if len(ips) > 0 {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = ips[0], ips
		}
		return s
	}
	api := model.ServiceName{Namespace: "default", Name: "kubernetes"}
	for _, tc := range []struct {
		name   string
		others []*corev1.Service
		want   bool
	}{
		{"alone", nil, false},
		{"others elsewhere", []*corev1.Service{svc("a", "10.96.0.2"), svc("b")}, false},
		{"headless beside it", []*corev1.Service{svc("h", "None")}, false},
		{"same ClusterIP", []*corev1.Service{svc("a", "10.96.0.1")}, true},
		{"its second family's ClusterIP", []*corev1.Service{svc("a", "fd00::2", "fd00::1")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore()
			s.SetService(svc("kubernetes", "10.96.0.1", "fd00::1"))
			for _, o := range tc.others {
				s.SetService(o)
			}
			if got := s.ClusterIPShared(api); got != tc.want {
				t.Fatalf("ClusterIPShared = %v, want %v", got, tc.want)
			}
		})
	}
	if NewStore().ClusterIPShared(api) {
		t.Fatal("an absent Service shares nothing")
	}
}
