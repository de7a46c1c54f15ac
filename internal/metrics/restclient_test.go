package metrics

import (
	"context"
	"math"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

func newRESTClient(t *testing.T) (*RESTClient, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	c, err := NewRESTClient(reg)
	if err != nil {
		t.Fatal(err)
	}
	return c, reg
}

// TestClientGoReportsReachTheInstalledRegistry drives client-go's reporting
// hooks (what its REST client calls on each request) and reads kube-proxy's
// rest_client_* families back, on the registry installed last.
func TestClientGoReportsReachTheInstalledRegistry(t *testing.T) {
	first, firstReg := newRESTClient(t)
	first.Install()
	second, reg := newRESTClient(t)
	second.Install()
	ctx := context.Background()
	u := url.URL{Scheme: "https", Host: "10.0.0.1:6443", Path: "/api/v1/services"}
	clientmetrics.RequestLatency.Observe(ctx, "GET", u, 30*time.Millisecond)
	clientmetrics.RequestResult.Increment(ctx, "200", "GET", u.Host)
	clientmetrics.RequestResult.Increment(ctx, "403", "POST", u.Host)
	clientmetrics.RequestRetry.IncrementRetry(ctx, "500", "GET", u.Host)
	clientmetrics.TransportCreateCalls.Increment("miss")
	want := `
# HELP rest_client_requests_total [ALPHA] Number of HTTP requests, partitioned by status code, method, and host.
# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="10.0.0.1:6443",method="GET"} 1
rest_client_requests_total{code="403",host="10.0.0.1:6443",method="POST"} 1
# HELP rest_client_request_retries_total [ALPHA] Number of request retries, partitioned by status code, verb, and host.
# TYPE rest_client_request_retries_total counter
rest_client_request_retries_total{code="500",host="10.0.0.1:6443",verb="GET"} 1
# HELP rest_client_transport_create_calls_total [ALPHA] Number of calls to get a new transport, partitioned by the result of the operation hit: obtained from the cache, miss: created and added to the cache, miss-gc: recreated and added back to the cache after being garbage collected, uncacheable: created and not cached
# TYPE rest_client_transport_create_calls_total counter
rest_client_transport_create_calls_total{result="miss"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), RESTRequests, "rest_client_request_retries_total", "rest_client_transport_create_calls_total"); err != nil {
		t.Fatal(err)
	}
	// 30 ms: first counted in kube-proxy's 0.1 s bucket, after 0.005 and 0.025.
	h := histogram(t, reg, RESTRequestDuration, `host="10.0.0.1:6443",verb="GET"`)
	if b := h.GetBucket(); len(b) != 12 || b[1].GetCumulativeCount() != 0 || b[2].GetCumulativeCount() != 1 {
		t.Fatalf("latency buckets %v", b)
	}
	if n := testutil.CollectAndCount(firstReg, RESTRequests); n != 0 {
		t.Fatalf("the replaced registry got %d request series", n)
	}
	// No exec plugin certificate: +Inf, as kube-proxy reports it.
	if got := gather(t, reg, "rest_client_exec_plugin_ttl_seconds").GetMetric()[0].GetGauge().GetValue(); !math.IsInf(got, 1) {
		t.Fatalf("ttl %v", got)
	}
	expiry := time.Now().Add(time.Hour)
	clientmetrics.ClientCertExpiry.Set(&expiry)
	if got := gather(t, reg, "rest_client_exec_plugin_ttl_seconds").GetMetric()[0].GetGauge().GetValue(); got < 3500 || got > 3600 {
		t.Fatalf("ttl %v, want about an hour", got)
	}
}
