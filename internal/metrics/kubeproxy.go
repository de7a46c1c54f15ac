package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// The metrics kube-proxy v1.37's IPVS mode registers (pkg/proxy/metrics,
// RegisterMetrics with mode ipvs), by the names, help texts, labels and
// buckets it serves them under, so that the kubernetes-mixin "Proxy"
// dashboard, its alerts and any query written against a kube-proxy node
// read a kube-ipvs node unchanged. kube-proxy builds them with
// k8s.io/component-base, which prefixes each help text with the metric's
// stability level ("[ALPHA] "): the prefix is part of what it serves.
const (
	SyncDuration            = "kubeproxy_sync_proxy_rules_duration_seconds"
	LastSync                = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"
	LastQueued              = "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds"
	NetworkProgramming      = "kubeproxy_network_programming_duration_seconds"
	EndpointChangesPending  = "kubeproxy_sync_proxy_rules_endpoint_changes_pending"
	EndpointChanges         = "kubeproxy_sync_proxy_rules_endpoint_changes_total"
	ServiceChangesPending   = "kubeproxy_sync_proxy_rules_service_changes_pending"
	ServiceChanges          = "kubeproxy_sync_proxy_rules_service_changes_total"
	NoLocalEndpoints        = "kubeproxy_sync_proxy_rules_no_local_endpoints_total"
	HealthzTotal            = "kubeproxy_proxy_healthz_total"
	LivezTotal              = "kubeproxy_proxy_livez_total"
	IptablesRestoreFailures = "kubeproxy_sync_proxy_rules_iptables_restore_failures_total"
	ConntrackReconcile      = "kubeproxy_conntrack_reconciler_sync_duration_seconds"
	ConntrackReconcileGone  = "kubeproxy_conntrack_reconciler_deleted_entries_total"

	// Full and partial sync durations are registered by kube-proxy's
	// iptables and nftables modes, not its IPVS mode. The agent's syncs are
	// full or partial as theirs are, so it serves them too, defined as
	// those modes define them.
	FullSyncDuration    = "kubeproxy_sync_full_proxy_rules_duration_seconds"
	PartialSyncDuration = "kubeproxy_sync_partial_proxy_rules_duration_seconds"
)

// Label names and values kube-proxy uses.
const (
	LabelFamily        = "ip_family"
	LabelTrafficPolicy = "traffic_policy"
	LabelCode          = "code"

	// PolicyInternal and PolicyExternal are the traffic_policy values of
	// the no-local-endpoints gauge: internalTrafficPolicy Local (ClusterIPs)
	// and externalTrafficPolicy Local (NodePorts, external and
	// load-balancer IPs).
	PolicyInternal = "internal"
	PolicyExternal = "external"
)

// family is kube-proxy's ip_family label value: v1.IPFamily's spelling.
func family(ipv6 bool) string {
	if ipv6 {
		return "IPv6"
	}
	return "IPv4"
}

// families lists the label values of the families served, IPv4 first.
func families(f model.Families) []string {
	var out []string
	if f.IPv4 {
		out = append(out, family(false))
	}
	if f.IPv6 {
		out = append(out, family(true))
	}
	return out
}

// kubeProxySyncBuckets are kube-proxy's sync duration buckets: 1 ms to
// 16 s, doubling (metrics.ExponentialBuckets(0.001, 2, 15)).
var kubeProxySyncBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)

// NetworkProgrammingBuckets are kube-proxy's: 0.25 s and 0.5 s, each second
// to 59 s, every 5 s to 115 s, every 30 s to 5 min. kube-proxy merges its
// ranges onto a slice that starts with a 0 bucket, and serves that bucket
// too.
var NetworkProgrammingBuckets = func() []float64 {
	out := []float64{0}
	out = append(out, prometheus.LinearBuckets(0.25, 0.25, 2)...)
	out = append(out, prometheus.LinearBuckets(1, 1, 59)...)
	out = append(out, prometheus.LinearBuckets(60, 5, 12)...)
	return append(out, prometheus.LinearBuckets(120, 30, 7)...)
}()

// kubeProxy are the collectors of kube-proxy's names the reconciler and the
// health server feed. The change counters and gauges are read from the
// store at scrape time (ChangesCollector).
type kubeProxy struct {
	syncDuration, fullDuration, partialDuration *prometheus.HistogramVec
	lastSync, lastQueued                        *prometheus.GaugeVec
	programming                                 *prometheus.HistogramVec
	noLocal                                     *prometheus.GaugeVec
	healthz, livez                              *prometheus.CounterVec
	restoreFailures                             *prometheus.CounterVec
	conntrackDuration                           *prometheus.HistogramVec
	conntrackDeleted                            *prometheus.CounterVec
}

func newKubeProxy() kubeProxy {
	byFamily := []string{LabelFamily}
	hist := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: "[ALPHA] " + help, Buckets: buckets}, byFamily)
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: "[ALPHA] " + help}, labels)
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: "[ALPHA] " + help}, labels)
	}
	return kubeProxy{
		syncDuration:      hist(SyncDuration, "SyncProxyRules latency in seconds", kubeProxySyncBuckets),
		fullDuration:      hist(FullSyncDuration, "SyncProxyRules latency in seconds for full resyncs", kubeProxySyncBuckets),
		partialDuration:   hist(PartialSyncDuration, "SyncProxyRules latency in seconds for partial resyncs", kubeProxySyncBuckets),
		lastSync:          gauge(LastSync, "The last time proxy rules were successfully synced", LabelFamily),
		lastQueued:        gauge(LastQueued, "The last time a sync of proxy rules was queued", LabelFamily),
		programming:       hist(NetworkProgramming, "In Cluster Network Programming Latency in seconds", NetworkProgrammingBuckets),
		noLocal:           gauge(NoLocalEndpoints, "Number of services with a Local traffic policy and no endpoints", LabelTrafficPolicy, LabelFamily),
		healthz:           counter(HealthzTotal, "Cumulative proxy healthz HTTP status", LabelCode),
		livez:             counter(LivezTotal, "Cumulative proxy livez HTTP status", LabelCode),
		restoreFailures:   counter(IptablesRestoreFailures, "Cumulative proxy iptables restore failures", LabelFamily),
		conntrackDuration: hist(ConntrackReconcile, "ReconcileConntrackFlowsLatency latency in seconds", kubeProxySyncBuckets),
		conntrackDeleted:  counter(ConntrackReconcileGone, "Cumulative conntrack flows deleted by conntrack reconciler", LabelFamily),
	}
}

func (k kubeProxy) collectors() []prometheus.Collector {
	return []prometheus.Collector{k.syncDuration, k.fullDuration, k.partialDuration, k.lastSync, k.lastQueued,
		k.programming, k.noLocal, k.healthz, k.livez, k.restoreFailures, k.conntrackDuration, k.conntrackDeleted}
}
