package agent

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/health"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/objects"
	"github.com/kube-ipvs/kube-ipvs/internal/reconciler"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// The health-check ports listen on the NodePort addresses of the Node as
// the last sync read it (nodePortAddresses: primary), and move with the
// Node's address at the next sync.
func TestHealthCheckPortsFollowTheSyncsNode(t *testing.T) {
	const hcPort = 31917
	v4 := model.Families{IPv4: true}
	store := objects.NewStore()
	rec := reconciler.New(reconciler.Options{
		Dataplane: fake.New(), Store: store,
		Translate: translate.Config{NodeName: "node-a", Scheduler: "rr", Families: v4, DrainTimeout: time.Minute,
			NodePortAddresses: []string{translate.NodePortPrimary}},
		Shim: shim.Config{Families: v4},
	})
	ctx := context.Background()
	if err := rec.Init(ctx); err != nil {
		t.Fatal(err)
	}
	hz := health.New(health.Options{Timeout: time.Minute, Families: []string{"IPv4"}})
	hc := newHealthChecks(rec, hz, zap.NewNop())
	defer hc.Close()
	sync := syncer{rec: rec, listeners: []Listener{hz, hc}}.sync
	hz.Start()

	store.SetService(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: hcPort,
			Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080}}},
	})
	slice := webSlice("10.244.1.2")
	slice.Endpoints[0].NodeName = new("node-a")
	store.SetSlice(slice)
	for _, step := range []struct{ nodeIP, other string }{
		{"127.0.0.1", "127.0.0.2"},
		{"127.0.0.2", "127.0.0.1"},
	} {
		store.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: step.nodeIP}}}})
		if _, err := sync(ctx, false); err != nil {
			t.Fatal(err)
		}
		if got, want := rec.View().NodePortAddrs(), []netip.Addr{netip.MustParseAddr(step.nodeIP)}; !slices.Equal(got, want) {
			t.Errorf("Node at %s: the view's NodePort addresses %v, want %v", step.nodeIP, got, want)
		}
		if code := healthCheckAnswer(step.nodeIP, hcPort); code != http.StatusOK {
			t.Errorf("Node at %s: its health-check port answered %d, want 200", step.nodeIP, code)
		}
		if code := healthCheckAnswer(step.other, hcPort); code != 0 {
			t.Errorf("Node at %s: %s still answers on the health-check port (%d)", step.nodeIP, step.other, code)
		}
	}
}

// healthCheckAnswer is the status code a health-check port answers on
// addr, 0 when nothing listens there.
func healthCheckAnswer(addr string, port uint16) int {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://%s/", netip.AddrPortFrom(netip.MustParseAddr(addr), port)))
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	return resp.StatusCode
}
