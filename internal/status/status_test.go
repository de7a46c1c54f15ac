package status

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/reconciler"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

func ptr[T any](v T) *T { return &v }

func TestReport(t *testing.T) {
	now := time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)
	web := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80)
	foreign := model.NewVSKey(model.TCP, netip.MustParseAddr("192.168.1.200"), 443)
	rs := func(a string, w int) model.RealServer {
		return model.RealServer{Addr: netip.MustParseAddrPort(a), Weight: w}
	}
	svc := func(k model.VSKey, sched model.Scheduler, reals ...model.RealServer) *model.Service {
		s := &model.Service{VirtualServer: model.VirtualServer{Key: k, Scheduler: sched}, Reals: map[netip.AddrPort]model.RealServer{}}
		for _, r := range reals {
			s.Reals[r.Addr] = r
		}
		return s
	}
	desired := model.NewState()
	desired.Services[web] = svc(web, "sh", rs("10.244.1.2:8080", 1), rs("10.244.2.2:8080", 0))
	desired.Services[web].Flags, desired.Services[web].Timeout = model.FlagPersistent, 10800
	desired.Addrs[web.Addr] = struct{}{}
	observed := desired.Clone()
	observed.Services[web].Reals[netip.MustParseAddrPort("10.244.3.2:8080")] = rs("10.244.3.2:8080", 0)
	observed.Services[foreign] = svc(foreign, "wlc")
	name := model.ServiceName{Namespace: "default", Name: "web"}
	in := reconciler.Inspection{
		Desired: desired, Observed: observed,
		Meta:     map[model.VSKey]translate.VSMeta{web: {Service: name, PortName: "http", Kind: "ClusterIP", SchedulerFrom: "annotation"}},
		Draining: map[dataplane.RealRef]time.Time{{VS: web, RS: netip.MustParseAddrPort("10.244.3.2:8080")}: now.Add(-42 * time.Second)},
		Last:     reconciler.Status{Time: now.Add(-3 * time.Second), Ops: 2, Draining: 1, Duration: 1500 * time.Microsecond, Err: errors.New("boom")},
	}
	slices := func(n model.ServiceName) []*discoveryv1.EndpointSlice {
		if n != name {
			t.Fatalf("asked for %s", n)
		}
		return []*discoveryv1.EndpointSlice{{Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.1.2"}, NodeName: ptr("node-a"), TargetRef: &corev1.ObjectReference{Name: "web-1"}},
			{Addresses: []string{"10.244.2.2"}, NodeName: ptr("node-b"), TargetRef: &corev1.ObjectReference{Name: "web-2"},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}},
		}}}
	}
	rep := Build("node-a", in, slices)
	want := `node node-a; last sync 3s ago (incremental, 2 ops, 0 failed, 1 draining, took 1.5ms): FAILED: boom
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
	if err != nil || !strings.Contains(string(js), `"drainingSince":"2026-11-30T01:59:18Z"`) || !strings.Contains(string(js), `"schedulerFrom":"annotation"`) {
		t.Fatalf("json: %s (%v)", js, err)
	}
}
