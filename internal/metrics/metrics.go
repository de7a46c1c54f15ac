// Package metrics holds the agent's Prometheus collectors. They live on a
// registry the caller injects (never the global default one), so tests and
// several agents in one process do not share counters.
//
// Names follow kube-proxy's (pkg/proxy/metrics) where the meaning is the
// same, so dashboards and alerts written for a kube-proxy IPVS node carry
// over; what kube-proxy has no word for is named kube_ipvs_*.
package metrics

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, for tests and documentation.
const (
	SyncDuration        = "kubeproxy_sync_proxy_rules_duration_seconds"
	FullSyncDuration    = "kubeproxy_sync_full_proxy_rules_duration_seconds"
	PartialSyncDuration = "kubeproxy_sync_partial_proxy_rules_duration_seconds"
	LastSync            = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"
	LastQueued          = "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds"
	SyncFailures        = "kube_ipvs_sync_failures_total"
	ServicesTranslated  = "kube_ipvs_services_translated_total"
	Operations          = "kube_ipvs_operations_total"
	ConntrackDeleted    = "kube_ipvs_conntrack_entries_deleted_total"
	VirtualServers      = "kube_ipvs_virtual_servers"
	RealServers         = "kube_ipvs_real_servers"
	BoundVIPs           = "kube_ipvs_bound_vips"
	DrainingReals       = "kube_ipvs_draining_real_servers"
	InvalidServices     = "kube_ipvs_invalid_services"
	ServiceErrors       = "kube_ipvs_service_errors"
	RefusedFrontends    = "kube_ipvs_refused_frontends"
)

// Operation results, the values of kube_ipvs_operations_total's result label.
const (
	ResultSuccess = "success"
	ResultError   = "error"
)

// DurationBuckets bound the sync duration histograms: 50 µs to 26 s,
// doubling. kube-proxy starts at 1 ms (and its programming latency at
// 0.25 s), but an incremental sync here sends a handful of netlink messages
// and takes well under a millisecond: a coarser floor would put every
// incremental sync in the first bucket and hide regressions.
var DurationBuckets = prometheus.ExponentialBuckets(50e-6, 2, 20)

// Metrics are the collectors a reconciler feeds. A nil *Metrics is valid
// and records nothing, so code paths without metrics (dry runs, cleanup,
// tests) need no checks.
type Metrics struct {
	syncDuration    prometheus.Histogram
	fullDuration    prometheus.Histogram
	partialDuration prometheus.Histogram
	lastSync        prometheus.Gauge
	lastQueued      prometheus.Gauge
	syncFailures    prometheus.Counter
	translated      prometheus.Counter
	ops             *prometheus.CounterVec
	conntrack       prometheus.Counter
}

// New creates the collectors and registers them on reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	hist := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: DurationBuckets})
	}
	m := &Metrics{
		syncDuration:    hist(SyncDuration, "Duration of one sync of the IPVS table, full or partial, in seconds."),
		fullDuration:    hist(FullSyncDuration, "Duration of one full sync (kernel re-read, everything diffed), in seconds."),
		partialDuration: hist(PartialSyncDuration, "Duration of one partial sync (only the changed Services diffed), in seconds."),
		lastSync: prometheus.NewGauge(prometheus.GaugeOpts{Name: LastSync,
			Help: "The last time a sync succeeded, in seconds since the epoch."}),
		lastQueued: prometheus.NewGauge(prometheus.GaugeOpts{Name: LastQueued,
			Help: "The last time a change asked for a sync, in seconds since the epoch. Much later than the last sync means syncs are stuck."}),
		syncFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: SyncFailures,
			Help: "Syncs that returned an error (the runner retries them with a full sync)."}),
		translated: prometheus.NewCounter(prometheus.CounterOpts{Name: ServicesTranslated,
			Help: "Services translated to virtual servers, summed over syncs: the work the changes caused."}),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: Operations,
			Help: "Operations sent to the kernel, by kind (add-real, bind-addr, ...) and result (success, error)."},
			[]string{"op", "result"}),
		conntrack: prometheus.NewCounter(prometheus.CounterOpts{Name: ConntrackDeleted,
			Help: "Conntrack entries deleted for removed UDP real servers and for UDP frontends that got their first endpoint."}),
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.syncDuration, m.fullDuration, m.partialDuration,
		m.lastSync, m.lastQueued, m.syncFailures, m.translated, m.ops, m.conntrack} {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	return m, nil
}

// Sync is what a finished sync reports.
type Sync struct {
	End      time.Time
	Duration time.Duration
	Full     bool
	Failed   bool
	Services int // Services translated
}

// ObserveSync records one finished sync.
func (m *Metrics) ObserveSync(s Sync) {
	if m == nil {
		return
	}
	d := s.Duration.Seconds()
	m.syncDuration.Observe(d)
	if s.Full {
		m.fullDuration.Observe(d)
	} else {
		m.partialDuration.Observe(d)
	}
	m.translated.Add(float64(s.Services))
	if s.Failed {
		m.syncFailures.Inc()
		return
	}
	m.lastSync.Set(unixSeconds(s.End))
}

// Queued records that a change asked for a sync at t.
func (m *Metrics) Queued(t time.Time) {
	if m == nil {
		return
	}
	m.lastQueued.Set(unixSeconds(t))
}

// KnownOps creates the operation series of these kinds at zero, so that a
// rate over them exists from the agent's start (an agent restarted against
// an unchanged cluster sends nothing for hours).
func (m *Metrics) KnownOps(kinds ...string) {
	if m == nil {
		return
	}
	for _, k := range kinds {
		m.ops.WithLabelValues(k, ResultSuccess)
		m.ops.WithLabelValues(k, ResultError)
	}
}

// Op records one operation sent to the kernel; err is its outcome.
func (m *Metrics) Op(kind string, err error) {
	if m == nil {
		return
	}
	result := ResultSuccess
	if err != nil {
		result = ResultError
	}
	m.ops.WithLabelValues(kind, result).Inc()
}

// ConntrackDeleted records n conntrack entries deleted.
func (m *Metrics) ConntrackDeleted(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.conntrack.Add(float64(n))
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
