package agent

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/health"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/objects"
	"github.com/kube-ipvs/kube-ipvs/internal/reconciler"
	"github.com/kube-ipvs/kube-ipvs/internal/server"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// pagesRig is the agent's debug pages and health tracker over a fake
// kernel, with the sync the runner would call.
type pagesRig struct {
	v     debugPages
	hz    *health.Tracker
	store *objects.Store
	sync  func()
}

func newPagesRig(t *testing.T) pagesRig {
	t.Helper()
	store := objects.NewStore()
	rec := reconciler.New(reconciler.Options{
		Dataplane: fake.New(), Store: store,
		Translate: translate.Config{NodeName: "node-a", Scheduler: "rr", Families: model.Families{IPv4: true}, DrainTimeout: time.Minute},
		Shim:      shim.Config{Families: model.Families{IPv4: true}},
	})
	if err := rec.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	v := debugPages{rec: rec, node: "node-a"}
	hz := health.New(health.Options{Timeout: time.Minute, Families: []string{"IPv4"}})
	hc := newHealthChecks(rec, hz, zap.NewNop())
	sync := syncer{rec: rec, listeners: []Listener{hz, hc}}.sync
	t.Cleanup(hc.Close)
	hz.Start()
	return pagesRig{v: v, hz: hz, store: store, sync: func() {
		if _, err := sync(context.Background(), false); err != nil {
			t.Fatal(err)
		}
	}}
}

// The three listeners get kube-proxy's addresses by default, each can be
// turned off, and only kube-proxy's two fail hard when asked to.
func TestEndpointsFollowTheConfig(t *testing.T) {
	r := newPagesRig(t)
	reg, _, err := newMetrics(model.Families{IPv4: true}, r.store, "dev")
	if err != nil {
		t.Fatal(err)
	}
	describe := func(c config.Config) string {
		var out []string
		for _, e := range endpoints(c, r.v, r.hz, reg, nil) {
			s := e.Name + " " + e.Addr
			if e.HardFail {
				s += " hard"
			}
			out = append(out, s)
		}
		return strings.Join(out, ", ")
	}
	c := config.Default()
	if got, want := describe(c), "healthz 0.0.0.0:10256, metrics 127.0.0.1:10249, debug 127.0.0.1:10247"; got != want {
		t.Errorf("defaults: %s, want %s", got, want)
	}
	c.BindAddressHardFail = true
	if got, want := describe(c), "healthz 0.0.0.0:10256 hard, metrics 127.0.0.1:10249 hard, debug 127.0.0.1:10247"; got != want {
		t.Errorf("hard fail: %s, want %s", got, want)
	}
	c.HealthzBindAddress, c.DebugAddress = "", ""
	if got, want := describe(c), "metrics 127.0.0.1:10249 hard"; got != want {
		t.Errorf("two off: %s, want %s", got, want)
	}
}

// Each listener serves its own paths and nothing of the others': metrics
// are not on the health address, health not on the metrics address, and
// the debug address has neither.
func TestEachListenerServesItsOwnPaths(t *testing.T) {
	r := newPagesRig(t)
	reg, m, err := newMetrics(model.Families{IPv4: true}, r.store, "dev")
	if err != nil {
		t.Fatal(err)
	}
	if err := registerCollectors(r.v, reg); err != nil {
		t.Fatal(err)
	}
	r.store.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	r.sync()
	h := agentHandlers(t, r.v, r.hz, reg, m)
	for _, tc := range []struct{ name, path, want string }{
		{"healthz", health.PathHealthz, `200 OK` + "\n" + `{"lastUpdated":`},
		{"healthz", health.PathLivez, `200 OK` + "\n" + `{"lastUpdated":`},
		{"healthz", server.PathMetrics, "404"},
		{"healthz", server.PathStatus, "404"},
		{"metrics", server.PathMetrics, "200 OK\n# HELP"},
		{"metrics", server.PathProxyMode, "200 OK\nipvs"},
		{"metrics", server.PathHealthz, "200 OK\nok"},
		{"metrics", health.PathLivez, "404"},
		{"metrics", server.PathStatus, "404"},
		{"debug", server.PathStatus, "200 OK\n{"},
		{"debug", server.PathDiff, "200 OK\n{"},
		{"debug", server.PathMetrics, "404"},
		{"debug", health.PathHealthz, "404"},
		{"debug", health.PathLivez, "404"},
	} {
		if got := ask(h[tc.name], tc.path); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s %s: %.80q, want %q...", tc.name, tc.path, got, tc.want)
		}
	}
	// Each health answer above is counted as kube-proxy counts it; the
	// metrics server's ping /healthz is not.
	scrape := ask(h["metrics"], server.PathMetrics)
	for _, want := range []string{`kubeproxy_proxy_healthz_total{code="200"} 1`, `kubeproxy_proxy_livez_total{code="200"} 1`} {
		if !strings.Contains(scrape, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// /healthz follows the Node the last sync saw: from a cluster, not
// eligible until the Node is known, then eligible until the cluster
// autoscaler taints it; /livez answers 200 throughout. From a manifest
// folder without a Node, the node is eligible.
func TestHealthzFollowsTheNode(t *testing.T) {
	r := newPagesRig(t)
	cluster := health.Handler(r.hz, health.HandlerOptions{NodeEligible: r.v.nodeEligible(true)})
	folder := health.Handler(r.hz, health.HandlerOptions{NodeEligible: r.v.nodeEligible(false)})
	check := func(when string, h http.Handler, wantCode string, wantEligible bool) {
		t.Helper()
		got := ask(h, health.PathHealthz)
		code, body, _ := strings.Cut(got, "\n")
		var rep health.Report
		if err := json.Unmarshal([]byte(body), &rep); err != nil || !strings.HasPrefix(code, wantCode) || rep.NodeEligible == nil || *rep.NodeEligible != wantEligible || !rep.Healthy {
			t.Errorf("%s: /healthz %s", when, got)
		}
		if live := ask(h, health.PathLivez); !strings.HasPrefix(live, "200") {
			t.Errorf("%s: /livez %s", when, live)
		}
	}
	r.sync()
	check("cluster, no Node yet", cluster, "503", false)
	check("folder without a Node", folder, "200", true)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	r.store.SetNode(n)
	r.sync()
	check("Node known", cluster, "200", true)
	n = n.DeepCopy()
	n.Spec.Taints = []corev1.Taint{{Key: health.ToBeDeletedTaint, Effect: corev1.TaintEffectNoSchedule}}
	r.store.SetNode(n)
	r.sync()
	check("Node tainted for deletion", cluster, "503", false)
	check("folder, Node tainted for deletion", folder, "503", false)
}

// With bindAddressHardFail, a listener that cannot listen stops the agent
// with an error naming its address; without it, the agent goes on and
// says so in the log.
func TestBindAddressHardFail(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	r := newPagesRig(t)
	reg, _, err := newMetrics(model.Families{IPv4: true}, r.store, "dev")
	if err != nil {
		t.Fatal(err)
	}
	c := config.Default()
	c.HealthzBindAddress, c.MetricsBindAddress, c.DebugAddress = addr, "", ""

	c.BindAddressHardFail = true
	ctx, fail := context.WithCancelCause(context.Background())
	defer fail(nil)
	serveAll(ctx, fail, endpoints(c, r.v, r.hz, reg, nil), zap.NewNop())
	select {
	case <-ctx.Done():
		if err := context.Cause(ctx); !strings.Contains(err.Error(), "healthz server on "+addr+": listen tcp "+addr) {
			t.Fatalf("cause %v, want one naming %s", err, addr)
		}
	case <-time.After(time.Minute):
		t.Fatal("a listener failing hard did not stop the agent")
	}

	c.BindAddressHardFail = false
	core, logs := observer.New(zap.ErrorLevel)
	ctx, fail = context.WithCancelCause(context.Background())
	defer fail(nil)
	serveAll(ctx, fail, endpoints(c, r.v, r.hz, reg, nil), zap.New(core))
	deadline := time.Now().Add(time.Minute)
	for logs.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if logs.Len() == 0 || ctx.Err() != nil {
		t.Fatalf("soft failure: logged %d, agent stopped: %v", logs.Len(), context.Cause(ctx))
	}
	if e := logs.All()[0].ContextMap(); !strings.Contains(e["error"].(string), addr) {
		t.Fatalf("logged %v", e)
	}
}
