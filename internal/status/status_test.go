package status

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/reconciler"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
	"github.com/kube-ipvs/kube-ipvs/internal/snapshot"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

func ptr[T any](v T) *T { return &v }

func webService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Annotations: map[string]string{translate.AnnotationScheduler: "sh"}},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports:           []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
			SessionAffinity: corev1.ServiceAffinityClientIP,
		},
	}
}

// webSlice lists web's endpoints: web-1 ready on node-a, web-2 serving
// while terminating on node-b, and web-3 (ready on node-a) unless gone.
func webSlice(withWeb3 bool) *discoveryv1.EndpointSlice {
	ep := func(addr, pod, node string, c discoveryv1.EndpointConditions) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: ptr(node), TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod}, Conditions: c}
	}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "web-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8080))}},
		Endpoints: []discoveryv1.Endpoint{
			ep("10.244.1.2", "web-1", "node-a", discoveryv1.EndpointConditions{}),
			ep("10.244.2.2", "web-2", "node-b", discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}),
		},
	}
	if withWeb3 {
		s.Endpoints = append(s.Endpoints, ep("10.244.3.2", "web-3", "node-a", discoveryv1.EndpointConditions{}))
	}
	return s
}

// TestReport builds a report from what a reconciler published after real
// syncs on the fake kernel: a Service with its endpoints (pod, node and
// conditions carried from translate), a real server draining, a foreign
// virtual server and a failed sync.
func TestReport(t *testing.T) {
	now := time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)
	clock := now.Add(-45 * time.Second)
	kernel, store := fake.New(), snapshot.NewStore()
	rec := reconciler.New(reconciler.Options{
		Dataplane: kernel, Store: store, Now: func() time.Time { return clock },
		Translate: translate.Config{NodeName: "node-a", Scheduler: "rr", Families: model.Families{IPv4: true}, DrainTimeout: time.Minute},
		Shim:      shim.Config{Families: model.Families{IPv4: true}},
	})
	ctx := context.Background()
	if err := rec.Init(ctx); err != nil {
		t.Fatal(err)
	}
	web := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80)
	foreign := model.VirtualServer{Key: model.NewVSKey(model.TCP, netip.MustParseAddr("192.168.1.200"), 443), Scheduler: "wlc"}
	if err := kernel.Do(ctx, model.Op{Kind: model.AddService, VS: foreign}); err != nil {
		t.Fatal(err)
	}
	store.SetService(webService())
	store.SetSlice(webSlice(true))
	if _, err := rec.Sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	// web-3 leaves its slice with a connection open: it drains (and, its
	// endpoint gone, shows no pod). Removing
	// its hairpin set member fails, and so does the kernel check after it:
	// the agent cannot change the kernel at all (one operation's failure
	// alone would not fail the sync).
	kernel.SetConns(dataplane.RealRef{VS: web, RS: netip.MustParseAddrPort("10.244.3.2:8080")}, model.Conns{Active: 1})
	kernel.FailNext("DeleteSetEntry", fmt.Errorf("boom: %w", fs.ErrPermission))
	kernel.FailNext("Probe", fmt.Errorf("probe: %w", fs.ErrPermission))
	clock = now.Add(-42 * time.Second)
	store.SetSlice(webSlice(false))
	if _, err := rec.Sync(ctx, false); err == nil {
		t.Fatal("the second sync did not fail")
	}

	rep := Build("node-a", rec.View())
	want := `node node-a; last sync 42s ago (incremental, 2 ops, 1 failed, 1 draining, took 0s): FAILED: kernel check after 1 failed operations: probe: permission denied
ipset del KUBE-IPVS-LOOP-BACK 10.244.3.2,tcp:8080,10.244.3.2: boom: permission denied
VIPs on kube-ipvs0: 10.96.0.10

-t 10.96.0.10:80 sh (annotation) persistent 10800  default/web port http (ClusterIP)
  -> 10.244.1.2:8080              w 1   ready  pod web-1 on node-a
  -> 10.244.2.2:8080              w 0   serving-terminating  pod web-2 on node-b
  -> 10.244.3.2:8080              w 0   draining for 42s

-t 192.168.1.200:443 wlc  not ours
`
	if got := rep.Text(now); got != want {
		t.Fatalf("text:\n%s\nwant:\n%s", got, want)
	}
	js, err := json.Marshal(rep)
	if err != nil || !strings.Contains(string(js), `"drainingSince":"2026-11-30T01:59:18Z"`) || !strings.Contains(string(js), `"schedulerFrom":"annotation"`) ||
		!strings.Contains(string(js), `"state":"serving-terminating"`) {
		t.Fatalf("json: %s (%v)", js, err)
	}
}
