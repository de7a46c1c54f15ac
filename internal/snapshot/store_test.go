package snapshot

import (
	"net/netip"
	"slices"
	"testing"

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
		Labels: map[string]string{discoveryv1.LabelServiceName: service}}}
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

func TestChangeCounts(t *testing.T) {
	s := NewStore()
	s.SetService(svc("a"))
	s.SetService(svc("a"))
	s.DeleteService(model.ServiceName{Namespace: "ns", Name: "a"})
	s.SetSlice(slice("a-1", "a"))
	s.DeleteSlice("ns", "a-1")
	if svcs, eps := s.ChangeCounts(); svcs != 3 || eps != 2 {
		t.Fatalf("counts %d services, %d slices; want 3, 2", svcs, eps)
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
