package source

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/objects"
)

func makeService(name, ip string, lbls map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: lbls},
		Spec: corev1.ServiceSpec{ClusterIP: ip, ClusterIPs: []string{ip},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
}

func makeSlice(name, svc, addr string, lbls map[string]string) *discoveryv1.EndpointSlice {
	l := map[string]string{discoveryv1.LabelServiceName: svc}
	for k, v := range lbls {
		l[k] = v
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "default", Labels: l},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}}},
	}
}

func makeNode(name, ip string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
}

// clusterObjects covers each filter: a plain Service, one for another
// proxy, one for the proxy named "mine", a headless one, and two Nodes.
func clusterObjects() []runtime.Object {
	return []runtime.Object{
		makeService("web", "10.96.0.1", nil),
		makeService("other", "10.96.0.2", map[string]string{model.LabelServiceProxyName: "other"}),
		makeService("mine", "10.96.0.3", map[string]string{model.LabelServiceProxyName: "mine"}),
		makeService("hl", corev1.ClusterIPNone, nil),
		makeSlice("web-1", "web", "10.244.0.1", nil),
		makeSlice("mine-1", "mine", "10.244.0.3", nil),
		makeSlice("hl-1", "hl", "10.244.0.4", map[string]string{corev1.IsHeadlessService: ""}),
		makeNode("node-a", "192.0.2.1"),
		makeNode("node-b", "192.0.2.2"),
	}
}

var clusterNames = []string{"default/hl", "default/mine", "default/other", "default/web"}

// startKubernetes runs the source against a fake clientset and returns
// once every cache has synced and every watch is established (the fake
// does not replay events that happen before its watch starts).
func startKubernetes(t *testing.T, proxyName string) (*fake.Clientset, *objects.Store) {
	t.Helper()
	client := fake.NewClientset(clusterObjects()...)
	watches := make(chan string, 10)
	client.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		watches <- a.GetResource().Resource
		return false, nil, nil
	})
	store := objects.NewStore(SourcesKubernetes...)
	k := &Kubernetes{Client: client, NodeName: "node-a", ServiceProxyName: proxyName, Store: store, Log: zaptest.NewLogger(t)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	waitStore(t, store, store.Synced)
	deadline := time.After(10 * time.Second)
	for seen := map[string]int{}; seen["services"]+seen["endpointslices"]+seen["nodes"] < 4; {
		select {
		case r := <-watches:
			seen[r]++
		case <-deadline:
			t.Fatalf("watches not started: %v", seen)
		}
	}
	return client, store
}

func TestKubernetesInitialSync(t *testing.T) {
	tests := []struct {
		proxyName string
		want      string
	}{{
		proxyName: "",
		want: "default/hl no-service\ndefault/mine no-service [mine-1 10.244.0.3]\ndefault/other no-service\n" +
			"default/web 10.96.0.1 http:80/TCP->8080 [web-1 10.244.0.1]\nnode node-a 192.0.2.1",
	}, {
		proxyName: "mine",
		want: "default/hl no-service\ndefault/mine 10.96.0.3 http:80/TCP->8080 [mine-1 10.244.0.3]\ndefault/other no-service\n" +
			"default/web no-service [web-1 10.244.0.1]\nnode node-a 192.0.2.1",
	}}
	for _, tt := range tests {
		t.Run("proxy name "+tt.proxyName, func(t *testing.T) {
			_, store := startKubernetes(t, tt.proxyName)
			if got := dumpStore(store, clusterNames...); got != tt.want {
				t.Errorf("store:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestKubernetesChanges(t *testing.T) {
	client, store := startKubernetes(t, "")
	ctx := context.Background()
	steps := []struct {
		name string
		do   func() error
		want string
	}{{
		name: "slice updated",
		do: func() error {
			_, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, makeSlice("web-1", "web", "10.244.0.9", nil), metav1.UpdateOptions{})
			return err
		},
		want: "default/hl no-service\ndefault/mine no-service [mine-1 10.244.0.3]\ndefault/other no-service\n" +
			"default/web 10.96.0.1 http:80/TCP->8080 [web-1 10.244.0.9]\nnode node-a 192.0.2.1",
	}, {
		name: "proxy-name label removed: the Service becomes ours",
		do: func() error {
			_, err := client.CoreV1().Services("default").Update(ctx, makeService("other", "10.96.0.2", nil), metav1.UpdateOptions{})
			return err
		},
		want: "default/hl no-service\ndefault/mine no-service [mine-1 10.244.0.3]\ndefault/other 10.96.0.2 http:80/TCP->8080\n" +
			"default/web 10.96.0.1 http:80/TCP->8080 [web-1 10.244.0.9]\nnode node-a 192.0.2.1",
	}, {
		name: "service handed to another proxy",
		do: func() error {
			_, err := client.CoreV1().Services("default").Update(ctx,
				makeService("web", "10.96.0.1", map[string]string{model.LabelServiceProxyName: "other"}), metav1.UpdateOptions{})
			return err
		},
		want: "default/hl no-service\ndefault/mine no-service [mine-1 10.244.0.3]\ndefault/other 10.96.0.2 http:80/TCP->8080\n" +
			"default/web no-service [web-1 10.244.0.9]\nnode node-a 192.0.2.1",
	}, {
		name: "slice deleted, other node changed",
		do: func() error {
			if _, err := client.CoreV1().Nodes().Update(ctx, makeNode("node-b", "192.0.2.99"), metav1.UpdateOptions{}); err != nil {
				return err
			}
			return client.DiscoveryV1().EndpointSlices("default").Delete(ctx, "mine-1", metav1.DeleteOptions{})
		},
		want: "default/hl no-service\ndefault/mine no-service\ndefault/other 10.96.0.2 http:80/TCP->8080\n" +
			"default/web no-service [web-1 10.244.0.9]\nnode node-a 192.0.2.1",
	}, {
		name: "node updated",
		do: func() error {
			_, err := client.CoreV1().Nodes().Update(ctx, makeNode("node-a", "192.0.2.7"), metav1.UpdateOptions{})
			return err
		},
		want: "default/hl no-service\ndefault/mine no-service\ndefault/other 10.96.0.2 http:80/TCP->8080\n" +
			"default/web no-service [web-1 10.244.0.9]\nnode node-a 192.0.2.7",
	}, {
		name: "node deleted",
		do:   func() error { return client.CoreV1().Nodes().Delete(ctx, "node-a", metav1.DeleteOptions{}) },
		want: "default/hl no-service\ndefault/mine no-service\ndefault/other 10.96.0.2 http:80/TCP->8080\n" +
			"default/web no-service [web-1 10.244.0.9]\nnode none",
	}}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		var got string
		if !waitFor(store, func() bool { got = dumpStore(store, clusterNames...); return got == s.want }) {
			t.Fatalf("%s: store:\n%s\nwant:\n%s", s.name, got, s.want)
		}
	}
}

func TestKubernetesHandlers(t *testing.T) {
	svc := makeService("web", "10.96.0.1", nil)
	svc.ResourceVersion = "5"
	slice := makeSlice("web-1", "web", "10.244.0.1", nil)
	sel, err := serviceSelector("")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		do    func(h handlers)
		want  string
		dirty string
	}{{
		name:  "resync of an unchanged object marks nothing",
		do:    func(h handlers) { h.services().OnUpdate(svc, svc) },
		want:  "default/web 10.96.0.1 http:80/TCP->8080 [web-1 10.244.0.1]\nnode none",
		dirty: "",
	}, {
		name: "service tombstone",
		do: func(h handlers) {
			h.services().OnDelete(cache.DeletedFinalStateUnknown{Key: "default/web", Obj: svc})
		},
		want:  "default/web no-service [web-1 10.244.0.1]\nnode none",
		dirty: "default/web",
	}, {
		name: "slice tombstone",
		do: func(h handlers) {
			h.slices().OnDelete(cache.DeletedFinalStateUnknown{Key: "default/web-1", Obj: slice})
		},
		want:  "default/web 10.96.0.1 http:80/TCP->8080\nnode none",
		dirty: "default/web",
	}, {
		name: "slice becomes headless",
		do: func(h handlers) {
			h.slices().OnUpdate(slice, makeSlice("web-1", "web", "10.244.0.1", map[string]string{corev1.IsHeadlessService: ""}))
		},
		want:  "default/web 10.96.0.1 http:80/TCP->8080\nnode none",
		dirty: "default/web",
	}, {
		name: "node tombstone and another node's add",
		do: func(h handlers) {
			h.node().OnAdd(makeNode("node-a", "192.0.2.1"), false)
			h.node().OnAdd(makeNode("node-b", "192.0.2.2"), false)
			h.node().OnDelete(cache.DeletedFinalStateUnknown{Key: "node-a", Obj: makeNode("node-a", "192.0.2.1")})
		},
		want:  "default/web 10.96.0.1 http:80/TCP->8080 [web-1 10.244.0.1]\nnode none",
		dirty: "node",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := objects.NewStore()
			h := handlers{store: store, svcSel: sel, sliceSel: sliceSelector(), nodeName: "node-a"}
			h.services().OnAdd(svc, true)
			h.slices().OnAdd(slice, true)
			store.Take()
			tt.do(h)
			if got := dumpStore(store, "default/web"); got != tt.want {
				t.Errorf("store:\n%s\nwant:\n%s", got, tt.want)
			}
			if got := dirtyString(store.Take()); got != tt.dirty {
				t.Errorf("changed %q, want %q", got, tt.dirty)
			}
		})
	}
}

func TestKubernetesSyncCancelled(t *testing.T) {
	store := objects.NewStore(SourcesKubernetes...)
	k := &Kubernetes{Client: fake.NewClientset(), NodeName: "node-a", Store: store}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := k.Run(ctx); err == nil {
		t.Error("Run with a cancelled context returned nil, want a sync error")
	}
	if store.Synced() {
		t.Error("store synced without a cache sync")
	}
}

func TestSelectors(t *testing.T) {
	for proxy, want := range map[string]string{"": "!service.kubernetes.io/service-proxy-name", "mine": "service.kubernetes.io/service-proxy-name=mine"} {
		sel, err := serviceSelector(proxy)
		if err != nil || sel.String() != want {
			t.Errorf("serviceSelector(%q) = %v, %v; want %s", proxy, sel, err, want)
		}
	}
	if _, err := serviceSelector("not a label value!"); err == nil {
		t.Error("invalid proxy name accepted")
	}
	if got, want := sliceSelector().String(), "!service.kubernetes.io/headless"; got != want {
		t.Errorf("sliceSelector() = %s, want %s", got, want)
	}
}

func TestEventRecorder(t *testing.T) {
	client := fake.NewClientset()
	events := make(chan *corev1.Event, 1)
	client.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		events <- a.(k8stesting.CreateAction).GetObject().(*corev1.Event)
		return false, nil, nil
	})
	store := objects.NewStore()
	svc := makeService("web", "10.96.0.1", nil)
	svc.UID = "uid-1"
	store.SetService(svc)
	rec, stop := NewServiceEventRecorder(client, "node-a", store, zaptest.NewLogger(t))
	defer stop()
	rec.ServiceWarning(model.ServiceName{Namespace: "default", Name: "web"}, "InvalidScheduler", `scheduler "xx" is not known`)
	select {
	case e := <-events:
		got := [...]string{e.Type, e.Reason, e.Message, e.InvolvedObject.Kind, e.InvolvedObject.Namespace,
			e.InvolvedObject.Name, string(e.InvolvedObject.UID), e.Source.Component, e.Source.Host}
		want := [...]string{"Warning", "InvalidScheduler", `scheduler "xx" is not known`, "Service", "default", "web", "uid-1", "kube-ipvs", "node-a"}
		if got != want {
			t.Errorf("event %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event posted")
	}
}

// Every Node's addresses reach the store, follow the Node's updates and go
// with it.
func TestKubernetesNodeAddrs(t *testing.T) {
	client, store := startKubernetes(t, "")
	ctx := context.Background()
	addrs := func() string {
		var out []string
		for _, a := range store.AllNodeAddrs().Addrs {
			out = append(out, a.String())
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	steps := []struct {
		name string
		do   func() error
		want string
	}{
		{"listed", func() error { return nil }, "192.0.2.1 192.0.2.2"},
		{"another node's address changed", func() error {
			_, err := client.CoreV1().Nodes().Update(ctx, makeNode("node-b", "192.0.2.99"), metav1.UpdateOptions{})
			return err
		}, "192.0.2.1 192.0.2.99"},
		{"a node joined", func() error {
			_, err := client.CoreV1().Nodes().Create(ctx, makeNode("node-c", "192.0.2.3"), metav1.CreateOptions{})
			return err
		}, "192.0.2.1 192.0.2.3 192.0.2.99"},
		{"a node left", func() error { return client.CoreV1().Nodes().Delete(ctx, "node-b", metav1.DeleteOptions{}) }, "192.0.2.1 192.0.2.3"},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		var got string
		if !waitFor(store, func() bool { got = addrs(); return got == s.want }) {
			t.Fatalf("%s: node addresses %q, want %q", s.name, got, s.want)
		}
	}
}
