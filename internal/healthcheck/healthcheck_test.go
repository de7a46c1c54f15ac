package healthcheck

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/httplimit"
	"github.com/kube-ipvs/kube-ipvs/internal/httplimit/httplimittest"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// rig opens listeners on ephemeral ports of the address asked for and
// remembers which node port each stands for.
type rig struct {
	mu    sync.Mutex
	addrs map[netip.AddrPort]string
	srv   *Server
}

// nodeAddr is the node address the tests' ports listen on (loopback, so
// that they can be reached).
var nodeAddr = netip.MustParseAddr("127.0.0.1")

func newRig(t *testing.T, healthy func() bool) *rig {
	return newRigWith(t, Options{Healthy: healthy})
}

// newRigWith is newRig with opt's other fields.
func newRigWith(t *testing.T, opt Options) *rig {
	r := &rig{addrs: map[netip.AddrPort]string{}}
	opt.Listen = func(at netip.AddrPort) (net.Listener, error) {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(at.Addr(), 0).String())
		if err == nil {
			r.mu.Lock()
			r.addrs[at] = ln.Addr().String()
			r.mu.Unlock()
		}
		return ln, err
	}
	r.srv = New(opt)
	t.Cleanup(r.srv.Close)
	return r
}

func (r *rig) get(t *testing.T, port uint16) (int, Body) {
	t.Helper()
	return getAt(t, r.at(nodeAddr, port))
}

// at is where the listener standing for a node address and port is.
func (r *rig) at(a netip.Addr, port uint16) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addrs[netip.AddrPortFrom(a, port)]
}

func getAt(t *testing.T, addr string) (int, Body) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("GET %s: %v", addr, err)
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
	if err := r.srv.Sync([]translate.HealthCheck{hc(32000, "web", 2), hc(32001, "db", 0)}, []netip.Addr{nodeAddr}); err != nil {
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
	if err := r.srv.Sync([]translate.HealthCheck{hc(32001, "db", 1)}, []netip.Addr{nodeAddr}); err != nil {
		t.Fatal(err)
	}
	if code, b := r.get(t, 32001); code != 200 || b.LocalEndpoints != 1 {
		t.Errorf("after endpoints came: %d %+v", code, b)
	}
	gone := r.at(nodeAddr, 32000)
	if _, err := http.Get("http://" + gone + "/"); err == nil {
		t.Error("port 32000 still answers after its Service went")
	}
}

func TestUnhealthyProxyIs503(t *testing.T) {
	r := newRig(t, func() bool { return false })
	if err := r.srv.Sync([]translate.HealthCheck{hc(32000, "web", 2)}, []netip.Addr{nodeAddr}); err != nil {
		t.Fatal(err)
	}
	if code, b := r.get(t, 32000); code != 503 || b.ServiceProxyHealthy {
		t.Errorf("unhealthy proxy: %d %+v", code, b)
	}
}

// TestWireFormat checks an answer byte for byte against kube-proxy's
// service health server: its headers (the local endpoint count as the
// load-balancing weight) and its tab-indented body without a final
// newline.
func TestWireFormat(t *testing.T) {
	r := newRig(t, nil)
	if err := r.srv.Sync([]translate.HealthCheck{hc(32000, "web", 3), hc(32001, "db", 0)}, []netip.Addr{nodeAddr}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		port   uint16
		code   int
		weight string
		body   string
	}{
		{32000, 200, "3", "{\n\t\"service\": {\n\t\t\"namespace\": \"default\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": 3,\n\t\"serviceProxyHealthy\": true\n}"},
		{32001, 503, "0", "{\n\t\"service\": {\n\t\t\"namespace\": \"default\",\n\t\t\"name\": \"db\"\n\t},\n\t\"localEndpoints\": 0,\n\t\"serviceProxyHealthy\": true\n}"},
	} {
		resp, err := http.Get("http://" + r.at(nodeAddr, tc.port) + "/")
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h := resp.Header
		if resp.StatusCode != tc.code || string(raw) != tc.body {
			t.Errorf("port %d: %d\n%s\nwant %d\n%s", tc.port, resp.StatusCode, raw, tc.code, tc.body)
		}
		if h.Get("Content-Type") != "application/json" || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Load-Balancing-Endpoint-Weight") != tc.weight {
			t.Errorf("port %d headers: %v", tc.port, h)
		}
	}
}

// The ports follow the node addresses: a new one gets a listener, one no
// longer given loses its listener, the others keep serving.
func TestPortsFollowTheNodeAddresses(t *testing.T) {
	r := newRig(t, nil)
	second := netip.MustParseAddr("127.0.0.2")
	hcs := []translate.HealthCheck{hc(32000, "web", 1)}
	if err := r.srv.Sync(hcs, []netip.Addr{nodeAddr, second}); err != nil {
		t.Fatal(err)
	}
	first := r.at(nodeAddr, 32000)
	for _, a := range []netip.Addr{nodeAddr, second} {
		if code, _ := getAt(t, r.at(a, 32000)); code != 200 {
			t.Errorf("%s: %d", a, code)
		}
	}
	if err := r.srv.Sync(hcs, []netip.Addr{second}); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", first); err == nil {
		_ = c.Close()
		t.Error("the port still accepts on an address no longer given")
	}
	if code, _ := getAt(t, r.at(second, 32000)); code != 200 {
		t.Errorf("the remaining address: %d", code)
	}
}

// With the default listener a port listens on the node address only, not
// on every address of the host (a VIP is one of those).
func TestListensOnTheNodeAddressOnly(t *testing.T) {
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(probe.Addr().(*net.TCPAddr).Port)
	_ = probe.Close()
	srv := New(Options{})
	t.Cleanup(srv.Close)
	if err := srv.Sync([]translate.HealthCheck{hc(port, "web", 1)}, []netip.Addr{nodeAddr}); err != nil {
		t.Fatal(err)
	}
	if code, _ := getAt(t, netip.AddrPortFrom(nodeAddr, port).String()); code != 200 {
		t.Errorf("node address: %d", code)
	}
	other := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.3"), port).String()
	if c, err := net.Dial("tcp", other); err == nil {
		_ = c.Close()
		t.Errorf("%s answered: the port listens beyond the node address", other)
	}
}

// A listener that cannot open is reported; the port's other addresses
// serve, and the next Sync retries it.
func TestFailedListenerIsRetried(t *testing.T) {
	r := newRig(t, nil)
	bad := netip.MustParseAddr("192.0.2.1") // not on this host
	hcs := []translate.HealthCheck{hc(32000, "web", 1)}
	if err := r.srv.Sync(hcs, []netip.Addr{nodeAddr, bad}); err == nil {
		t.Fatal("a listener on an address the host lacks went unreported")
	}
	if code, _ := r.get(t, 32000); code != 200 {
		t.Errorf("the good address: %d", code)
	}
	if err := r.srv.Sync(hcs, []netip.Addr{nodeAddr, bad}); err == nil {
		t.Fatal("the failed listener was not retried")
	}
}

// A health-check port answers anyone who reaches the node: it closes an
// idle keep-alive connection, cuts a body that trickles in, and serves at
// most a capped number of connections at once.
func TestPortLimits(t *testing.T) {
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
			r := newRigWith(t, Options{Limits: tt.lim})
			if err := r.srv.Sync([]translate.HealthCheck{hc(32000, "web", 1)}, []netip.Addr{nodeAddr}); err != nil {
				t.Fatal(err)
			}
			tt.probe(t, r.at(nodeAddr, 32000))
		})
	}
}

// With the default limits, a client that opens many connections to a
// health-check port and holds them idle or half-sent keeps only its share
// of them; a load balancer's checker, from another address, is still
// answered at once.
func TestOneClientCannotStarveAnother(t *testing.T) {
	r := newRig(t, nil)
	if err := r.srv.Sync([]translate.HealthCheck{hc(32000, "web", 1)}, []netip.Addr{nodeAddr}); err != nil {
		t.Fatal(err)
	}
	httplimittest.ClientsApart(t, r.at(nodeAddr, 32000), httplimit.MaxConnsPerClient, 200)
}

// view is a published view as the ports follow it.
type view struct {
	checks []translate.HealthCheck
	addrs  []netip.Addr
}

func (v view) HealthChecks() []translate.HealthCheck { return v.checks }
func (v view) NodePortAddrs() []netip.Addr           { return v.addrs }

// After each sync the ports follow the view it published, whether the
// sync failed or not: its ports with their local endpoint counts, on its
// NodePort addresses; a port the view no longer lists closes.
func TestPortsFollowThePublishedView(t *testing.T) {
	var published view
	r := newRigWith(t, Options{Published: func() View { return published }})
	for _, step := range []struct {
		name    string
		view    view
		syncErr error
		want    map[uint16]int // port: local endpoints; absent: closed
	}{
		{"nothing published", view{}, nil, map[uint16]int{}},
		{"two ports", view{[]translate.HealthCheck{hc(30100, "a", 2), hc(30101, "b", 0)}, []netip.Addr{nodeAddr}}, nil,
			map[uint16]int{30100: 2, 30101: 0}},
		{"a failed sync's view", view{[]translate.HealthCheck{hc(30100, "a", 1)}, []netip.Addr{nodeAddr}}, fmt.Errorf("sync failed"),
			map[uint16]int{30100: 1}},
	} {
		published = step.view
		r.srv.SyncBegan()
		r.srv.SyncEnded(step.syncErr)
		r.srv.mu.Lock()
		open := len(r.srv.ports)
		r.srv.mu.Unlock()
		if open != len(step.want) {
			t.Errorf("%s: %d ports open, want %d", step.name, open, len(step.want))
		}
		for port, local := range step.want {
			if _, b := r.get(t, port); b.LocalEndpoints != local {
				t.Errorf("%s: port %d reports %d local endpoints, want %d", step.name, port, b.LocalEndpoints, local)
			}
		}
	}
}
