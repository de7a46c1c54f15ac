package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"sigs.k8s.io/yaml"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/objects"
	"github.com/kube-ipvs/kube-ipvs/internal/reconciler"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// apiServer answers client-go's requests in memory: an empty Service list
// for a GET, an Event for a POST.
type apiServer struct{}

func (apiServer) RoundTrip(req *http.Request) (*http.Response, error) {
	body := `{"kind":"ServiceList","apiVersion":"v1","metadata":{},"items":[]}`
	code := http.StatusOK
	if req.Method == http.MethodPost {
		_, _ = io.Copy(io.Discard, req.Body)
		body = `{"kind":"Event","apiVersion":"v1","metadata":{"namespace":"default","name":"web.1"}}`
		code = http.StatusCreated
	}
	return &http.Response{StatusCode: code, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
}

// scrapeAfterSyncs builds the agent's registry as the agent does and runs
// what a node sees in its first minutes: Services and slices (one stamped
// by the EndpointSlice controller), syncs, a UDP endpoint leaving with
// conntrack entries, a failed iptables-restore, health probes, and
// client-go requests (a list and an Event). It returns the gathered
// families by name.
func scrapeAfterSyncs(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	v4 := model.Families{IPv4: true}
	kernel := fake.New()
	store := objects.NewStore()
	reg, m, err := newMetrics(v4, store, "dev")
	if err != nil {
		t.Fatal(err)
	}
	rec := reconciler.New(reconciler.Options{
		Dataplane: kernel, Store: store, Metrics: m,
		Translate: translate.Config{NodeName: "node-a", Scheduler: "rr", Families: v4, DrainTimeout: time.Minute},
		Shim:      shim.Config{Families: v4},
	})
	ctx := context.Background()
	if err := rec.Init(ctx); err != nil {
		t.Fatal(err)
	}
	v := debugPages{rec: rec, node: "node-a"}
	if err := registerCollectors(v, reg); err != nil {
		t.Fatal(err)
	}
	for name, spec := range map[string]struct {
		ip    string
		proto corev1.Protocol
	}{"web": {"10.96.0.10", corev1.ProtocolTCP}, "dns": {"10.96.0.53", corev1.ProtocolUDP}} {
		store.SetService(&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: spec.ip, ClusterIPs: []string{spec.ip},
				Ports: []corev1.ServicePort{{Protocol: spec.proto, Port: 53}}},
		})
	}
	web := webSlice("10.244.1.2")
	web.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().Format(time.RFC3339Nano)}
	store.SetSlice(web)
	dns := func(addrs ...string) *discoveryv1.EndpointSlice {
		s := webSlice(addrs...)
		s.Name, s.Labels[discoveryv1.LabelServiceName] = "dns-abc", "dns"
		udp := corev1.ProtocolUDP
		s.Ports[0].Protocol = &udp
		return s
	}
	store.SetSlice(dns("10.244.1.3", "10.244.2.3"))
	m.Queued(time.Now())
	mustSync(t, rec, false)
	kernel.SetConntrack(model.UDP, netip.MustParseAddrPort("10.244.2.3:8080"), 2)
	store.SetSlice(dns("10.244.1.3"))
	mustSync(t, rec, false)
	kernel.FailNext("EnsureShim", fmt.Errorf("write iptables rules: %w", &dataplane.RestoreError{Err: fmt.Errorf("iptables-restore: exit status 1")}))
	if _, err := rec.Sync(ctx, true); err == nil {
		t.Fatal("sync with a failing iptables-restore succeeded")
	}
	mustSync(t, rec, true)
	m.Healthz(http.StatusOK)
	m.Livez(http.StatusOK)

	client, err := kubernetes.NewForConfig(&rest.Config{Host: "https://10.0.0.1:6443", Transport: apiServer{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Services("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web.1"}, Reason: "InvalidService"}
	if _, err := client.CoreV1().Events("default").Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// What a healthy node rarely does: a retried request, an exec
	// credential plugin, a CA reload, a transport cache clean-up.
	clientmetrics.RequestRetry.IncrementRetry(ctx, "503", "GET", "10.0.0.1:6443")
	clientmetrics.ExecPluginCalls.Increment(0, "no_error")
	clientmetrics.TransportCAReloads.Increment("success", "file_changed")
	clientmetrics.TransportCacheGCCalls.Increment("deleted")
	clientmetrics.TransportCreateCalls.Increment("uncacheable")

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func mustSync(t *testing.T, rec *reconciler.Reconciler, full bool) {
	t.Helper()
	if _, err := rec.Sync(context.Background(), full); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

// leftOut are the families kube-proxy serves that the agent does not, and
// why.
var leftOut = map[string]string{
	"registered_metrics_total":                                 "component-base's count of its own registrations: the agent has no component-base registry",
	"disabled_metrics_total":                                   "component-base's metric-disabling flag, which the agent does not have",
	"hidden_metrics_total":                                     "component-base's deprecated-metric hiding, which the agent does not have",
	"cardinality_enforcement_unexpected_categorizations_total": "component-base's label allow-list enforcement, which the agent does not have",
}

// TestAgentServesKubeProxysMetrics checks every family kube-proxy v1.37.2
// serves in IPVS mode (testdata, read from kube-proxy's own registry) against
// the agent's registry after a few syncs: same type, label names, buckets
// and help.
func TestAgentServesKubeProxysMetrics(t *testing.T) {
	got := scrapeAfterSyncs(t)
	f, err := os.Open("testdata/kube-proxy-v1.37.2-ipvs.metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	checked := 0
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.SplitN(line, " ", 5)
		name := fields[0]
		if why, ok := leftOut[name]; ok {
			if _, served := got[name]; served {
				t.Errorf("%s is served but listed as left out (%s)", name, why)
			}
			continue
		}
		checked++
		mf, ok := got[name]
		if !ok {
			t.Errorf("%s: not served", name)
			continue
		}
		if typ := strings.ToLower(mf.GetType().String()); typ != fields[1] {
			t.Errorf("%s: type %s, kube-proxy's %s", name, typ, fields[1])
		}
		if len(fields) == 2 {
			continue
		}
		labels, buckets := familyShape(mf)
		if labels != fields[2] {
			t.Errorf("%s: labels %s, kube-proxy's %s", name, labels, fields[2])
		}
		if buckets != fields[3] {
			t.Errorf("%s: buckets %s, kube-proxy's %s", name, buckets, fields[3])
		}
		if mf.GetHelp() != fields[4] {
			t.Errorf("%s: help %q, kube-proxy's %q", name, mf.GetHelp(), fields[4])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked %d families: testdata truncated?", checked)
	}
}

// familyShape renders a family's label names and buckets as the testdata
// writes them ("-" for none).
func familyShape(mf *dto.MetricFamily) (labels, buckets string) {
	labels, buckets = "-", "-"
	if len(mf.GetMetric()) == 0 {
		return labels, buckets
	}
	m := mf.GetMetric()[0]
	var ls, bs []string
	for _, l := range m.GetLabel() {
		ls = append(ls, l.GetName())
	}
	sort.Strings(ls)
	for _, b := range m.GetHistogram().GetBucket() {
		bs = append(bs, fmt.Sprint(b.GetUpperBound()))
	}
	if len(ls) > 0 {
		labels = strings.Join(ls, ",")
	}
	if len(bs) > 0 {
		buckets = strings.Join(bs, ",")
	}
	return labels, buckets
}

// TestNetworkProgrammingIsObservedForTheStampedSlice: of the two slices
// only the one with a trigger time is measured, once.
func TestNetworkProgrammingIsObservedForTheStampedSlice(t *testing.T) {
	got := scrapeAfterSyncs(t)
	mf, ok := got["kubeproxy_network_programming_duration_seconds"]
	if !ok {
		t.Fatal("not served")
	}
	h := mf.GetMetric()[0].GetHistogram()
	if n := h.GetSampleCount(); n != 1 || h.GetSampleSum() < 0 || h.GetSampleSum() > 60 {
		t.Fatalf("%d observations, sum %v s; want one of the stamped slice", n, h.GetSampleSum())
	}
}

// TestKubernetesMixinProxyNamesAreExported checks every series name the
// kubernetes-mixin Proxy dashboard and kube-proxy alerts query (testdata,
// read from the mixin) against the agent's registry after a few syncs.
func TestKubernetesMixinProxyNamesAreExported(t *testing.T) {
	got := scrapeAfterSyncs(t)
	data, err := os.ReadFile("testdata/kubernetes-mixin-proxy.names")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n++
		if !exported(got, line) {
			t.Errorf("the mixin queries %s; the agent does not export it", line)
		}
	}
	if n < 10 {
		t.Fatalf("read %d names", n)
	}
}

// TestShippedDashboardAndRulesQueryExportedNames checks that every series
// the shipped dashboard (manifests/monitoring/dashboard) and alerts
// (manifests/monitoring/rules) query is one the agent exports.
func TestShippedDashboardAndRulesQueryExportedNames(t *testing.T) {
	got := scrapeAfterSyncs(t)
	exprs := append(dashboardExprs(t, "../../manifests/monitoring/dashboard/grafana-dashboard.json"), ruleExprs(t, "../../manifests/monitoring/rules/prometheus-rules.yaml")...)
	if len(exprs) < 30 {
		t.Fatalf("read %d queries", len(exprs))
	}
	for _, e := range exprs {
		names := promqlNames(e)
		if len(names) == 0 {
			t.Errorf("no series in %q", e)
		}
		for _, n := range names {
			if !exported(got, n) {
				t.Errorf("%s (in %q) is not exported", n, e)
			}
		}
	}
}

// exported tells whether a series name is one the registry serves: a
// family's name, a histogram's _bucket, _count or _sum series, or `up`,
// which Prometheus itself records for every scrape.
func exported(got map[string]*dto.MetricFamily, series string) bool {
	if series == "up" {
		return true
	}
	if _, ok := got[series]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(series, suffix); ok {
			if mf, ok := got[base]; ok && (mf.GetType() == dto.MetricType_HISTOGRAM || suffix != "_bucket" && mf.GetType() == dto.MetricType_SUMMARY) {
				return true
			}
		}
	}
	return false
}

func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	return out
}

func ruleExprs(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Expr string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range r.Spec.Groups {
		for _, rule := range g.Rules {
			out = append(out, rule.Expr)
		}
	}
	return out
}

var (
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promqlKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset", "inf", "nan"}
)

// promqlNames picks the series names out of a PromQL expression: the
// identifiers left once strings, label matchers, ranges and grouping label
// lists are gone that are neither keywords nor called as functions.
func promqlNames(expr string) []string {
	e := promqlStrings.ReplaceAllString(expr, `""`)
	e = promqlMatchers.ReplaceAllString(e, " ")
	e = promqlRanges.ReplaceAllString(e, " ")
	e = promqlGrouping.ReplaceAllString(e, " ")
	var out []string
	for _, loc := range promqlIdent.FindAllStringIndex(e, -1) {
		word := e[loc[0]:loc[1]]
		rest := strings.TrimLeft(e[loc[1]:], " \t\n")
		if strings.HasPrefix(rest, "(") || slices.Contains(promqlKeywords, strings.ToLower(word)) {
			continue
		}
		if loc[0] > 0 && (e[loc[0]-1] == '$' || e[loc[0]-1] == '.' || e[loc[0]-1] >= '0' && e[loc[0]-1] <= '9') {
			continue // a Grafana variable, or the exponent of a number
		}
		if !slices.Contains(out, word) {
			out = append(out, word)
		}
	}
	return out
}

func TestPromqlNames(t *testing.T) {
	for expr, want := range map[string]string{
		`histogram_quantile(0.99, sum(rate(rest_client_request_duration_seconds_bucket{cluster="$cluster", job="kube-proxy",instance=~"$instance",verb="POST"}[$__rate_interval])) by (verb, le))`: "rest_client_request_duration_seconds_bucket",
		`absent(up{job="kube-proxy"})`:                                                   "up",
		`max by (instance) (a_seconds{x="y"} - b_seconds) > 1e+09`:                       "a_seconds b_seconds",
		`sum by (op, result) (rate(kube_ipvs_operations_total{result="error"}[5m])) > 0`: "kube_ipvs_operations_total",
		`count by (version) (kube_ipvs_build_info) and on (instance) go_goroutines`:      "kube_ipvs_build_info go_goroutines",
	} {
		if got := strings.Join(promqlNames(expr), " "); got != want {
			t.Errorf("%s: %q, want %q", expr, got, want)
		}
	}
}
