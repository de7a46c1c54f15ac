package reconciler

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/metrics"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// withMetrics replaces the rig's reconciler by one feeding a fresh registry,
// as the agent wires it (the table read at scrape time).
func (r *rig) withMetrics() *prometheus.Registry {
	r.t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, dualStack)
	if err != nil {
		r.t.Fatal(err)
	}
	opt := r.options()
	opt.Metrics = m
	r.rec = New(opt)
	if err := r.rec.Init(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	reg.MustRegister(metrics.NewTable(func() metrics.Table { return r.rec.View().Table() }))
	return reg
}

// scrape renders the named families as sorted `name{labels} value` lines;
// histograms as their sample count (`name_count`).
func scrape(t *testing.T, reg *prometheus.Registry, names ...string) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, mf := range mfs {
		if !slices.Contains(names, mf.GetName()) {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			name := mf.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			var v float64
			switch {
			case m.GetHistogram() != nil:
				name, v = mf.GetName()+"_count", float64(m.GetHistogram().GetSampleCount())
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			default:
				v = m.GetGauge().GetValue()
			}
			if mf.GetName() == metrics.Operations && v == 0 {
				continue // every kind starts at zero; the tests name the ones that moved
			}
			lines = append(lines, fmt.Sprintf("%s %g", name, v))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

var tableNames = []string{metrics.VirtualServers, metrics.RealServers, metrics.BoundVIPs, metrics.DrainingReals, metrics.InvalidServices,
	metrics.ServiceErrors, metrics.RefusedFrontends}

func TestMetricsAfterAFirstSync(t *testing.T) {
	r := newRig(t)
	reg := r.withMetrics()
	if n := testutil.CollectAndCount(reg, metrics.Operations); n != 20 {
		t.Fatalf("%d operation series before any sync, want 20 (10 kinds by 2 results)", n)
	}
	r.webAndDNS()
	r.sync(false)
	want := `kube_ipvs_bound_vips 2
kube_ipvs_draining_real_servers 0
kube_ipvs_invalid_services 0
kube_ipvs_operations_total{op="add-real",result="success"} 3
kube_ipvs_operations_total{op="add-service",result="success"} 2
kube_ipvs_operations_total{op="add-set-entry",result="success"} 9
kube_ipvs_operations_total{op="bind-addr",result="success"} 2
kube_ipvs_real_servers 3
kube_ipvs_refused_frontends 0
kube_ipvs_service_errors 0
kube_ipvs_services_translated_total 2
kube_ipvs_sync_duration_seconds_count 1
kube_ipvs_sync_failures_total 0
kube_ipvs_virtual_servers 2
kubeproxy_sync_full_proxy_rules_duration_seconds_count 1
kubeproxy_sync_full_proxy_rules_duration_seconds_count 1
kubeproxy_sync_proxy_rules_duration_seconds_count 1
kubeproxy_sync_proxy_rules_duration_seconds_count 1
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 1.7e+09
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv6"} 1.7e+09
kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="external"} 0
kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="internal"} 0
kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv6",traffic_policy="external"} 0
kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv6",traffic_policy="internal"} 0
`
	got := scrape(t, reg, append(tableNames, metrics.Operations, metrics.ServicesTranslated, metrics.SyncFailures, metrics.OwnSyncDuration,
		metrics.SyncDuration, metrics.FullSyncDuration, metrics.PartialSyncDuration, metrics.LastSync, metrics.NoLocalEndpoints)...)
	if got != want {
		t.Fatalf("metrics:\n%s\nwant:\n%s", got, want)
	}
}

func TestMetricsFollowChanges(t *testing.T) {
	web := func(eps ...endpoint) func(r *rig) {
		return func(r *rig) { r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, eps...)) }
	}
	for _, tc := range []struct {
		name   string
		change func(r *rig)
		fail   string // a fake method failing once during the change's sync (one Service's failure: the sync is fine)
		want   string
	}{
		{
			name:   "three endpoints added",
			change: web(ready("10.244.1.2"), ready("10.244.2.2"), ready("10.244.3.2"), ready("10.244.3.3"), ready("10.244.3.4")),
			want: `kube_ipvs_bound_vips 2
kube_ipvs_draining_real_servers 0
kube_ipvs_invalid_services 0
kube_ipvs_operations_total{op="add-real",result="success"} 6
kube_ipvs_real_servers 6
kube_ipvs_refused_frontends 0
kube_ipvs_service_errors 0
kube_ipvs_sync_failures_total 0
kube_ipvs_virtual_servers 2
`,
		},
		{
			name:   "one add fails",
			change: web(ready("10.244.1.2"), ready("10.244.2.2"), ready("10.244.3.2")),
			fail:   "AddReal",
			want: `kube_ipvs_bound_vips 2
kube_ipvs_draining_real_servers 0
kube_ipvs_invalid_services 0
kube_ipvs_operations_total{op="add-real",result="error"} 1
kube_ipvs_operations_total{op="add-real",result="success"} 3
kube_ipvs_real_servers 3
kube_ipvs_refused_frontends 0
kube_ipvs_service_errors 1
kube_ipvs_sync_failures_total 0
kube_ipvs_virtual_servers 2
`,
		},
		{
			name:   "an endpoint with a connection drains",
			change: web(ready("10.244.1.2")),
			want: `kube_ipvs_bound_vips 2
kube_ipvs_draining_real_servers 1
kube_ipvs_invalid_services 0
kube_ipvs_operations_total{op="add-real",result="success"} 3
kube_ipvs_operations_total{op="update-real",result="success"} 1
kube_ipvs_real_servers 3
kube_ipvs_refused_frontends 0
kube_ipvs_service_errors 0
kube_ipvs_sync_failures_total 0
kube_ipvs_virtual_servers 2
`,
		},
		{
			name: "an invalid Service keeps its last good state",
			change: func(r *rig) {
				svc := service("web", "10.96.0.10", corev1.ProtocolTCP, 80)
				svc.Annotations = map[string]string{"kube-ipvs.io/scheduler": "fastest"}
				r.store.SetService(svc)
			},
			want: `kube_ipvs_bound_vips 2
kube_ipvs_draining_real_servers 0
kube_ipvs_invalid_services 1
kube_ipvs_operations_total{op="add-real",result="success"} 3
kube_ipvs_real_servers 3
kube_ipvs_refused_frontends 0
kube_ipvs_service_errors 0
kube_ipvs_sync_failures_total 0
kube_ipvs_virtual_servers 2
`,
		},
		{
			name:   "the web Service goes",
			change: func(r *rig) { r.store.DeleteService(model.ServiceName{Namespace: "default", Name: "web"}) },
			want: `kube_ipvs_bound_vips 1
kube_ipvs_draining_real_servers 0
kube_ipvs_invalid_services 0
kube_ipvs_operations_total{op="add-real",result="success"} 3
kube_ipvs_operations_total{op="delete-service",result="success"} 1
kube_ipvs_operations_total{op="unbind-addr",result="success"} 1
kube_ipvs_real_servers 1
kube_ipvs_refused_frontends 0
kube_ipvs_service_errors 0
kube_ipvs_sync_failures_total 0
kube_ipvs_virtual_servers 1
`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			reg := r.withMetrics()
			r.webAndDNS()
			r.sync(false)
			vs := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80)
			r.fake.SetConns(dataplane.RealRef{VS: vs, RS: netip.MustParseAddrPort("10.244.2.2:8080")}, model.Conns{Active: 1})
			if tc.fail != "" {
				r.fake.FailNext(tc.fail, errors.New("injected"))
			}
			tc.change(r)
			if _, err := r.rec.Sync(context.Background(), false); err != nil {
				t.Fatalf("sync: %v", err)
			}
			got := scrape(t, reg, append(tableNames, metrics.Operations, metrics.SyncFailures)...)
			// Only the real server, service and address kinds: the shim's
			// set members are counted the same way and asserted above.
			got = dropLines(got, "add-service", "add-set-entry", "delete-set-entry", "bind-addr")
			if got != tc.want {
				t.Fatalf("metrics:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func dropLines(s string, subs ...string) string {
	var out []string
	for _, l := range strings.SplitAfter(s, "\n") {
		if !slices.ContainsFunc(subs, func(sub string) bool { return strings.Contains(l, `"`+sub+`"`) }) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

func TestMetricsCountDeletedConntrackEntries(t *testing.T) {
	r := newRig(t)
	reg := r.withMetrics()
	r.webAndDNS()
	r.store.SetSlice(slice("dns", corev1.ProtocolUDP, 53, ready("10.244.1.3"), ready("10.244.2.3")))
	r.sync(false)
	r.fake.SetConntrack(model.UDP, netip.MustParseAddrPort("10.244.2.3:53"), 3)
	r.store.SetSlice(slice("dns", corev1.ProtocolUDP, 53, ready("10.244.1.3")))
	r.sync(false)
	want := `kube_ipvs_conntrack_entries_deleted_total 3
kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family="IPv4"} 3
kubeproxy_conntrack_reconciler_sync_duration_seconds_count 1
`
	if got := scrape(t, reg, metrics.ConntrackDeleted, metrics.ConntrackReconcileGone, metrics.ConntrackReconcile); got != want {
		t.Fatalf("got:\n%swant:\n%s", got, want)
	}
}

// A sync of a handful of operations is far below kube-proxy's bucket
// floors; the histogram must still tell such syncs apart.
func TestSyncDurationsHaveBucketsBelowAMillisecond(t *testing.T) {
	r := newRig(t)
	step := 150 * time.Microsecond
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, model.Families{IPv4: true})
	if err != nil {
		t.Fatal(err)
	}
	opt := r.options()
	opt.Metrics = m
	opt.Now = func() time.Time { r.clock.advance(step); return r.clock.now() }
	r.rec = New(opt)
	r.webAndDNS()
	r.sync(false)
	r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2")))
	r.sync(false)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metrics.OwnSyncDuration {
			continue
		}
		// One full sync and one partial: a series each.
		var count uint64
		var sum float64
		under := map[float64]uint64{}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			count, sum = count+h.GetSampleCount(), sum+h.GetSampleSum()
			for _, b := range h.GetBucket() {
				if b.GetUpperBound() <= 0.001 {
					under[b.GetUpperBound()] += b.GetCumulativeCount()
				}
			}
		}
		full := 0
		for _, n := range under {
			if n == 2 {
				full++
			}
		}
		if count != 2 || full == 0 || sum >= 0.001 {
			t.Fatalf("2 syncs of %v each: count %d, sum %gs, %d buckets up to 1 ms hold both", step, count, sum, full)
		}
		return
	}
	t.Fatal("no sync duration histogram")
}
