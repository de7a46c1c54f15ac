package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/logv"
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
	return logThrough(t, c, func(*zap.Logger) { emit() })
}

// logThrough builds the logger c asks for, writing to a buffer, routes
// klog into it, hands it to emit, and returns the lines written.
func logThrough(t *testing.T, c config.Config, emit func(*zap.Logger)) []string {
	t.Helper()
	var out buffer
	log, err := newLoggerTo(c, zapcore.AddSync(&out))
	if err != nil {
		t.Fatal(err)
	}
	routeKlog(log, c.LogLevel)
	t.Cleanup(func() { klog.ClearLogger(); setKlogVerbosity(0) })
	emit(log)
	klog.Flush()
	return out.lines()
}

// jsonKeys is a JSON object's keys in the order written, and the object.
func jsonKeys(t *testing.T, line string) ([]string, map[string]any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not a JSON object: %s", line)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(line), &obj); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	return keys, obj
}

// --logging-format=json writes what component-base's JSON logger writes
// for kube-proxy (k8s.io/component-base/logs/json), key for key and in
// its order: ts (milliseconds since the epoch), logger, caller, msg, then
// "v" on every line but errors, the fields, and an error under "err",
// last on an error line. So do the lines client-go logs through klog.
func TestJSONIsComponentBase(t *testing.T) {
	c := config.Default()
	c.LogFormat, c.LogLevel = "json", "4"
	before := float64(time.Now().UnixNano()) / 1e6
	lines := logThrough(t, c, func(log *zap.Logger) {
		log.Info("synced", zap.Int("ops", 3))
		log.Named("drift").Log(logv.V(logv.Sync), "drift check read the kernel", zap.Bool("whole", true))
		log.Warn("health check ports", zap.Error(errors.New("busy")))
		log.Error("sync failed", zap.Error(errors.New("no such file")), zap.Duration("retry_in", time.Second))
		log.With(zap.String("service", "default/web")).Warn("service not applied", zap.String("reason", "ReservedAddress"), zap.String("error", "a node's address"))
		klog.InfoS("Watch close", "type", "*v1.Service")
		klog.V(2).InfoS("Caches populated", "type", "*v1.Node")
		klog.ErrorS(errors.New("connection refused"), "Failed to watch", "type", "*v1.EndpointSlice")
	})
	after := float64(time.Now().UnixNano()) / 1e6
	want := []struct {
		keys []string
		vals map[string]any
	}{
		{[]string{"ts", "caller", "msg", "v", "ops"}, map[string]any{"msg": "synced", "v": 0.0, "ops": 3.0}},
		{[]string{"ts", "logger", "caller", "msg", "v", "whole"}, map[string]any{"logger": "drift", "v": 4.0}},
		{[]string{"ts", "caller", "msg", "v", "err"}, map[string]any{"v": 0.0, "err": "busy"}},
		{[]string{"ts", "caller", "msg", "retry_in", "err"}, map[string]any{"err": "no such file", "retry_in": "1s"}},
		{[]string{"ts", "caller", "msg", "service", "v", "reason", "err"}, map[string]any{"service": "default/web", "v": 0.0, "err": "a node's address"}},
		{[]string{"ts", "logger", "caller", "msg", "v", "type"}, map[string]any{"logger": "klog", "msg": "Watch close", "v": 0.0}},
		{[]string{"ts", "logger", "caller", "msg", "v", "type"}, map[string]any{"msg": "Caches populated", "v": 2.0}},
		{[]string{"ts", "logger", "caller", "msg", "type", "err"}, map[string]any{"msg": "Failed to watch", "err": "connection refused"}},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), strings.Join(lines, "\n"))
	}
	for i, l := range lines {
		keys, obj := jsonKeys(t, l)
		if !slices.Equal(keys, want[i].keys) {
			t.Errorf("line %d: keys %q, want %q: %s", i+1, keys, want[i].keys, l)
		}
		for k, v := range want[i].vals {
			if obj[k] != v {
				t.Errorf("line %d: %s = %v, want %v: %s", i+1, k, obj[k], v, l)
			}
		}
		if ts, ok := obj["ts"].(float64); !ok || ts < before || ts > after {
			t.Errorf("line %d: ts %v is not milliseconds since the epoch (between %f and %f)", i+1, obj["ts"], before, after)
		}
		if caller, _ := obj["caller"].(string); !strings.HasPrefix(caller, "kube-ipvs/logging_test.go:") {
			t.Errorf("line %d: caller %q, want this file's line", i+1, caller)
		}
	}
}

// writeConfig writes a KubeProxyConfiguration holding body and returns
// its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.conf")
	if err := os.WriteFile(p, []byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n"+body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// -v=N shows a line logged at klog's V(n) iff n <= N, kube-ipvs's own
// detail and client-go's klog lines alike, as kube-proxy's -v does; the
// config file's logging.verbosity means the same.
func TestVerbosityIsKlogs(t *testing.T) {
	for _, v := range []uint32{0, 1, 2, 3, 4, 6} {
		for _, from := range []string{"flag", "file"} {
			t.Run(fmt.Sprintf("%s -v=%d", from, v), func(t *testing.T) {
				args := []string{"--logging-format=json", fmt.Sprintf("-v=%d", v)}
				if from == "file" {
					args = []string{"--config", writeConfig(t, fmt.Sprintf("logging:\n  format: json\n  verbosity: %d\n", v))}
				}
				o, _ := parse(t, args...)
				lines := logThrough(t, o.Config, func(log *zap.Logger) {
					for n := uint32(0); n <= 6; n++ {
						log.Log(logv.V(n), "zap", zap.Uint32("n", n))
						klog.V(klog.Level(n)).InfoS("klog", "n", n)
					}
				})
				var got []string
				for _, l := range lines {
					_, obj := jsonKeys(t, l)
					if obj["v"] != obj["n"] {
						t.Errorf("v %v for a line at V(%v): %s", obj["v"], obj["n"], l)
					}
					got = append(got, fmt.Sprintf("%s %v", obj["msg"], obj["n"]))
				}
				var want []string
				for n := uint32(0); n <= v; n++ {
					want = append(want, fmt.Sprintf("zap %d", n), fmt.Sprintf("klog %d", n))
				}
				if !slices.Equal(got, want) {
					t.Errorf("lines %q, want %q", got, want)
				}
			})
		}
	}
}

// --log-level keeps its names: debug is -v=4, where kube-ipvs's most
// detailed lines are; warn and error show no info line, klog's or ours.
func TestLogLevelNames(t *testing.T) {
	for _, tc := range []struct {
		level string
		want  string
	}{
		{"debug", "DEBUG DEBUG DEBUG INFO WARN ERROR"},
		{"info", "INFO WARN ERROR"},
		{"warn", "WARN ERROR"},
		{"error", "ERROR"},
	} {
		c := config.Default()
		c.LogLevel = tc.level
		lines := logThrough(t, c, func(log *zap.Logger) {
			log.Log(logv.V(5), "five")
			log.Log(logv.V(logv.Sync), "sync")
			log.Log(logv.V(logv.Service), "service")
			klog.V(1).InfoS("klog one")
			log.Info("info")
			log.Warn("warn")
			log.Error("error")
		})
		var got []string
		for _, l := range lines {
			if f := strings.Split(l, "\t"); len(f) > 1 {
				got = append(got, f[1])
			}
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("--log-level=%s: levels %q, want %s", tc.level, got, tc.want)
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
