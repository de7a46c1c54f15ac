package metrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// client-go's metric names, as kube-proxy serves them.
const (
	RESTRequestDuration = "rest_client_request_duration_seconds"
	RESTRequests        = "rest_client_requests_total"
)

// restLatencyBuckets are the request and rate-limiter latency buckets
// kube-proxy's client-go adapter uses (component-base's restclient
// metrics), in seconds.
var (
	restLatencyBuckets = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0}
	restSizeBuckets    = []float64{64, 256, 512, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216}
	// certRotationBuckets: 10 min, 30 min, 1 h, 4 h, 1 d, 1 week, 1 month,
	// 3 and 6 months, 1 and 4 years.
	certRotationBuckets = []float64{600, 1800, 3600, 14400, 86400, 604800, 2592000, 7776000, 15552000, 31104000, 124416000}
)

// RESTClient are client-go's request metrics (rest_client_*), with the
// names, help texts, labels and buckets kube-proxy serves them under, on
// the agent's own registry: the kubernetes-mixin Proxy dashboard plots the
// request rate by code and the GET and POST latency. client-go reports to
// whatever its tools/metrics package was given; RegisterOpts hands it these
// collectors (Install).
type RESTClient struct {
	latency, rateLimiter, requestSize, responseSize *prometheus.HistogramVec
	results, retries                                *prometheus.CounterVec
	execCalls                                       *prometheus.CounterVec
	certRotation                                    prometheus.Histogram
	certTTL                                         prometheus.GaugeFunc
	transportEntries                                prometheus.Gauge
	transportCreates, caReloads, cacheGC            *prometheus.CounterVec
	certRotationGC                                  prometheus.Counter

	expiry atomic.Pointer[time.Time] // the exec plugin's client certificate's, if any
	now    func() time.Time
}

// NewRESTClient creates client-go's collectors and registers them on reg.
func NewRESTClient(reg prometheus.Registerer) (*RESTClient, error) {
	alpha := func(help string) string { return "[ALPHA] " + help }
	hist := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: alpha(help), Buckets: buckets}, []string{"verb", "host"})
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: alpha(help)}, labels)
	}
	c := &RESTClient{
		latency:      hist(RESTRequestDuration, "Request latency in seconds. Broken down by verb, and host.", restLatencyBuckets),
		rateLimiter:  hist("rest_client_rate_limiter_duration_seconds", "Client side rate limiter latency in seconds. Broken down by verb, and host.", restLatencyBuckets),
		requestSize:  hist("rest_client_request_size_bytes", "Request size in bytes. Broken down by verb and host.", restSizeBuckets),
		responseSize: hist("rest_client_response_size_bytes", "Response size in bytes. Broken down by verb and host.", restSizeBuckets),
		results:      counter(RESTRequests, "Number of HTTP requests, partitioned by status code, method, and host.", "code", "method", "host"),
		retries:      counter("rest_client_request_retries_total", "Number of request retries, partitioned by status code, verb, and host.", "code", "verb", "host"),
		execCalls: counter("rest_client_exec_plugin_call_total", "Number of calls to an exec plugin, partitioned by the type of "+
			"event encountered (no_error, plugin_execution_error, plugin_not_found_error, "+
			"client_internal_error) and an optional exit code. The exit code will "+
			"be set to 0 if and only if the plugin call was successful.", "code", "call_status"),
		certRotation: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rest_client_exec_plugin_certificate_rotation_age",
			Help: alpha("Histogram of the number of seconds the last auth exec " +
				"plugin client certificate lived before being rotated. " +
				"If auth exec plugin client certificates are unused, " +
				"histogram will contain no data."),
			Buckets: certRotationBuckets}),
		transportEntries: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rest_client_transport_cache_entries",
			Help: alpha("Number of transport entries in the internal cache.")}),
		transportCreates: counter("rest_client_transport_create_calls_total", "Number of calls to get a new transport, partitioned by the result of the operation "+
			"hit: obtained from the cache, miss: created and added to the cache, miss-gc: recreated and added back to the cache after being garbage collected, uncacheable: created and not cached", "result"),
		caReloads: counter("rest_client_transport_ca_reload_total", "Number of times a CA reload is attempted, partitioned by the result and reason for the reload attempt", "result", "reason"),
		certRotationGC: prometheus.NewCounter(prometheus.CounterOpts{Name: "rest_client_transport_cert_rotation_gc_calls_total",
			Help: alpha("Number of times a cert rotation goroutine cancel func is called via GC cleanup of the associated transport")}),
		cacheGC: counter("rest_client_transport_cache_gc_calls_total", "Number of times a GC cleanup attempts to delete a transport cache entry, partitioned by the result: deleted, skipped", "result"),
		now:     time.Now,
	}
	c.certTTL = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rest_client_exec_plugin_ttl_seconds",
		Help: alpha("Gauge of the shortest TTL (time-to-live) of the client " +
			"certificate(s) managed by the auth exec plugin. The value " +
			"is in seconds until certificate expiry (negative if " +
			"already expired). If auth exec plugins are unused or manage no " +
			"TLS certificates, the value will be +INF.")}, c.ttl)
	var errs []error
	for _, col := range []prometheus.Collector{c.latency, c.requestSize, c.responseSize, c.rateLimiter, c.results, c.retries,
		c.certTTL, c.certRotation, c.execCalls, c.transportEntries, c.transportCreates, c.caReloads, c.certRotationGC, c.cacheGC} {
		if err := reg.Register(col); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("register client-go metrics: %w", err)
	}
	return c, nil
}

// ttl is the exec plugin certificate's time to live, +Inf without one.
func (c *RESTClient) ttl() float64 {
	e := c.expiry.Load()
	if e == nil {
		return math.Inf(1)
	}
	return e.Sub(c.now()).Seconds()
}

// installed is the RESTClient client-go reports to (see Install).
var (
	installed    atomic.Pointer[RESTClient]
	registerOnce sync.Once
)

// Install makes c the receiver of client-go's reports in this process.
// client-go takes its adapters (tools/metrics.Register) once per process
// and keeps them in globals; the ones given it here forward each report to
// the RESTClient installed last, so a test, or an agent restarted in the
// same process, reads its own registry.
func (c *RESTClient) Install() {
	installed.Store(c)
	registerOnce.Do(func() { clientmetrics.Register(forwarders()) })
}

// forwarders are client-go's adapters, each forwarding to a collector of
// the installed RESTClient. The DNS resolver latency and the exec plugin
// policy calls stay client-go's no-ops: kube-proxy registers neither.
func forwarders() clientmetrics.RegisterOpts {
	return clientmetrics.RegisterOpts{
		ClientCertExpiry:             expiryAdapter{},
		ClientCertRotationAge:        durationAdapter{},
		RequestLatency:               latencyAdapter(func(c *RESTClient) *prometheus.HistogramVec { return c.latency }),
		RateLimiterLatency:           latencyAdapter(func(c *RESTClient) *prometheus.HistogramVec { return c.rateLimiter }),
		RequestSize:                  sizeAdapter(func(c *RESTClient) *prometheus.HistogramVec { return c.requestSize }),
		ResponseSize:                 sizeAdapter(func(c *RESTClient) *prometheus.HistogramVec { return c.responseSize }),
		RequestResult:                resultAdapter(func(c *RESTClient) *prometheus.CounterVec { return c.results }),
		RequestRetry:                 resultAdapter(func(c *RESTClient) *prometheus.CounterVec { return c.retries }),
		ExecPluginCalls:              callsAdapter{},
		TransportCacheEntries:        transportEntriesAdapter{},
		TransportCreateCalls:         labelAdapter(func(c *RESTClient) *prometheus.CounterVec { return c.transportCreates }),
		TransportCAReloads:           caReloadsAdapter{},
		TransportCertRotationGCCalls: certRotationGCAdapter{},
		TransportCacheGCCalls:        labelAdapter(func(c *RESTClient) *prometheus.CounterVec { return c.cacheGC }),
	}
}

// to runs f with the installed RESTClient, if any.
func to(f func(c *RESTClient)) {
	if c := installed.Load(); c != nil {
		f(c)
	}
}

type expiryAdapter struct{}

func (expiryAdapter) Set(expiry *time.Time) { to(func(c *RESTClient) { c.expiry.Store(expiry) }) }

type durationAdapter struct{}

func (durationAdapter) Observe(d time.Duration) {
	to(func(c *RESTClient) { c.certRotation.Observe(d.Seconds()) })
}

type latencyAdapter func(*RESTClient) *prometheus.HistogramVec

func (a latencyAdapter) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	to(func(c *RESTClient) { a(c).WithLabelValues(verb, u.Host).Observe(latency.Seconds()) })
}

type sizeAdapter func(*RESTClient) *prometheus.HistogramVec

func (a sizeAdapter) Observe(_ context.Context, verb, host string, size float64) {
	to(func(c *RESTClient) { a(c).WithLabelValues(verb, host).Observe(size) })
}

// resultAdapter counts requests (code, method, host) and retries (code,
// verb, host): the same three labels in the same order.
type resultAdapter func(*RESTClient) *prometheus.CounterVec

func (a resultAdapter) Increment(_ context.Context, code, method, host string) {
	to(func(c *RESTClient) { a(c).WithLabelValues(code, method, host).Inc() })
}

func (a resultAdapter) IncrementRetry(_ context.Context, code, method, host string) {
	to(func(c *RESTClient) { a(c).WithLabelValues(code, method, host).Inc() })
}

type callsAdapter struct{}

func (callsAdapter) Increment(code int, status string) {
	to(func(c *RESTClient) { c.execCalls.WithLabelValues(strconv.Itoa(code), status).Inc() })
}

type transportEntriesAdapter struct{}

func (transportEntriesAdapter) Observe(v int) {
	to(func(c *RESTClient) { c.transportEntries.Set(float64(v)) })
}

type labelAdapter func(*RESTClient) *prometheus.CounterVec

func (a labelAdapter) Increment(result string) {
	to(func(c *RESTClient) { a(c).WithLabelValues(result).Inc() })
}

type caReloadsAdapter struct{}

func (caReloadsAdapter) Increment(result, reason string) {
	to(func(c *RESTClient) { c.caReloads.WithLabelValues(result, reason).Inc() })
}

type certRotationGCAdapter struct{}

func (certRotationGCAdapter) Increment() { to(func(c *RESTClient) { c.certRotationGC.Inc() }) }
