package healthcheck

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// rig opens loopback listeners on ephemeral ports and remembers which
// node port each stands for.
type rig struct {
	mu    sync.Mutex
	addrs map[uint16]string
	srv   *Server
}

func newRig(t *testing.T, healthy func() bool) *rig {
	r := &rig{addrs: map[uint16]string{}}
	r.srv = New(Options{Healthy: healthy, Listen: func(p uint16) (net.Listener, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			r.mu.Lock()
			r.addrs[p] = ln.Addr().String()
			r.mu.Unlock()
		}
		return ln, err
	}})
	t.Cleanup(r.srv.Close)
	return r
}

func (r *rig) get(t *testing.T, port uint16) (int, Body) {
	t.Helper()
	r.mu.Lock()
	addr := r.addrs[port]
	r.mu.Unlock()
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("GET port %d: %v", port, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var b Body
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatalf("body %q: %v", raw, err)
	}
	return resp.StatusCode, b
}

func hc(port uint16, name string, local int) translate.HealthCheck {
	return translate.HealthCheck{Port: port, Service: model.ServiceName{Namespace: "default", Name: name}, LocalEndpoints: local}
}

func TestAnswers(t *testing.T) {
	r := newRig(t, nil)
	if err := r.srv.Sync([]translate.HealthCheck{hc(32000, "web", 2), hc(32001, "db", 0)}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		port   uint16
		status int
		body   string
	}{
		{32000, 200, `{default web} 2 true`},
		{32001, 503, `{default db} 0 true`},
	}
	for _, tt := range tests {
		code, b := r.get(t, tt.port)
		if got := fmt.Sprintf("%v %d %v", b.Service, b.LocalEndpoints, b.ServiceProxyHealthy); code != tt.status || got != tt.body {
			t.Errorf("port %d: %d %s, want %d %s", tt.port, code, got, tt.status, tt.body)
		}
	}
	// Counts follow the syncs; a port no longer listed closes.
	if err := r.srv.Sync([]translate.HealthCheck{hc(32001, "db", 1)}); err != nil {
		t.Fatal(err)
	}
	if code, b := r.get(t, 32001); code != 200 || b.LocalEndpoints != 1 {
		t.Errorf("after endpoints came: %d %+v", code, b)
	}
	r.mu.Lock()
	gone := r.addrs[32000]
	r.mu.Unlock()
	if _, err := http.Get("http://" + gone + "/"); err == nil {
		t.Error("port 32000 still answers after its Service went")
	}
}

func TestUnhealthyProxyIs503(t *testing.T) {
	r := newRig(t, func() bool { return false })
	if err := r.srv.Sync([]translate.HealthCheck{hc(32000, "web", 2)}); err != nil {
		t.Fatal(err)
	}
	if code, b := r.get(t, 32000); code != 503 || b.ServiceProxyHealthy {
		t.Errorf("unhealthy proxy: %d %+v", code, b)
	}
}

func TestRawJSONShape(t *testing.T) {
	var b Body
	b.Service.Namespace, b.Service.Name, b.LocalEndpoints, b.ServiceProxyHealthy = "ns", "svc", 1, true
	raw, _ := json.Marshal(b)
	want := `{"service":{"namespace":"ns","name":"svc"},"localEndpoints":1,"serviceProxyHealthy":true}`
	if string(raw) != want {
		t.Errorf("JSON %s, want %s", raw, want)
	}
}
