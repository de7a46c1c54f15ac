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
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kube-ipvs/kube-ipvs/internal/status"
)

type inspector struct {
	rep   status.Report
	drift []string
	err   error
}

func (i inspector) Status() status.Report                   { return i.rep }
func (i inspector) Drift(context.Context) ([]string, error) { return i.drift, i.err }

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

func TestDiffAndStatus(t *testing.T) {
	h := DebugHandler(inspector{rep: status.Report{Node: "node-a"}, drift: []string{"-D -t 10.96.0.1:80"}})
	var d DiffResponse
	if err := json.NewDecoder(get(t, h, PathDiff).Body).Decode(&d); err != nil || len(d.Ops) != 1 {
		t.Fatalf("diff %+v %v", d, err)
	}
	var rep status.Report
	if err := json.NewDecoder(get(t, h, PathStatus).Body).Decode(&rep); err != nil || rep.Node != "node-a" {
		t.Fatalf("status %+v %v", rep, err)
	}
	if got := get(t, DebugHandler(inspector{err: errors.New("dump failed")}), PathDiff).Code; got != 500 {
		t.Fatalf("failed drift answered %d", got)
	}
}

// Each address serves its own paths only: the debug views neither health
// nor metrics, the metrics server neither the views nor kube-proxy's
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
