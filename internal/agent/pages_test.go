package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/health"
	"github.com/kube-ipvs/kube-ipvs/internal/metrics"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/objects"
	"github.com/kube-ipvs/kube-ipvs/internal/reconciler"
	"github.com/kube-ipvs/kube-ipvs/internal/server"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// stuckKernel is the fake kernel whose AddReal, once armed, blocks until
// released: a sync stuck in a kernel call. Like the linux dataplane it
// serializes its calls, so whoever shares it waits behind the stuck one.
type stuckKernel struct {
	*fake.Fake
	mu      sync.Mutex
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (k *stuckKernel) Observe(ctx context.Context) (dataplane.Observation, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.Fake.Observe(ctx)
}

func (k *stuckKernel) AddReal(ctx context.Context, vs model.VSKey, rs model.RealServer) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.armed.CompareAndSwap(true, false) {
		k.entered <- struct{}{}
		<-k.release
	}
	return k.Fake.Do(ctx, model.Op{Kind: model.AddReal, VS: model.VirtualServer{Key: vs}, RS: rs})
}

// Apply sends a batch's real servers through AddReal, where a sync can
// stick; the rest as the fake does.
func (k *stuckKernel) Apply(ctx context.Context, changes []model.Op) []error {
	errs := make([]error, len(changes))
	for i, c := range changes {
		if c.Kind == model.AddReal {
			errs[i] = k.AddReal(ctx, c.VS.Key, c.RS)
			continue
		}
		errs[i] = k.Fake.Apply(ctx, changes[i:i+1])[0]
	}
	return errs
}

func webSlice(addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "web-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new(string), Protocol: new(corev1.ProtocolTCP), Port: new(int32(8080))}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
	}
	return s
}

// TestPagesAnswerWhileASyncIsStuck runs the agent's sync (the runner's
// function, with its listeners) into a kernel call that does not return,
// and asks every page meanwhile: /healthz, /debug/status, /debug/diff,
// /metrics and the health-check ports' verdict answer at once, from the
// view of the sync before. Then the sync is let go and the pages follow it.
func TestPagesAnswerWhileASyncIsStuck(t *testing.T) {
	kernel := &stuckKernel{Fake: fake.New(), entered: make(chan struct{}), release: make(chan struct{})}
	store := objects.NewStore()
	rec := reconciler.New(reconciler.Options{
		// The kernel reader reads the same kernel through its own handle,
		// as the agent's does.
		Dataplane: kernel, Reader: kernel.Fake, Store: store,
		Translate: translate.Config{NodeName: "node-a", Scheduler: "rr", Families: model.Families{IPv4: true}, DrainTimeout: time.Minute},
		Shim:      shim.Config{Families: model.Families{IPv4: true}},
	})
	ctx := context.Background()
	if err := rec.Init(ctx); err != nil {
		t.Fatal(err)
	}
	reg, _, err := newMetrics(model.Families{IPv4: true}, store, "dev")
	if err != nil {
		t.Fatal(err)
	}
	v := debugPages{rec: rec, node: "node-a"}
	if err := registerCollectors(v, reg); err != nil {
		t.Fatal(err)
	}
	hz := health.New(health.Options{Timeout: time.Minute, Families: []string{"IPv4"}})
	h := agentHandlers(t, v, hz, reg, nil)
	hc := newHealthChecks(rec, hz, zap.NewNop())
	sync := syncer{rec: rec, listeners: []Listener{hz, hc}}.sync
	defer hc.Close()
	hz.Start()
	store.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})

	store.SetService(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}}},
	})
	store.SetSlice(webSlice("10.244.1.2"))
	if _, err := sync(ctx, false); err != nil {
		t.Fatal(err)
	}

	store.SetSlice(webSlice("10.244.1.2", "10.244.2.2"))
	kernel.armed.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := sync(ctx, false)
		done <- err
	}()
	<-kernel.entered // the sync now waits in AddReal

	answered := make(chan map[string]string, 1)
	go func() {
		got := map[string]string{}
		for path, name := range map[string]string{health.PathHealthz: "healthz", server.PathStatus: "debug", server.PathDiff: "debug", server.PathMetrics: "metrics"} {
			got[path] = ask(h[name], path)
		}
		got["healthy"] = map[bool]string{true: "yes", false: "no"}[hz.Healthy()]
		answered <- got
	}()
	var got map[string]string
	select {
	case got = <-answered:
	case <-time.After(10 * time.Second):
		// Only reached when a view waits for the sync: a failure.
		t.Fatal("the debug pages did not answer while a sync was stuck in the kernel")
	}
	for path, want := range map[string][]string{
		health.PathHealthz: {"200 OK", `"nodeEligible":true,"healthy":true`},
		server.PathStatus:  {"200 OK", `"addr": "10.244.1.2:8080"`, `"state": "ready"`},
		server.PathDiff:    {"200 OK", `"ops": []`},
		server.PathMetrics: {"200 OK", "\nkube_ipvs_real_servers 1\n", "\nkube_ipvs_virtual_servers 1\n"},
		"healthy":          {"yes"},
	} {
		for _, w := range want {
			if !strings.Contains(got[path], w) {
				t.Errorf("%s during the stuck sync lacks %q:\n%s", path, w, got[path])
			}
		}
	}
	if strings.Contains(got[server.PathStatus], "10.244.2.2") {
		t.Errorf("status shows the stuck sync's real server before it was applied:\n%s", got[server.PathStatus])
	}

	close(kernel.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rep := v.Status()
	web, _ := rec.View().Server(model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80))
	if len(rep.VirtualServers) != 1 || len(rep.VirtualServers[0].Reals) != 2 || web.Observed.Reals.Len() != 2 || v.table().RealServers != 2 {
		t.Fatalf("after the sync the debug pages did not follow: %+v", rep)
	}
}

// agentHandlers are the handlers the agent serves with its default
// addresses, by endpoint name.
func agentHandlers(t *testing.T, v debugPages, hz *health.Tracker, reg *prometheus.Registry, m *metrics.Metrics) map[string]http.Handler {
	t.Helper()
	out := map[string]http.Handler{}
	for _, e := range endpoints(config.Default(), v, hz, reg, m) {
		out[e.Name] = e.Handler
	}
	if len(out) != 3 {
		t.Fatalf("endpoints: %v", out)
	}
	return out
}

// ask GETs path from h: the status line, a newline, the body.
func ask(h http.Handler, path string) string {
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, path, nil))
	return rr.Result().Status + "\n" + rr.Body.String()
}
