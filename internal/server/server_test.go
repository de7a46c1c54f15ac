package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kube-ipvs/kube-ipvs/internal/httplimit"
	"github.com/kube-ipvs/kube-ipvs/internal/httplimit/httplimittest"
	"github.com/kube-ipvs/kube-ipvs/internal/status"
)

type inspector struct {
	rep  status.Report
	diff []string
	err  error
}

func (i inspector) Status() status.Report                  { return i.rep }
func (i inspector) Diff(context.Context) ([]string, error) { return i.diff, i.err }

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

func TestDiffAndStatus(t *testing.T) {
	h := DebugHandler(inspector{rep: status.Report{Node: "node-a"}, diff: []string{"-D -t 10.96.0.1:80"}})
	var d DiffResponse
	if err := json.NewDecoder(get(t, h, PathDiff).Body).Decode(&d); err != nil || len(d.Ops) != 1 {
		t.Fatalf("diff %+v %v", d, err)
	}
	var rep status.Report
	if err := json.NewDecoder(get(t, h, PathStatus).Body).Decode(&rep); err != nil || rep.Node != "node-a" {
		t.Fatalf("status %+v %v", rep, err)
	}
	if got := get(t, DebugHandler(inspector{err: errors.New("dump failed")}), PathDiff).Code; got != 500 {
		t.Fatalf("failed diff answered %d", got)
	}
}

// Each address serves its own paths only: the debug pages neither health
// nor metrics, the metrics server neither the debug pages nor kube-proxy's
// /livez, as in kube-proxy.
func TestEachAddressServesItsOwn(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("kube_ipvs_virtual_servers 2\n"))
	})
	debug, mh := DebugHandler(inspector{}), MetricsHandler(metrics, "ipvs")
	for _, p := range []string{PathMetrics, PathHealthz, "/livez", PathProxyMode} {
		if got := get(t, debug, p).Code; got != 404 {
			t.Errorf("debug %s answered %d", p, got)
		}
	}
	for _, p := range []string{PathStatus, PathDiff, "/livez"} {
		if got := get(t, mh, p).Code; got != 404 {
			t.Errorf("metrics %s answered %d", p, got)
		}
	}
	for _, tc := range []struct{ path, body, ctype string }{
		{PathMetrics, "kube_ipvs_virtual_servers 2\n", ""},
		{PathProxyMode, "ipvs", "text/plain; charset=utf-8"},
		{PathHealthz, "ok", "text/plain; charset=utf-8"},
		{PathHealthz + "?verbose", "[+]ping ok\nhealthz check passed\n", "text/plain; charset=utf-8"},
		{PathHealthzPing, "ok", ""},
	} {
		rec := get(t, mh, tc.path)
		if rec.Code != 200 || rec.Body.String() != tc.body {
			t.Errorf("metrics %s: %d %q, want %q", tc.path, rec.Code, rec.Body.String(), tc.body)
		}
		if tc.ctype != "" && (rec.Header().Get("Content-Type") != tc.ctype || rec.Header().Get("X-Content-Type-Options") != "nosniff") {
			t.Errorf("metrics %s headers: %v", tc.path, rec.Header())
		}
	}
}

// busy holds a loopback port, so that listening on it fails.
func busy(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

var hello = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello") })

// With bindAddressHardFail, an address that cannot be listened on ends
// Run at once with an error naming it.
func TestHardFailEndsWithTheAddress(t *testing.T) {
	ln := busy(t)
	addr := ln.Addr().String()
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Endpoint{Name: "healthz", Addr: addr, Handler: hello, HardFail: true}, zap.NewNop())
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "healthz server on "+addr+": ") || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("error %v, want one naming healthz and %s", err, addr)
		}
	case <-time.After(time.Minute):
		t.Fatal("a hard-failing endpoint did not return")
	}
}

// Without it, the failure is logged, Run keeps trying, and serves once
// the address is free.
func TestSoftFailRetriesUntilItServes(t *testing.T) {
	ln := busy(t)
	addr := ln.Addr().String()
	core, logs := observer.New(zap.ErrorLevel)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Endpoint{Name: "metrics", Addr: addr, Handler: hello, Retry: 10 * time.Millisecond}, zap.New(core))
	}()
	deadline := time.Now().Add(time.Minute)
	for logs.Len() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no retries logged: %v", logs.All())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if e := logs.All()[0]; !strings.Contains(e.ContextMap()["error"].(string), "metrics server on "+addr) {
		t.Fatalf("logged %v", e.ContextMap())
	}
	ln.Close()
	var body string
	for {
		if resp, err := http.Get("http://" + addr + "/"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never served after the address was freed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if body != "hello" {
		t.Fatalf("served %q", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after ctx ended: %v", err)
	}
}

// freeAddr is a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln := busy(t)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// serving runs e until the test ends and returns once it answers.
func serving(t *testing.T, e Endpoint) string {
	t.Helper()
	e.Addr = freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = Run(ctx, e, zap.NewNop()) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := net.Dial("tcp", e.Addr)
		if err == nil {
			c.Close()
			return e.Addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never served: %v", e.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readsBody answers after reading the whole request body.
var readsBody = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	io.WriteString(w, "hello")
})

// A listener bounds what one client holds: an idle keep-alive connection
// is closed, a body that trickles in is cut, and connections beyond the
// cap wait until one closes.
func TestListenerLimits(t *testing.T) {
	tests := []struct {
		name  string
		lim   httplimit.Limits
		probe func(t *testing.T, addr string)
	}{
		{"idle keep-alive closed", httplimit.Limits{IdleTimeout: 200 * time.Millisecond},
			func(t *testing.T, addr string) { httplimittest.IdleClosed(t, addr, 5*time.Second) }},
		{"slow body cut", httplimit.Limits{ReadTimeout: 300 * time.Millisecond},
			func(t *testing.T, addr string) { httplimittest.SlowBodyCut(t, addr, 5*time.Second) }},
		{"connections over the cap wait", httplimit.Limits{MaxConns: 3},
			func(t *testing.T, addr string) { httplimittest.CapWaits(t, addr, 3) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.probe(t, serving(t, Endpoint{Name: "metrics", Handler: readsBody, Limits: tt.lim}))
		})
	}
}

// With the default limits, a client that opens many connections and holds
// them idle or half-sent keeps only its share of them; another client, from
// another address, is still answered at once.
func TestOneClientCannotStarveAnother(t *testing.T) {
	addr := serving(t, Endpoint{Name: "healthz", Handler: readsBody})
	httplimittest.ClientsApart(t, addr, httplimit.MaxConnsPerClient, 200)
}

// blockingDiff counts the diffs running at once and holds each until
// released; a diff whose context ended by then fails, as a kernel read
// does.
type blockingDiff struct {
	inspector
	mu            sync.Mutex
	running, most int
	calls         int
	entered       chan struct{}
	release       chan struct{}
}

func (b *blockingDiff) Diff(ctx context.Context) ([]string, error) {
	b.mu.Lock()
	b.running++
	b.calls++
	b.most = max(b.most, b.running)
	b.mu.Unlock()
	b.entered <- struct{}{}
	<-b.release
	b.mu.Lock()
	b.running--
	b.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return []string{"-D -t 10.96.0.1:80"}, nil
}

// newBlockingDiff can be entered n times without waiting.
func newBlockingDiff(n int) *blockingDiff {
	return &blockingDiff{entered: make(chan struct{}, n), release: make(chan struct{})}
}

// getDiff asks srv for a diff and sends what it answered to got.
func getDiff(ctx context.Context, url string, got chan<- string) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+PathDiff, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		got <- err.Error()
		return
	}
	defer resp.Body.Close()
	var d DiffResponse
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		got <- resp.Status
		return
	}
	got <- strings.Join(d.Ops, ",")
}

// Diffs asked at once share a kernel read: one runs at a time, and those
// asked while it runs take its answer, so that a client cannot make the
// agent run one read per request.
func TestConcurrentDiffsShareARead(t *testing.T) {
	const n = 8
	b := newBlockingDiff(n)
	srv := httptest.NewServer(DebugHandler(b))
	defer srv.Close()
	got := make(chan string, n)
	for range n {
		go getDiff(context.Background(), srv.URL, got)
	}
	<-b.entered
	select {
	case <-b.entered:
		t.Error("a second diff started while the first ran")
	case <-time.After(300 * time.Millisecond):
	}
	close(b.release)
	for range n {
		if d := <-got; d != "-D -t 10.96.0.1:80" {
			t.Errorf("a diff answered %q", d)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.most != 1 || b.calls < 1 || b.calls > 2 {
		t.Errorf("%d diffs ran at most at once, %d in all; want 1, and 1 or 2 for %d requests", b.most, b.calls, n)
	}
}

// The client whose request started a shared read leaving does not fail
// the read for the others waiting on it.
func TestSharedDiffOutlivesItsFirstClient(t *testing.T) {
	b := newBlockingDiff(2)
	srv := httptest.NewServer(DebugHandler(b))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	first, second := make(chan string, 1), make(chan string, 1)
	go getDiff(ctx, srv.URL, first)
	<-b.entered
	go getDiff(context.Background(), srv.URL, second)
	time.Sleep(200 * time.Millisecond) // the second request waits on the read
	cancel()
	<-first
	time.Sleep(100 * time.Millisecond) // the server sees the first client gone
	close(b.release)
	if d := <-second; d != "-D -t 10.96.0.1:80" {
		t.Errorf("the waiting request answered %q", d)
	}
}
