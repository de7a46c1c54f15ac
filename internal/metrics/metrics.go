// Package metrics holds the agent's Prometheus collectors. They live on a
// registry the caller injects (never the global default one), so tests and
// several agents in one process do not share counters.
//
// The kubeproxy_* families are kube-proxy's (kubeproxy.go): same names,
// help, labels and buckets as its IPVS mode serves them, so dashboards and
// alerts written for a kube-proxy IPVS node carry over. client-go's
// rest_client_* families (restclient.go) and the build info (buildinfo.go)
// are served as kube-proxy serves them too. What kube-proxy has no word for
// is named kube_ipvs_*.
package metrics

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// The agent's own metric names, for tests and documentation.
const (
	OwnSyncDuration    = "kube_ipvs_sync_duration_seconds"
	SyncFailures       = "kube_ipvs_sync_failures_total"
	ServicesTranslated = "kube_ipvs_services_translated_total"
	Operations         = "kube_ipvs_operations_total"
	ConntrackDeleted   = "kube_ipvs_conntrack_entries_deleted_total"
	VirtualServers     = "kube_ipvs_virtual_servers"
	RealServers        = "kube_ipvs_real_servers"
	BoundVIPs          = "kube_ipvs_bound_vips"
	DrainingReals      = "kube_ipvs_draining_real_servers"
	InvalidServices    = "kube_ipvs_invalid_services"
	ServiceErrors      = "kube_ipvs_service_errors"
	RefusedFrontends   = "kube_ipvs_refused_frontends"
)

// Label values of the agent's own metrics.
const (
	// ResultSuccess and ResultError are kube_ipvs_operations_total's result.
	ResultSuccess = "success"
	ResultError   = "error"
	// KindFull and KindPartial are kube_ipvs_sync_duration_seconds' kind.
	KindFull    = "full"
	KindPartial = "partial"
)

// DurationBuckets bound kube_ipvs_sync_duration_seconds: 50 µs to 26 s,
// doubling. kube-proxy's sync histograms (served with its buckets) start at
// 1 ms, but an incremental sync here sends a handful of netlink messages
// and takes well under a millisecond: kube-proxy's floor puts every
// incremental sync in its first bucket and would hide regressions.
var DurationBuckets = prometheus.ExponentialBuckets(50e-6, 2, 20)

// Metrics are the collectors a reconciler and the health server feed. A nil
// *Metrics is valid and records nothing, so code paths without metrics (dry
// runs, cleanup, tests) need no checks.
type Metrics struct {
	families     model.Families
	kp           kubeProxy
	syncDuration *prometheus.HistogramVec
	syncFailures prometheus.Counter
	translated   prometheus.Counter
	ops          *prometheus.CounterVec
	conntrack    prometheus.Counter
}

// New creates the collectors and registers them on reg. families are the
// ones the agent serves: kube-proxy runs one proxier per family and labels
// its series with it (ip_family), so each sync is recorded once per family
// served, as a dual-stack kube-proxy records one sync of each proxier.
func New(reg prometheus.Registerer, families model.Families) (*Metrics, error) {
	m := &Metrics{
		families: families,
		kp:       newKubeProxy(),
		syncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: OwnSyncDuration,
			Help:    "Duration of one sync of the IPVS table, by kind: full (kernel re-read, everything diffed) or partial (only the changed Services), in seconds.",
			Buckets: DurationBuckets}, []string{"kind"}),
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
	for _, c := range append(m.kp.collectors(), m.syncDuration, m.syncFailures, m.translated, m.ops, m.conntrack) {
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

// ObserveSync records one finished sync. Like kube-proxy it observes the
// duration of every sync, failed or not, and moves the last-sync time only
// on success.
func (m *Metrics) ObserveSync(s Sync) {
	if m == nil {
		return
	}
	d := s.Duration.Seconds()
	kind, byKind := KindPartial, m.kp.partialDuration
	if s.Full {
		kind, byKind = KindFull, m.kp.fullDuration
	}
	m.syncDuration.WithLabelValues(kind).Observe(d)
	for _, f := range families(m.families) {
		m.kp.syncDuration.WithLabelValues(f).Observe(d)
		byKind.WithLabelValues(f).Observe(d)
	}
	m.translated.Add(float64(s.Services))
	if s.Failed {
		m.syncFailures.Inc()
		return
	}
	for _, f := range families(m.families) {
		m.kp.lastSync.WithLabelValues(f).Set(unixSeconds(s.End))
	}
}

// Queued records that a change asked for a sync at t.
func (m *Metrics) Queued(t time.Time) {
	if m == nil {
		return
	}
	for _, f := range families(m.families) {
		m.kp.lastQueued.WithLabelValues(f).Set(unixSeconds(t))
	}
}

// NetworkProgrammed records one network programming latency: from an
// EndpointSlice change (its endpoints.kubernetes.io/last-change-trigger-time)
// to the end of the sync that put it in the kernel. ipv6 is the slice's
// address family; a family the agent does not serve is not recorded, as a
// single-stack kube-proxy ignores slices of the other family.
func (m *Metrics) NetworkProgrammed(ipv6 bool, latency time.Duration) {
	if m == nil || !m.serves(ipv6) {
		return
	}
	m.kp.programming.WithLabelValues(family(ipv6)).Observe(latency.Seconds())
}

// NoLocal counts, by family ([0] IPv4, [1] IPv6), the Services with a Local
// traffic policy that have usable endpoints but none on this node: for
// internalTrafficPolicy (Internal) and externalTrafficPolicy (External).
type NoLocal struct {
	Internal, External [2]int
}

// SetNoLocalEndpoints sets kube-proxy's no-local-endpoints gauges, as it
// does after each successful sync, for each family served.
func (m *Metrics) SetNoLocalEndpoints(n NoLocal) {
	if m == nil {
		return
	}
	for i, ipv6 := range []bool{false, true} {
		if !m.serves(ipv6) {
			continue
		}
		m.kp.noLocal.WithLabelValues(PolicyInternal, family(ipv6)).Set(float64(n.Internal[i]))
		m.kp.noLocal.WithLabelValues(PolicyExternal, family(ipv6)).Set(float64(n.External[i]))
	}
}

// RestoreFailed records a failed iptables-restore of the netfilter shim's
// rules of one family.
func (m *Metrics) RestoreFailed(ipv6 bool) {
	if m == nil {
		return
	}
	m.kp.restoreFailures.WithLabelValues(family(ipv6)).Inc()
}

// ConntrackReconciled records one round of stale UDP conntrack entry
// deletion for one family: how long it took and how many entries went.
func (m *Metrics) ConntrackReconciled(ipv6 bool, took time.Duration, deleted int) {
	if m == nil {
		return
	}
	m.kp.conntrackDuration.WithLabelValues(family(ipv6)).Observe(took.Seconds())
	m.kp.conntrackDeleted.WithLabelValues(family(ipv6)).Add(float64(max(deleted, 0)))
}

// Healthz counts one answer of the health server's /healthz by its HTTP
// status code (kube-proxy answers 200 or 503).
func (m *Metrics) Healthz(code int) {
	if m == nil {
		return
	}
	m.kp.healthz.WithLabelValues(strconv.Itoa(code)).Inc()
}

// Livez counts one answer of the health server's /livez by its HTTP status
// code.
func (m *Metrics) Livez(code int) {
	if m == nil {
		return
	}
	m.kp.livez.WithLabelValues(strconv.Itoa(code)).Inc()
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

// Ops records a batch of operations of one kind: ok succeeded, failed did
// not (one label lookup for the batch, not one per operation).
func (m *Metrics) Ops(kind string, ok, failed int) {
	if m == nil {
		return
	}
	if ok > 0 {
		m.ops.WithLabelValues(kind, ResultSuccess).Add(float64(ok))
	}
	if failed > 0 {
		m.ops.WithLabelValues(kind, ResultError).Add(float64(failed))
	}
}

// ConntrackDeleted records n conntrack entries deleted.
func (m *Metrics) ConntrackDeleted(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.conntrack.Add(float64(n))
}

func (m *Metrics) serves(ipv6 bool) bool {
	if ipv6 {
		return m.families.IPv6
	}
	return m.families.IPv4
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
