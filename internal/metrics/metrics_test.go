package metrics

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

func newMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

func TestSyncsSplitByKindAndFailuresKeepTheLastGoodTime(t *testing.T) {
	m, reg := newMetrics(t)
	good := time.Unix(1_700_000_000, 0)
	m.ObserveSync(Sync{End: good, Duration: 120 * time.Microsecond, Full: true, Services: 3})
	m.ObserveSync(Sync{End: good.Add(time.Second), Duration: 80 * time.Microsecond, Services: 1})
	m.ObserveSync(Sync{End: good.Add(2 * time.Second), Duration: time.Millisecond, Failed: true})
	for _, tc := range []struct {
		name string
		want float64
	}{
		{SyncDuration, 3},
		{FullSyncDuration, 1},
		{PartialSyncDuration, 2},
	} {
		if got := testutil.CollectAndCount(reg, tc.name); got != 1 {
			t.Fatalf("%s: %d series", tc.name, got)
		}
		if got := histogramCount(t, reg, tc.name); got != tc.want {
			t.Errorf("%s count %v, want %v", tc.name, got, tc.want)
		}
	}
	want := `
# HELP kube_ipvs_sync_failures_total Syncs that returned an error (the runner retries them with a full sync).
# TYPE kube_ipvs_sync_failures_total counter
kube_ipvs_sync_failures_total 1
# HELP kube_ipvs_services_translated_total Services translated to virtual servers, summed over syncs: the work the changes caused.
# TYPE kube_ipvs_services_translated_total counter
kube_ipvs_services_translated_total 4
# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds The last time a sync succeeded, in seconds since the epoch.
# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_timestamp_seconds 1.700000001e+09
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), SyncFailures, ServicesTranslated, LastSync); err != nil {
		t.Fatal(err)
	}
}

func TestIncrementalSyncsLandBelowKubeProxysFloor(t *testing.T) {
	m, reg := newMetrics(t)
	m.ObserveSync(Sync{Duration: 70 * time.Microsecond})
	mf := gather(t, reg, PartialSyncDuration)
	var below int
	for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
		if b.GetUpperBound() < 0.001 && b.GetCumulativeCount() == 1 {
			below++
		}
	}
	// 70 µs falls in the 100, 200, 400 and 800 µs buckets.
	if below != 4 {
		t.Fatalf("a 70 µs sync is counted in %d buckets under 1 ms, want 4", below)
	}
}

func TestOperationsByKindAndResult(t *testing.T) {
	m, reg := newMetrics(t)
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
}

func TestRegisteringTwiceOnOneRegistryFails(t *testing.T) {
	_, reg := newMetrics(t)
	if _, err := New(reg); err == nil {
		t.Fatal("second registration succeeded")
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

func histogramCount(t *testing.T, reg *prometheus.Registry, name string) float64 {
	return float64(gather(t, reg, name).GetMetric()[0].GetHistogram().GetSampleCount())
}
