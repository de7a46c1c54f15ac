package metrics

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

var dualStack = model.Families{IPv4: true, IPv6: true}

func newMetrics(t *testing.T, f model.Families) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := New(reg, f)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

func TestSyncsAreRecordedPerFamilyAndFailuresKeepTheLastGoodTime(t *testing.T) {
	m, reg := newMetrics(t, dualStack)
	good := time.Unix(1_700_000_000, 0)
	m.ObserveSync(Sync{End: good, Duration: 120 * time.Microsecond, Full: true, Services: 3})
	m.ObserveSync(Sync{End: good.Add(time.Second), Duration: 80 * time.Microsecond, Services: 1})
	m.ObserveSync(Sync{End: good.Add(2 * time.Second), Duration: time.Millisecond, Failed: true})
	m.Queued(good.Add(3 * time.Second))
	want := `
# HELP kube_ipvs_sync_failures_total Syncs that returned an error (the runner retries them with a full sync).
# TYPE kube_ipvs_sync_failures_total counter
kube_ipvs_sync_failures_total 1
# HELP kube_ipvs_services_translated_total Services translated to virtual servers, summed over syncs: the work the changes caused.
# TYPE kube_ipvs_services_translated_total counter
kube_ipvs_services_translated_total 4
# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds [ALPHA] The last time proxy rules were successfully synced
# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 1.700000001e+09
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv6"} 1.700000001e+09
# HELP kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds [ALPHA] The last time a sync of proxy rules was queued
# TYPE kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"} 1.700000003e+09
kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv6"} 1.700000003e+09
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), SyncFailures, ServicesTranslated, LastSync, LastQueued); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		labels string
		want   uint64
	}{
		{SyncDuration, `ip_family="IPv4"`, 3},
		{SyncDuration, `ip_family="IPv6"`, 3},
		{FullSyncDuration, `ip_family="IPv6"`, 1},
		{PartialSyncDuration, `ip_family="IPv4"`, 2},
		{OwnSyncDuration, `kind="full"`, 1},
		{OwnSyncDuration, `kind="partial"`, 2},
	} {
		if got := histogram(t, reg, tc.name, tc.labels).GetSampleCount(); got != tc.want {
			t.Errorf("%s{%s} count %d, want %d", tc.name, tc.labels, got, tc.want)
		}
	}
}

func TestSyncDurationHasKubeProxysBucketsAndOursFinerOnes(t *testing.T) {
	m, reg := newMetrics(t, model.Families{IPv4: true})
	m.ObserveSync(Sync{Duration: 70 * time.Microsecond})
	// kube-proxy's buckets: 1 ms to 16.384 s, doubling.
	kp := histogram(t, reg, SyncDuration, `ip_family="IPv4"`).GetBucket()
	if len(kp) != 15 || kp[0].GetUpperBound() != 0.001 || kp[14].GetUpperBound() != 16.384 || kp[0].GetCumulativeCount() != 1 {
		t.Fatalf("kube-proxy's buckets: %v", kp)
	}
	var below int
	for _, b := range histogram(t, reg, OwnSyncDuration, `kind="partial"`).GetBucket() {
		if b.GetUpperBound() < 0.001 && b.GetCumulativeCount() == 1 {
			below++
		}
	}
	// 70 µs falls in the 100, 200, 400 and 800 µs buckets.
	if below != 4 {
		t.Fatalf("a 70 µs sync is counted in %d buckets under 1 ms, want 4", below)
	}
}

func TestNetworkProgrammingIsObservedPerServedFamily(t *testing.T) {
	m, reg := newMetrics(t, model.Families{IPv4: true})
	m.NetworkProgrammed(false, 1500*time.Millisecond)
	m.NetworkProgrammed(true, time.Second) // not served: a single-stack kube-proxy ignores IPv6 slices
	if got := testutil.CollectAndCount(reg, NetworkProgramming); got != 1 {
		t.Fatalf("%d series, want IPv4's alone", got)
	}
	h := histogram(t, reg, NetworkProgramming, `ip_family="IPv4"`)
	if h.GetSampleCount() != 1 || h.GetSampleSum() != 1.5 {
		t.Fatalf("count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
	}
	// kube-proxy's buckets, its leading 0 included: 1.5 s is first counted
	// in the 2 s bucket.
	b := h.GetBucket()
	if len(b) != len(NetworkProgrammingBuckets) || b[0].GetUpperBound() != 0 || b[3].GetUpperBound() != 1 ||
		b[3].GetCumulativeCount() != 0 || b[4].GetCumulativeCount() != 1 || b[len(b)-1].GetUpperBound() != 300 {
		t.Fatalf("buckets %v", b)
	}
}

func TestKubeProxysOtherFamilies(t *testing.T) {
	m, reg := newMetrics(t, model.Families{IPv4: true})
	m.SetNoLocalEndpoints(NoLocal{Internal: [2]int{2, 9}, External: [2]int{1, 9}})
	m.RestoreFailed(false)
	m.ConntrackReconciled(false, 3*time.Millisecond, 4)
	m.Healthz(200)
	m.Healthz(503)
	m.Healthz(200)
	m.Livez(200)
	want := `
# HELP kubeproxy_sync_proxy_rules_no_local_endpoints_total [ALPHA] Number of services with a Local traffic policy and no endpoints
# TYPE kubeproxy_sync_proxy_rules_no_local_endpoints_total gauge
kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="external"} 1
kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="internal"} 2
# HELP kubeproxy_sync_proxy_rules_iptables_restore_failures_total [ALPHA] Cumulative proxy iptables restore failures
# TYPE kubeproxy_sync_proxy_rules_iptables_restore_failures_total counter
kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family="IPv4"} 1
# HELP kubeproxy_conntrack_reconciler_deleted_entries_total [ALPHA] Cumulative conntrack flows deleted by conntrack reconciler
# TYPE kubeproxy_conntrack_reconciler_deleted_entries_total counter
kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family="IPv4"} 4
# HELP kubeproxy_proxy_healthz_total [ALPHA] Cumulative proxy healthz HTTP status
# TYPE kubeproxy_proxy_healthz_total counter
kubeproxy_proxy_healthz_total{code="200"} 2
kubeproxy_proxy_healthz_total{code="503"} 1
# HELP kubeproxy_proxy_livez_total [ALPHA] Cumulative proxy livez HTTP status
# TYPE kubeproxy_proxy_livez_total counter
kubeproxy_proxy_livez_total{code="200"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), NoLocalEndpoints, IptablesRestoreFailures, ConntrackReconcileGone, HealthzTotal, LivezTotal); err != nil {
		t.Fatal(err)
	}
	if got := histogram(t, reg, ConntrackReconcile, `ip_family="IPv4"`).GetSampleSum(); got != 0.003 {
		t.Errorf("conntrack round took %v s, want 0.003", got)
	}
}

func TestOperationsByKindAndResult(t *testing.T) {
	m, reg := newMetrics(t, model.Families{IPv4: true})
	for range 3 {
		m.Op("add-real", nil)
	}
	m.Op("add-service", errors.New("file exists"))
	m.ConntrackDeleted(2)
	m.ConntrackDeleted(0)
	want := `
# HELP kube_ipvs_operations_total Operations sent to the kernel, by kind (add-real, bind-addr, ...) and result (success, error).
# TYPE kube_ipvs_operations_total counter
kube_ipvs_operations_total{op="add-real",result="success"} 3
kube_ipvs_operations_total{op="add-service",result="error"} 1
# HELP kube_ipvs_conntrack_entries_deleted_total Conntrack entries deleted for removed UDP real servers and for UDP frontends that got their first endpoint.
# TYPE kube_ipvs_conntrack_entries_deleted_total counter
kube_ipvs_conntrack_entries_deleted_total 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), Operations, ConntrackDeleted); err != nil {
		t.Fatal(err)
	}
}

func TestNilMetricsRecordNothing(t *testing.T) {
	var m *Metrics
	m.ObserveSync(Sync{Full: true})
	m.Op("add-real", nil)
	m.ConntrackDeleted(1)
	m.Queued(time.Now())
	m.NetworkProgrammed(false, time.Second)
	m.SetNoLocalEndpoints(NoLocal{})
	m.RestoreFailed(true)
	m.ConntrackReconciled(false, time.Second, 1)
	m.Healthz(200)
	m.Livez(503)
}

func TestRegisteringTwiceOnOneRegistryFails(t *testing.T) {
	_, reg := newMetrics(t, model.Families{IPv4: true})
	if _, err := New(reg, model.Families{IPv4: true}); err == nil {
		t.Fatal("second registration succeeded")
	}
}

func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := Build{Version: "v0.4.1-3-gabcdef", Commit: "abcdef", TreeState: "clean", Date: "2026-01-02T03:04:05Z",
		GoVersion: "go1.26", Compiler: "gc", Platform: "linux/amd64"}
	if err := RegisterBuildInfo(reg, b); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP kubernetes_build_info [BETA] A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.
# TYPE kubernetes_build_info gauge
kubernetes_build_info{build_date="2026-01-02T03:04:05Z",compiler="gc",git_commit="abcdef",git_tree_state="clean",git_version="v0.4.1-3-gabcdef",go_version="go1.26",major="0",minor="4",platform="linux/amd64"} 1
# HELP kube_ipvs_build_info A metric with a constant '1' value labeled by the kube-ipvs version, the commit it was built from and the Go version.
# TYPE kube_ipvs_build_info gauge
kube_ipvs_build_info{git_commit="abcdef",go_version="go1.26",version="v0.4.1-3-gabcdef"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), KubernetesBuildInfo, BuildInfo); err != nil {
		t.Fatal(err)
	}
	if got := BuildOf("dev"); got.Version != "dev" || got.GoVersion == "" || !strings.Contains(got.Platform, "/") {
		t.Fatalf("BuildOf: %+v", got)
	}
}

func TestTableIsReadAtScrape(t *testing.T) {
	tab := Table{VirtualServers: 2}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewTable(func() Table { return tab }))
	tab = Table{VirtualServers: 3, RealServers: 5, BoundVIPs: 2, Draining: 1, Invalid: 1}
	for name, want := range map[string]float64{VirtualServers: 3, RealServers: 5, BoundVIPs: 2, DrainingReals: 1, InvalidServices: 1} {
		if got := gather(t, reg, name).GetMetric()[0].GetGauge().GetValue(); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

func gather(t *testing.T, reg *prometheus.Registry, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	t.Fatalf("%s not gathered", name)
	return nil
}

// histogram finds the series of a histogram family whose labels, rendered
// as name="value" pairs joined by commas, are labels.
func histogram(t *testing.T, reg *prometheus.Registry, name, labels string) *dto.Histogram {
	t.Helper()
	for _, m := range gather(t, reg, name).GetMetric() {
		var ls []string
		for _, l := range m.GetLabel() {
			ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
		}
		if strings.Join(ls, ",") == labels {
			return m.GetHistogram()
		}
	}
	t.Fatalf("%s{%s} not gathered", name, labels)
	return nil
}
