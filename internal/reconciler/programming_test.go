package reconciler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/metrics"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// stamp sets a slice's endpoints.kubernetes.io/last-change-trigger-time,
// as the EndpointSlice controller does.
func stamp(s *discoveryv1.EndpointSlice, at time.Time) *discoveryv1.EndpointSlice {
	s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: at.Format(time.RFC3339Nano)}
	return s
}

// programming reads the network programming histogram: its sample count
// and sum per family, "IPv4 n=1 sum=1.5s".
func programming(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := ""
	for _, mf := range mfs {
		if mf.GetName() != metrics.NetworkProgramming {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			out += fmt.Sprintf("%s n=%d sum=%gs;", m.GetLabel()[0].GetValue(), h.GetSampleCount(), h.GetSampleSum())
		}
	}
	return out
}

// programmingRig is a rig with metrics whose clock runs after the store
// was made: trigger times from before the agent started are not measured.
func programmingRig(t *testing.T) (*rig, *prometheus.Registry) {
	r := newRig(t)
	r.clock.t = time.Now().Add(time.Minute)
	return r, r.withMetrics()
}

// TestNetworkProgrammingLatency follows one EndpointSlice change from its
// trigger time to the end of the sync that put it in the kernel, on the
// rig's clock.
func TestNetworkProgrammingLatency(t *testing.T) {
	r, reg := programmingRig(t)
	r.webAndDNS() // no trigger times: nothing to measure
	r.sync(false)
	if got := programming(t, reg); got != "" {
		t.Fatalf("slices without the annotation measured: %s", got)
	}
	changed := r.clock.now()
	r.clock.advance(1500 * time.Millisecond) // the change reaches the agent, which syncs
	r.store.SetSlice(stamp(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2")), changed))
	r.sync(false)
	if got, want := programming(t, reg), "IPv4 n=1 sum=1.5s;"; got != want {
		t.Fatalf("programming %q, want %q", got, want)
	}
	// Each change is measured once: the next sync has nothing new.
	r.clock.advance(time.Second)
	r.store.SetService(service("web", "10.96.0.10", corev1.ProtocolTCP, 80))
	r.sync(false)
	if got, want := programming(t, reg), "IPv4 n=1 sum=1.5s;"; got != want {
		t.Fatalf("after an unrelated sync: %q, want %q", got, want)
	}
}

// TestNetworkProgrammingWaitsForTheKernel: a change whose operations fail
// is measured when the retry that programs it succeeds; a change taken in
// by a sync that failed, when the next sync succeeds; a change of a Service
// that does not translate is never programmed, so never measured.
func TestNetworkProgrammingWaitsForTheKernel(t *testing.T) {
	r, reg := programmingRig(t)
	r.webAndDNS()
	r.sync(false)

	changed := r.clock.now()
	r.store.SetSlice(stamp(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2"), ready("10.244.3.2")), changed))
	r.fake.FailNext("AddReal", errors.New("injected"))
	r.clock.advance(time.Second)
	r.sync(false) // web's add fails: retried with backoff
	if got := programming(t, reg); got != "" {
		t.Fatalf("measured before the change was in the kernel: %s", got)
	}
	r.clock.advance(2 * time.Second) // past the first retry delay
	r.sync(false)
	r.expectDumpHas(t, "  -a -t 10.96.0.10:80 -r 10.244.3.2:8080 -m -w 1")
	if got, want := programming(t, reg), "IPv4 n=1 sum=3s;"; got != want {
		t.Fatalf("after the retry: %q, want %q", got, want)
	}

	changed = r.clock.now()
	r.store.SetSlice(stamp(slice("dns", corev1.ProtocolUDP, 53, ready("10.244.1.3"), ready("10.244.2.3")), changed))
	r.fake.FailNext("AddReal", fmt.Errorf("netlink: %w", context.DeadlineExceeded)) // systemic: the sync fails
	r.clock.advance(time.Second)
	if _, err := r.rec.Sync(context.Background(), false); err == nil {
		t.Fatal("sync succeeded")
	}
	r.clock.advance(time.Second)
	r.sync(false) // full, after the failure
	if got, want := programming(t, reg), "IPv4 n=2 sum=5s;"; got != want {
		t.Fatalf("after the failed sync and its successor: %q, want %q", got, want)
	}

	bad := service("web", "10.96.0.10", corev1.ProtocolTCP, 80)
	bad.Annotations = map[string]string{"kube-ipvs.io/scheduler": "fastest"}
	r.store.SetService(bad)
	r.store.SetSlice(stamp(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2")), r.clock.now()))
	r.sync(false)
	r.store.SetService(service("web", "10.96.0.10", corev1.ProtocolTCP, 80))
	r.sync(false)
	if got, want := programming(t, reg), "IPv4 n=2 sum=5s;"; got != want {
		t.Fatalf("an invalid Service's change was measured: %q, want %q", got, want)
	}
}

// expectDumpHas fails unless the fake kernel holds the line.
func (r *rig) expectDumpHas(t *testing.T, line string) {
	t.Helper()
	for _, l := range strings.Split(r.fake.Dump(), "\n") {
		if l == line {
			return
		}
	}
	t.Fatalf("kernel lacks %q:\n%s", line, r.fake.Dump())
}

func TestNoLocalEndpointsAfterASync(t *testing.T) {
	r := newRig(t)
	reg := r.withMetrics()
	local := corev1.ServiceInternalTrafficPolicyLocal
	web := service("web", "10.96.0.10", corev1.ProtocolTCP, 80)
	web.Spec.InternalTrafficPolicy = &local
	r.store.SetService(web)
	r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, onNoNode("10.244.2.2"))) // never local
	r.sync(false)
	want := `kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="external"} 0
kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="internal"} 1
kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv6",traffic_policy="external"} 0
kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv6",traffic_policy="internal"} 0
`
	if got := scrape(t, reg, metrics.NoLocalEndpoints); got != want {
		t.Fatalf("got:\n%swant:\n%s", got, want)
	}
	r.store.DeleteService(model.ServiceName{Namespace: "default", Name: "web"})
	r.sync(false)
	if got := scrape(t, reg, metrics.NoLocalEndpoints); got == want {
		t.Fatalf("a deleted Service is still counted:\n%s", got)
	}
}

func TestIptablesRestoreFailuresByFamily(t *testing.T) {
	r := newRig(t)
	reg := r.withMetrics()
	r.webAndDNS()
	r.fake.FailNext("EnsureShim", fmt.Errorf("write iptables rules: %w", &dataplane.RestoreError{IPv6: true, Err: errors.New("ip6tables-restore: exit status 4")}))
	if _, err := r.rec.Sync(context.Background(), true); err == nil {
		t.Fatal("sync succeeded")
	}
	want := "kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family=\"IPv6\"} 1\n"
	if got := scrape(t, reg, metrics.IptablesRestoreFailures); got != want {
		t.Fatalf("got %swant %s", got, want)
	}
}
