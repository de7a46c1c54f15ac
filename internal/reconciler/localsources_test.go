package reconciler

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// localLB is a LoadBalancer Service with externalTrafficPolicy Local on
// 192.0.2.20:80, ClusterIP 10.96.0.20, no NodePort.
func localLB() *corev1.Service {
	s := service("lb", "10.96.0.20", corev1.ProtocolTCP, 80)
	s.Spec.Type = corev1.ServiceTypeLoadBalancer
	s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.20"}}
	return s
}

// onNodeB moves a slice's endpoints to another node.
func onNodeB(s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	for i := range s.Endpoints {
		s.Endpoints[i].NodeName = ptr("node-b")
	}
	return s
}

// TestLocalPolicyFromInside: a Local Service's load-balancer IP on a node
// without a local endpoint keeps no real server for outside clients (and
// its reject), while a firewall-mark virtual server serves this node's
// pods and the node from the remote endpoints; its LOCAL-SOURCES member
// is its record of ownership: a restart plans nothing, a removed endpoint
// drains there as anywhere, and when the Service goes (or at cleanup) the
// virtual server goes with it while keepalived's firewall-mark service
// stays.
func TestLocalPolicyFromInside(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	keepalived := model.VSKey{FWMark: 7, Addr: netip.IPv4Unspecified()}
	if err := r.fake.Do(ctx, model.Op{Kind: model.AddService, VS: model.VirtualServer{Key: keepalived, Scheduler: "wlc"}}); err != nil {
		t.Fatal(err)
	}
	r.store.SetService(localLB())
	r.store.SetSlice(onNodeB(slice("lb", corev1.ProtocolTCP, 8080, ready("10.244.2.7"), ready("10.244.2.8"))))
	r.sync(false)
	mark := translate.LocalSourcesMark(model.ServiceName{Namespace: "default", Name: "lb"}, "p", model.TCP, false, 0)
	r.expectDump(fmt.Sprintf(`-A -t 10.96.0.20:80 -s rr
  -a -t 10.96.0.20:80 -r 10.244.2.7:8080 -m -w 1
  -a -t 10.96.0.20:80 -r 10.244.2.8:8080 -m -w 1
-A -t 192.0.2.20:80 -s rr
-A -f 7 -s wlc
-A -f %[1]d -s rr
  -a -f %[1]d -r 10.244.2.7:8080 -m -w 1
  -a -f %[1]d -r 10.244.2.8:8080 -m -w 1
addr 10.96.0.20
addr 192.0.2.20
`, mark))
	want := fmt.Sprintf(`set KUBE-IPVS-CLUSTER-IP 10.96.0.20,tcp:80
set KUBE-IPVS-FRONTENDS 10.96.0.20,tcp:80
set KUBE-IPVS-FRONTENDS 192.0.2.20,tcp:80
set KUBE-IPVS-LOCAL-SOURCES 192.0.2.20,tcp:80 skbmark %#x
set KUBE-IPVS-NO-ENDPOINTS 192.0.2.20,tcp:80
set KUBE-IPVS-VIPS 10.96.0.20
set KUBE-IPVS-VIPS 192.0.2.20
`, mark)
	if got := setLines(r.fake.Dump()); got != want {
		t.Fatalf("members:\n%s\nwant:\n%s", got, want)
	}

	r.restart()
	before := mutating(r.fake)
	r.sync(true)
	if n := mutating(r.fake) - before; n != 0 {
		t.Fatalf("a restart changed the kernel %d times:\n%s", n, r.fake.Dump())
	}

	// An endpoint removed with a connection open drains at weight 0.
	fw := model.VSKey{FWMark: mark, Addr: netip.IPv4Unspecified()}
	r.fake.SetConns(dataplane.RealRef{VS: fw, RS: netip.MustParseAddrPort("10.244.2.8:8080")}, model.Conns{Active: 1})
	r.store.SetSlice(onNodeB(slice("lb", corev1.ProtocolTCP, 8080, ready("10.244.2.7"))))
	r.sync(false)
	r.expectDump(fmt.Sprintf(`-A -t 10.96.0.20:80 -s rr
  -a -t 10.96.0.20:80 -r 10.244.2.7:8080 -m -w 1
-A -t 192.0.2.20:80 -s rr
-A -f 7 -s wlc
-A -f %[1]d -s rr
  -a -f %[1]d -r 10.244.2.7:8080 -m -w 1
  -a -f %[1]d -r 10.244.2.8:8080 -m -w 0
addr 10.96.0.20
addr 192.0.2.20
`, mark))

	r.store.DeleteService(model.ServiceName{Namespace: "default", Name: "lb"})
	r.sync(false)
	r.expectDump("-A -f 7 -s wlc\n")
	if got := setLines(r.fake.Dump()); got != "" {
		t.Fatalf("members left:\n%s", got)
	}

	// Cleanup of the shim alone (a node handed back to kube-proxy): the
	// firewall-mark virtual server goes with the marks, the rest stays.
	r.store.SetService(localLB())
	r.sync(false)
	if _, err := CleanupShim(ctx, r.fake); err != nil {
		t.Fatal(err)
	}
	r.expectDump(`-A -t 10.96.0.20:80 -s rr
  -a -t 10.96.0.20:80 -r 10.244.2.7:8080 -m -w 1
-A -t 192.0.2.20:80 -s rr
-A -f 7 -s wlc
addr 10.96.0.20
addr 192.0.2.20
`)

	// Cleanup: the same predicate.
	r.restart()
	r.sync(true)
	if _, err := Cleanup(ctx, r.fake, CleanupOptions{}); err != nil {
		t.Fatal(err)
	}
	r.expectDump("-A -f 7 -s wlc\n")
}

// TestLostMarkTakesItsMembers: when a Service loses its firewall-mark
// virtual server to another (their marks collide), its LOCAL-SOURCES
// members go too, so its connections are never steered into the other
// Service's endpoints.
func TestLostMarkTakesItsMembers(t *testing.T) {
	lb := netip.MustParseAddr("192.0.2.20")
	fw := model.VSKey{FWMark: 0x10000, Addr: netip.IPv4Unspecified()}
	res := translate.Result{
		Services: []*model.Service{{VirtualServer: model.VirtualServer{Key: fw, Scheduler: "rr"}}},
		Meta:     []translate.VSMeta{{Kind: translate.KindLocalSources}},
		SetEntries: []model.SetEntry{
			model.NewSetEntry("KUBE-IPVS-LOCAL-SOURCES", lb, model.TCP, 80).WithSkbMark(fw.FWMark),
		},
	}
	if mk, ok := plan.MarkedFor(res.SetEntries[0]); !ok || mk != fw {
		t.Fatalf("MarkedFor = %v %v, want %v", mk, ok, fw)
	}
	kept := withoutFrontends(res, map[model.VSKey]bool{fw: true})
	if len(kept.Services) != 0 || len(kept.SetEntries) != 0 {
		t.Fatalf("kept %d services, members %v", len(kept.Services), kept.SetEntries)
	}
}
