package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
)

// buffer is a zapcore.WriteSyncer the test reads back.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) { b.mu.Lock(); defer b.mu.Unlock(); return b.b.Write(p) }
func (b *buffer) Sync() error                 { return nil }
func (b *buffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSpace(b.b.String()), "\n")
}

// klogThrough routes klog into a logger of the given format writing to a
// buffer, runs emit, and returns the lines written.
func klogThrough(t *testing.T, format string, emit func()) []string {
	t.Helper()
	c := config.Default()
	c.LogFormat = format
	var out buffer
	log, err := newLoggerTo(c, zapcore.AddSync(&out))
	if err != nil {
		t.Fatal(err)
	}
	routeKlog(log)
	t.Cleanup(klog.ClearLogger)
	emit()
	klog.Flush()
	return out.lines()
}

// What client-go logs through klog comes out as the agent's own JSON lines:
// level, logger name, message and key/value pairs as fields; errors at
// error level with the error under "error"; klog's verbose lines dropped.
func TestKlogLinesAreZapJSON(t *testing.T) {
	lines := klogThrough(t, "json", func() {
		klog.InfoS("Watch close", "reflector", "k8s.io/client-go/informers/factory.go:160", "type", "*v1.Service")
		klog.ErrorS(errors.New("connection refused"), "Failed to watch", "type", "*v1.EndpointSlice")
		klog.V(2).InfoS("Caches populated")
		klog.Warningf("Throttling request took %d ms", 1200)
	})
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3 (the V(2) line dropped):\n%s", len(lines), strings.Join(lines, "\n"))
	}
	want := []map[string]any{
		{"level": "info", "logger": "klog", "msg": "Watch close", "reflector": "k8s.io/client-go/informers/factory.go:160", "type": "*v1.Service"},
		{"level": "error", "logger": "klog", "msg": "Failed to watch", "error": "connection refused", "type": "*v1.EndpointSlice"},
		{"level": "info", "logger": "klog", "msg": "Throttling request took 1200 ms"},
	}
	for i, l := range lines {
		var got map[string]any
		if err := json.Unmarshal([]byte(l), &got); err != nil {
			t.Fatalf("line %d is not JSON: %v: %s", i+1, err, l)
		}
		if _, ok := got["ts"]; !ok {
			t.Errorf("line %d has no ts: %s", i+1, l)
		}
		for k, v := range want[i] {
			if got[k] != v {
				t.Errorf("line %d: %s = %v, want %v: %s", i+1, k, got[k], v, l)
			}
		}
	}
}

// In the text format the same line reads like the agent's own.
func TestKlogLinesAreZapConsole(t *testing.T) {
	lines := klogThrough(t, "console", func() {
		klog.InfoS("Watch close", "type", "*v1.Service")
	})
	f := strings.Split(lines[0], "\t")
	if len(lines) != 1 || len(f) != 5 || f[1] != "INFO" || f[2] != "klog" || f[3] != "Watch close" || f[4] != `{"type": "*v1.Service"}` {
		t.Errorf("got %q, want one line: time, INFO, klog, the message and its fields", lines)
	}
}

// Contextual logging: client-go's newer code asks klog for a logger from
// its context; it gets the same one.
func TestKlogContextualLoggerIsZap(t *testing.T) {
	lines := klogThrough(t, "json", func() {
		klog.Background().WithValues("controller", "endpointslices").Info("Starting")
	})
	if len(lines) != 1 || !strings.Contains(lines[0], `"logger":"klog"`) || !strings.Contains(lines[0], `"controller":"endpointslices"`) {
		t.Errorf("got %q, want one zap JSON line with the logger's values", lines)
	}
}
