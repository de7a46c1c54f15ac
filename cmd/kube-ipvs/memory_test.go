package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/objects"
	"github.com/kube-ipvs/kube-ipvs/internal/reconciler"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
	"github.com/kube-ipvs/kube-ipvs/internal/source"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// BenchmarkMemory measures what the agent keeps in memory for N Services
// × 10 endpoints: the informers' caches and the store
// (objects as an API server serves them: managedFields, labels, the
// endpoint controller's annotation, pod references), the desired state,
// the observed cache and the published view, after a full sync on the
// fake kernel. It prints the live heap the agent added (after a GC, the
// fake API server's own copies and the fake kernel's table subtracted) and
// the heap's peak while it started (garbage included, at the agent's GOGC
// unless GOGC is set), and the peak of the heap mapped from the OS, which
// the resident set's peak follows. Run:
// go test -run x -bench Memory ./cmd/kube-ipvs/ (KUBE_IPVS_BENCH_N=10000 for
// one size).
func BenchmarkMemory(b *testing.B) {
	if os.Getenv("GOGC") == "" { // as the agent runs (main.go)
		defer debug.SetGCPercent(debug.SetGCPercent(gcPercent))
	}
	for _, n := range benchSizes() {
		b.Run(fmt.Sprintf("%d-services", n), func(b *testing.B) {
			for range b.N {
				steady, peak, mapped := measureAgentHeap(b, n)
				b.ReportMetric(float64(steady)/1e6, "steady-MB")
				b.ReportMetric(float64(peak)/1e6, "peak-MB")
				b.ReportMetric(float64(mapped)/1e6, "peak-mapped-MB")
			}
		})
	}
}

// benchSizes are the Services counts to measure: $KUBE_IPVS_BENCH_N
// (comma-separated), else 1,000, 5,000 and 10,000.
func benchSizes() []int {
	env := os.Getenv("KUBE_IPVS_BENCH_N")
	if env == "" {
		return []int{1000, 5000, 10000}
	}
	var out []int
	for f := range strings.SplitSeq(env, ",") {
		var n int
		if _, err := fmt.Sscan(f, &n); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

func measureAgentHeap(b *testing.B, n int) (steady, peak, mapped uint64) {
	objs := clusterObjects(n)
	client := k8sfake.NewClientset(objs...)
	objs = nil
	base := liveHeap()
	baseMapped := heapMapped()
	var top, topMapped atomic.Uint64
	stop := sampleHeap(&top, &topMapped)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := objects.NewStore(source.SourcesKubernetes...)
	k := &source.Kubernetes{Client: client, NodeName: "node-a", Store: store}
	go func() { _ = k.Run(ctx) }()
	for !store.Synced() {
		select {
		case <-store.Notify():
		case <-time.After(time.Minute):
			b.Fatal("sources never synced")
		}
	}
	fam := model.Families{IPv4: true}
	rec := reconciler.New(reconciler.Options{
		Dataplane: fake.New(), Store: store,
		Translate: translate.Config{NodeName: "node-a", Scheduler: "rr", Families: fam, DrainTimeout: time.Minute},
		Shim:      shim.Config{Families: fam}, NodePortRange: model.PortRange{First: 30000, Last: 32767},
	})
	if err := rec.Init(ctx); err != nil {
		b.Fatal(err)
	}
	st, err := rec.Sync(ctx, true)
	if err != nil || st.Ops < n*10 {
		b.Fatalf("sync: %d ops, %v", st.Ops, err)
	}
	stop()
	// What the fake kernel holds is the kernel's, not the agent's: measure
	// it apart and leave it out.
	after := liveHeap()
	writeBenchHeapProfile(b, n)
	kernel := fakeKernelHeap(b, rec, n)
	runtime.KeepAlive(client)
	runtime.KeepAlive(rec)
	mapped = topMapped.Load() - min(baseMapped, topMapped.Load())
	b.Logf("N=%d: live heap %0.1f MB above the fake API server (%0.1f MB of it the fake kernel's), heap peak %0.1f MB above it, heap mapped from the OS at its peak %0.1f MB above it",
		n, mb(after-base), mb(kernel), mb(top.Load()-base), mb(mapped))
	return after - base - kernel, top.Load() - base, mapped
}

// heapMapped is the heap the process holds from the OS (what it counts
// in the resident set), after a full collection.
func heapMapped() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapSys - m.HeapReleased
}

// fakeKernelHeap is what a fake kernel holding the same table takes.
func fakeKernelHeap(b *testing.B, rec *reconciler.Reconciler, n int) uint64 {
	before := liveHeap()
	f := fake.New()
	f.Load(rec.View().Desired())
	after := liveHeap()
	runtime.KeepAlive(f)
	if after < before {
		return 0
	}
	return after - before
}

// writeBenchHeapProfile writes the live heap to $KUBE_IPVS_HEAP_PROFILE.N, if
// set, to see where the memory goes (go tool pprof -sample_index=inuse_space).
func writeBenchHeapProfile(b *testing.B, n int) {
	name := os.Getenv("KUBE_IPVS_HEAP_PROFILE")
	if name == "" {
		return
	}
	f, err := os.Create(fmt.Sprintf("%s.%d", name, n))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

func mb(n uint64) float64 { return float64(n) / 1e6 }

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// sampleHeap records the largest heap seen until the func returned is
// called: an estimate of the peak (allocated, live or not yet collected),
// and of the heap mapped from the OS (the resident set's peak follows it).
func sampleHeap(top, topMapped *atomic.Uint64) func() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > top.Load() {
				top.Store(m.HeapAlloc)
			}
			if held := m.HeapSys - m.HeapReleased; held > topMapped.Load() {
				topMapped.Store(held)
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// clusterObjects are n ClusterIP Services with one port and a slice of 10
// ready endpoints each, spread over 50 nodes in 3 zones, plus node-a, as
// an API server serves them (what a controller and kubectl leave on them).
func clusterObjects(n int) []k8sruntime.Object {
	out := []k8sruntime.Object{&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: uid(0), Labels: map[string]string{corev1.LabelTopologyZone: "zone-a"}},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.0.10"}}},
	}}
	for i := range n {
		name := fmt.Sprintf("svc-%05d", i)
		ip := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
		out = append(out, benchService(name, ip, i), benchSlice(name, i))
	}
	return out
}

func uid(i int) types.UID { return types.UID(fmt.Sprintf("4f0c2a1e-%04x-4b8e-9d3c-%012x", i%65536, i)) }

// managed is a managedFields entry the size an API server writes for a
// client-side apply of such an object.
func managed(manager string, size int) []metav1.ManagedFieldsEntry {
	raw := `{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{` + strings.Repeat(`"f:x":{},`, size/9) + `"f:y":{}}}`
	return []metav1.ManagedFieldsEntry{{
		Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		Time: &metav1.Time{Time: time.Unix(1_700_000_000, 0)}, FieldsType: "FieldsV1",
		FieldsV1: &metav1.FieldsV1{Raw: []byte(raw)},
	}}
}

func benchService(name, ip string, i int) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: name, UID: uid(2 * i), ResourceVersion: fmt.Sprint(1000 + 2*i),
			CreationTimestamp: metav1.Time{Time: time.Unix(1_700_000_000, 0)},
			Labels:            map[string]string{"app": name, "app.kubernetes.io/part-of": "bench"},
			Annotations:       map[string]string{"meta.helm.sh/release-name": "bench", "meta.helm.sh/release-namespace": "default"},
			ManagedFields:     managed("helm", 600),
		},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPFamilyPolicy: ptrTo(corev1.IPFamilyPolicySingleStack),
			Selector:        map[string]string{"app": name},
			SessionAffinity: corev1.ServiceAffinityNone,
			Ports:           []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
}

func benchSlice(svc string, i int) *discoveryv1.EndpointSlice {
	proto, port := corev1.ProtocolTCP, int32(8080)
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: svc + "-x7k2p", UID: uid(2*i + 1), ResourceVersion: fmt.Sprint(1001 + 2*i),
			GenerateName: svc + "-",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io",
				"app": svc, "app.kubernetes.io/part-of": "bench"},
			Annotations:     map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2026-12-01T04:00:00Z"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc, UID: uid(2 * i), Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true)}},
			ManagedFields:   managed("kube-controller-manager", 1200),
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("http"), Protocol: &proto, Port: &port}},
	}
	for e := range 10 {
		node := fmt.Sprintf("node-%02d", (i+e)%50)
		zone := fmt.Sprintf("zone-%c", 'a'+(i+e)%3)
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 128+e, i/250, i%250+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true), Serving: ptrTo(true), Terminating: ptrTo(false)},
			NodeName:   &node, Zone: &zone,
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: fmt.Sprintf("%s-7d9f8c6b5-%05d", svc, e), UID: uid(100000 + 10*i + e)},
		})
	}
	return s
}

func ptrTo[T any](v T) *T { return &v }
