package health

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// errSyncFailed is a sync's failure.
var errSyncFailed = errors.New("sync failed")

// clock is a fake clock stepped by the test.
type clock struct{ t time.Time }

func (c *clock) now() time.Time       { return c.t }
func (c *clock) step(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                { return &clock{t: time.Date(2026, 12, 1, 4, 7, 0, 0, time.UTC)} }
func (c *clock) tracker(fams ...string) *Tracker {
	return New(Options{Timeout: 60 * time.Second, Families: fams, Now: c.now})
}

type answerT struct {
	code int
	body string
	hdr  http.Header
}

func ask(t *testing.T, h http.Handler, method, path string) answerT {
	t.Helper()
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(method, path, nil))
	return answerT{rr.Code, rr.Body.String(), rr.Header()}
}

// ts renders a time as encoding/json does (RFC 3339, nanoseconds).
func ts(t time.Time) string { b, _ := json.Marshal(t); return string(b) }

// TestAnswersFollowQueuedChanges walks the tracker through kube-proxy's
// cases on a fake clock and checks the exact bodies: healthy while
// starting, healthy while a change waits less than the timeout (twice the
// sync period), unhealthy once it has waited the timeout, healthy again
// after a successful sync, and a failed sync leaves the change waiting.
func TestAnswersFollowQueuedChanges(t *testing.T) {
	c := newClock()
	tr := c.tracker("IPv4", "IPv6")
	h := Handler(tr, HandlerOptions{})
	start := c.t

	// Before the sync loop starts: healthy, no families.
	if got, want := ask(t, h, "GET", PathLivez).body, fmt.Sprintf(`{"lastUpdated":%s,"currentTime":%s,"healthy":true}`, ts(c.t), ts(c.t)); got != want {
		t.Fatalf("before start:\n got %s\nwant %s", got, want)
	}

	tr.Start() // counts as updated, and the initial load as queued
	c.step(59 * time.Second)
	healthyAt := func(now time.Time) string {
		return fmt.Sprintf(`{"lastUpdated":%s,"currentTime":%s,"nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":%s,"healthy":true},"IPv6":{"lastUpdated":%s,"healthy":true}}}`,
			ts(now), ts(now), ts(start), ts(start))
	}
	if a := ask(t, h, "GET", PathHealthz); a.code != 200 || a.body != healthyAt(c.t) {
		t.Fatalf("initial load waiting 59s: %d\n got %s\nwant %s", a.code, a.body, healthyAt(c.t))
	}
	c.step(time.Second)
	unhealthy := fmt.Sprintf(`{"lastUpdated":%s,"currentTime":%s,"nodeEligible":true,"healthy":false,"status":{"IPv4":{"lastUpdated":%s,"healthy":false},"IPv6":{"lastUpdated":%s,"healthy":false}}}`,
		ts(start), ts(c.t), ts(start), ts(start))
	if a := ask(t, h, "GET", PathHealthz); a.code != 503 || a.body != unhealthy {
		t.Fatalf("initial load waiting 60s: %d\n got %s\nwant %s", a.code, a.body, unhealthy)
	}
	if a := ask(t, h, "GET", PathLivez); a.code != 503 {
		t.Fatalf("livez with a change waiting 60s: %d %s", a.code, a.body)
	}

	tr.SyncBegan()
	c.step(time.Second)
	tr.SyncEnded(nil)
	synced := c.t
	if a := ask(t, h, "GET", PathHealthz); a.code != 200 {
		t.Fatalf("after a good sync: %d %s", a.code, a.body)
	}

	// Nothing queued: healthy however long nothing happens.
	c.step(time.Hour)
	if !tr.Healthy() {
		t.Fatal("idle for an hour: unhealthy")
	}

	// A change that syncs keep failing: unhealthy after the timeout.
	tr.Queued()
	queued := c.t
	for range 3 {
		tr.SyncBegan()
		c.step(25 * time.Second)
		tr.SyncEnded(errSyncFailed)
	}
	if tr.Healthy() {
		t.Fatal("a change waiting 75s behind failing syncs: healthy")
	}
	if r := tr.Report(); !r.LastUpdated.Equal(synced) {
		t.Fatalf("lastUpdated %v, want the last good sync %v", r.LastUpdated, synced)
	}
	// A later change does not reset the clock of the older one.
	tr.Queued()
	tr.SyncBegan()
	if tr.Healthy() {
		t.Fatal("a second change made the first one young again")
	}
	tr.SyncEnded(nil)
	if !tr.Healthy() {
		t.Fatalf("a good sync %s after the change did not make it healthy", c.t.Sub(queued))
	}
}

// TestChangeQueuedDuringASyncWaitsForTheNext: a change that arrives while
// a sync runs was not taken by it; that sync's success does not clear it.
func TestChangeQueuedDuringASyncWaitsForTheNext(t *testing.T) {
	c := newClock()
	tr := c.tracker("IPv4")
	tr.Start()
	tr.SyncBegan()
	c.step(time.Second)
	tr.Queued() // during the sync
	tr.SyncEnded(nil)
	c.step(60 * time.Second)
	if tr.Healthy() {
		t.Fatal("a change queued during a sync was cleared by it")
	}
	tr.SyncBegan()
	tr.SyncEnded(nil)
	if !tr.Healthy() {
		t.Fatal("the next sync did not clear it")
	}
}

// TestNodeEligibility: /healthz fails for a Node being deleted, tainted
// by the cluster autoscaler, or unknown; any other taint is fine; /livez
// answers 200 whatever the Node.
func TestNodeEligibility(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name string
		node *corev1.Node
		want bool
	}{
		{"plain", &corev1.Node{}, true},
		{"other taint", &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "other", Effect: corev1.TaintEffectNoSchedule}}}}, true},
		{"autoscaler taint", &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "other"}, {Key: ToBeDeletedTaint, Effect: corev1.TaintEffectNoSchedule}}}}, false},
		{"being deleted", &corev1.Node{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}, false},
		{"unknown", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NodeEligible(tc.node); got != tc.want {
				t.Fatalf("NodeEligible %v, want %v", got, tc.want)
			}
			c := newClock()
			tr := c.tracker("IPv4")
			tr.Start()
			start := c.t
			c.step(time.Second)
			h := Handler(tr, HandlerOptions{NodeEligible: func() bool { return NodeEligible(tc.node) }})
			hz := ask(t, h, "GET", PathHealthz)
			var r Report
			if err := json.Unmarshal([]byte(hz.body), &r); err != nil || r.NodeEligible == nil || *r.NodeEligible != tc.want || !r.Healthy {
				t.Fatalf("/healthz body %s (%v)", hz.body, err)
			}
			if want := map[bool]int{true: 200, false: 503}[tc.want]; hz.code != want {
				t.Fatalf("/healthz %d, want %d", hz.code, want)
			}
			// 200 says "now"; a 503 for the Node alone keeps the real
			// lastUpdated (here: the start).
			if want := map[bool]time.Time{true: c.t, false: start}[tc.want]; !r.LastUpdated.Equal(want) {
				t.Fatalf("lastUpdated %v, want %v", r.LastUpdated, want)
			}
			lz := ask(t, h, "GET", PathLivez)
			r = Report{}
			if lz.code != 200 || json.Unmarshal([]byte(lz.body), &r) != nil || r.NodeEligible != nil {
				t.Fatalf("/livez %d %s", lz.code, lz.body)
			}
		})
	}
}

// TestHeadersMethodsAndCounts: kube-proxy's headers on every answer, any
// method accepted, other paths not found, and each answer reported.
func TestHeadersMethodsAndCounts(t *testing.T) {
	c := newClock()
	tr := c.tracker("IPv4")
	var got []string
	h := Handler(tr, HandlerOptions{Answered: func(path string, code int) { got = append(got, fmt.Sprint(path, " ", code)) }})
	for _, m := range []string{"GET", "HEAD", "POST"} {
		for _, p := range []string{PathHealthz, PathLivez} {
			a := ask(t, h, m, p)
			if a.code != 200 || a.hdr.Get("Content-Type") != "application/json" || a.hdr.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("%s %s: %d %v", m, p, a.code, a.hdr)
			}
		}
	}
	if a := ask(t, h, "GET", "/metrics"); a.code != 404 {
		t.Errorf("/metrics on the health handler: %d", a.code)
	}
	tr.Start()
	c.step(time.Minute)
	ask(t, h, "GET", PathHealthz)
	if len(got) != 7 || got[0] != "/healthz 200" || got[1] != "/livez 200" || got[6] != "/healthz 503" {
		t.Errorf("answers reported: %q", got)
	}
}
