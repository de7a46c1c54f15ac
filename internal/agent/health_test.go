package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/health"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/objects"
	"github.com/kube-ipvs/kube-ipvs/internal/reconciler"
	"github.com/kube-ipvs/kube-ipvs/internal/server"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// events records the Warning Events the reconciler posts.
type events []string

func (e *events) ServiceWarning(name model.ServiceName, reason, msg string) {
	*e = append(*e, fmt.Sprintf("%s %s: %s", name, reason, msg))
}

// TestBadSchedulerKeepsTheNodeHealthy runs the agent's sync wrapper over a
// kernel without the twos scheduler's module and a Service that asks for
// it among healthy ones: the sync succeeds, /healthz and the health-check
// ports' verdict stay healthy, the Service gets a Warning Event and the
// service-errors gauge counts it, and the other Service is programmed.
func TestBadSchedulerKeepsTheNodeHealthy(t *testing.T) {
	kernel := fake.New()
	kernel.FailWhen(func(c fake.Call) error {
		if vs, ok := c.Arg.(model.VirtualServer); ok && vs.Scheduler == "twos" {
			return fmt.Errorf("scheduler twos: no ip_vs_twos module: %w", dataplane.ErrUnsupported)
		}
		return nil
	})
	store := objects.NewStore()
	var posted events
	reg, m, err := newMetrics(model.Families{IPv4: true}, store, "dev")
	if err != nil {
		t.Fatal(err)
	}
	rec := reconciler.New(reconciler.Options{
		Dataplane: kernel, Store: store, Recorder: &posted, Metrics: m,
		Translate: translate.Config{NodeName: "node-a", Scheduler: "rr", Families: model.Families{IPv4: true}, DrainTimeout: time.Minute},
		Shim:      shim.Config{Families: model.Families{IPv4: true}},
	})
	ctx := context.Background()
	if err := rec.Init(ctx); err != nil {
		t.Fatal(err)
	}
	v := debugPages{rec: rec, node: "node-a"}
	if err := registerCollectors(v, reg); err != nil {
		t.Fatal(err)
	}
	hz := health.New(health.Options{Timeout: time.Minute, Families: []string{"IPv4"}})
	h := agentHandlers(t, v, hz, reg, m)
	hc := newHealthChecks(rec, hz, zap.NewNop())
	sync := syncer{rec: rec, listeners: []Listener{hz, hc}}.sync
	defer hc.Close()
	hz.Start()
	store.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})

	for name, ip := range map[string]string{"web": "10.96.0.10", "fancy": "10.96.0.30"} {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip},
				Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}}},
		}
		if name == "fancy" {
			svc.Annotations = map[string]string{translate.AnnotationScheduler: "twos"}
		}
		store.SetService(svc)
	}
	store.SetSlice(webSlice("10.244.1.2"))
	for _, full := range []bool{false, true} {
		if _, err := sync(ctx, full); err != nil {
			t.Fatalf("sync (full %v): %v", full, err)
		}
	}
	if got := ask(h["healthz"], health.PathHealthz); !strings.HasPrefix(got, "200 OK") {
		t.Errorf("/healthz:\n%s", got)
	}
	if !hz.Healthy() {
		t.Error("the health-check ports would answer 503")
	}
	if got := ask(h["metrics"], server.PathMetrics); !strings.Contains(got, "\nkube_ipvs_service_errors 1\n") || !strings.Contains(got, "\nkube_ipvs_sync_failures_total 0\n") {
		t.Errorf("/metrics lacks one service error and no sync failure:\n%s", got)
	}
	if len(posted) != 1 || !strings.HasPrefix(posted[0], "default/fancy FailedToProgram") {
		t.Errorf("events %q, want one FailedToProgram on default/fancy", posted)
	}
	// Of fancy the kernel holds only its ownership record, written before
	// the create that failed: no server, VIP or member that serves it.
	dump := strings.ReplaceAll(kernel.Dump(), "set KUBE-IPVS-FRONTENDS 10.96.0.30,tcp:80\n", "")
	if !strings.Contains(dump, "-a -t 10.96.0.10:80 -r 10.244.1.2:8080") || strings.Contains(dump, "10.96.0.30") {
		t.Errorf("kernel:\n%s", kernel.Dump())
	}
}
