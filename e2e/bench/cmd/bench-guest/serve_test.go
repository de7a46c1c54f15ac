package main

import (
	"encoding/json"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/protocol"
	"github.com/kube-ipvs/kube-ipvs/e2e/bench/result"
)

func TestParseAddrs(t *testing.T) {
	out := "7: kube-ipvs0    inet 10.96.1.0/32 scope global kube-ipvs0\\       valid_lft forever preferred_lft forever\n" +
		"7: kube-ipvs0    inet 10.96.0.1/32 scope global kube-ipvs0\\       valid_lft forever preferred_lft forever\n"
	got := parseAddrs(out)
	if len(got) != 2 || !got["10.96.1.0"] || !got["10.96.0.1"] {
		t.Fatalf("got %v", got)
	}
}

func TestParseLocalRoutes(t *testing.T) {
	out := "local 10.96.1.0 proto 243 scope host \n" +
		"local 10.96.0.1 proto kernel scope host src 10.96.0.1 \n" +
		"broadcast 10.96.0.255 proto kernel scope link src 10.96.0.1 \n"
	got := parseLocalRoutes(out)
	if len(got) != 2 || !got["10.96.1.0"] || !got["10.96.0.1"] {
		t.Fatalf("got %v", got)
	}
}

// Every ClusterIP frontend and a hairpin member per local endpoint, in the
// tool's own sets; kube-proxy's nftables mode asks for nothing beyond its table.
func TestNetfilterWant(t *testing.T) {
	p := protocol.Plan{VIPs: []string{"10.96.1.0", "10.96.1.1"}, Local: []string{"10.128.0.0"}}
	save := `create KUBE-IPVS-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 1048576
add KUBE-IPVS-CLUSTER-IP 10.96.1.0,tcp:80
add KUBE-IPVS-CLUSTER-IP 10.96.1.1,tcp:80
add KUBE-IPVS-FRONTENDS 10.96.1.0,tcp:80
add KUBE-IPVS-FRONTENDS 10.96.1.1,tcp:80
add KUBE-IPVS-VIPS 10.96.1.0
add KUBE-IPVS-VIPS 10.96.1.1
add KUBE-CLUSTER-IP 10.96.1.0,tcp:80
add KUBE-CLUSTER-IP 10.96.1.1,tcp:80
add KUBE-LOOP-BACK 10.128.0.0,tcp:8080,10.128.0.0
`
	nat := "*nat\n-A PREROUTING -j KUBE-IPVS-SERVICES\n-A OUTPUT -j KUBE-IPVS-SERVICES\n-A POSTROUTING -j KUBE-IPVS-POSTROUTING\n" +
		"-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING\n"
	sets := parseIPSetSave(save)
	if m := wantNetfilter(result.KubeProxyIPVS, p).missing(sets, nat); m != "" {
		t.Errorf("kube-proxy IPVS: missing %q", m)
	}
	// kube-ipvs lacks its hairpin member for the local endpoint.
	if m := wantNetfilter(result.KubeIPVS, p).missing(sets, nat); m != "KUBE-IPVS-LOOP-BACK lacks 1 (10.128.0.0,tcp:8080,10.128.0.0)" {
		t.Errorf("kube-ipvs: missing %q", m)
	}
	if m := wantNetfilter(result.KubeIPVS, p).missing(sets, "*nat\n"); !strings.Contains(m, `no nat rule "-A OUTPUT -j KUBE-IPVS-SERVICES"`) {
		t.Errorf("kube-ipvs without its rules: missing %q", m)
	}
	if !wantNetfilter(result.KubeProxyNFT, p).empty() {
		t.Error("nftables mode: want nothing beyond its table")
	}
}

func TestLogSynced(t *testing.T) {
	ki := "2026-12-03T14:00:00.000Z\tINFO\tsource synced\t{\"source\": \"services\"}\n" +
		"2026-12-03T14:00:00.000Z\tINFO\tsource synced\t{\"source\": \"endpointslices\"}\n" +
		"2026-12-03T14:00:00.000Z\tINFO\tsource synced\t{\"source\": \"node\"}\n"
	if logSynced(ki, result.KubeIPVS) {
		t.Error("kube-ipvs synced without its Nodes source")
	}
	if !logSynced(ki+"2026-12-03T14:00:01.000Z\tINFO\tsource synced\t{\"source\": \"nodes\"}\n", result.KubeIPVS) {
		t.Error("kube-ipvs: four sources synced, not seen")
	}
	kp := `I1203 14:00:00.1 1 shared_informer.go:356] "Caches are synced" controller="service config"` + "\n"
	if logSynced(kp, result.KubeProxyIPVS) {
		t.Error("kube-proxy synced without its endpoint slice config")
	}
	if !logSynced(kp+`I1203 14:00:00.2 1 shared_informer.go:356] "Caches are synced" controller="endpoint slice config"`+"\n", result.KubeProxyNFT) {
		t.Error("kube-proxy: both configs synced, not seen")
	}
}

func TestHistDelta(t *testing.T) {
	before := `kubeproxy_network_programming_duration_seconds_bucket{le="1"} 2
kubeproxy_network_programming_duration_seconds_bucket{le="60"} 3
kubeproxy_network_programming_duration_seconds_bucket{le="+Inf"} 3
kubeproxy_network_programming_duration_seconds_sum 10
kubeproxy_network_programming_duration_seconds_count 3
`
	after := `kubeproxy_network_programming_duration_seconds_bucket{le="1"} 2
kubeproxy_network_programming_duration_seconds_bucket{le="60"} 5
kubeproxy_network_programming_duration_seconds_bucket{le="+Inf"} 13
kubeproxy_network_programming_duration_seconds_sum 1000
kubeproxy_network_programming_duration_seconds_count 13
`
	h := histDelta(before, after, "kubeproxy_network_programming_duration_seconds")
	if h == nil || h.Count != 10 || h.Sum != 990 {
		t.Fatalf("got %+v", h)
	}
	// 10 in the window: 2 within 60 s, 8 beyond: p50 and p99 past 60 s.
	if q := h.Quantile(0.5); !math.IsInf(q, 1) {
		t.Errorf("p50 ≤ %v, want beyond the largest bound", q)
	}
	if q := h.QuantileAbove(0.99); q != 60 {
		t.Errorf("p99 > %v, want 60", q)
	}
	// The result goes to the host as JSON, which has no infinity.
	if _, err := json.Marshal(h); err != nil {
		t.Errorf("not JSON: %v", err)
	}
	if histDelta(before, "", "kubeproxy_network_programming_duration_seconds") != nil {
		t.Error("a histogram absent after the window: want nil")
	}
}

// The agent's own announcement, in its text format (durations in seconds)
// and its JSON format (duration strings), names the wait the idle window
// must span.
func TestDriftNext(t *testing.T) {
	for _, tc := range []struct {
		line string
		want time.Duration
	}{
		{"2026-12-03T17:14:54.700Z\tINFO\trescan\trescan: the next read waits longer than the sync period, the kernel being slow to read\t{\"took\": 6.1035, \"period\": 30, \"next\": 610.35}\n", 610350 * time.Millisecond},
		{`{"ts":1764781200000.5,"logger":"rescan","msg":"rescan: the next read waits longer than the sync period, the kernel being slow to read","v":0,"took":"3.2s","period":"30s","next":"5m20s"}` + "\n", 320 * time.Second},
	} {
		g := reDriftNext.FindStringSubmatch(tc.line)
		if g == nil {
			t.Fatalf("no match in %q", tc.line)
		}
		if d, ok := driftNext(g); !ok || d != tc.want {
			t.Errorf("%q: got %v (%v), want %v", tc.line, d, ok, tc.want)
		}
	}
}

func TestRunOrder(t *testing.T) {
	tools := []string{"a", "b", "c"}
	got := [][]string{runOrder(tools, 1), runOrder(tools, 2), runOrder(tools, 3)}
	want := "a b c|b c a|c a b"
	var s []string
	for _, o := range got {
		s = append(s, strings.Join(o, " "))
	}
	if strings.Join(s, "|") != want {
		t.Fatalf("got %v, want %s", s, want)
	}
}

func TestSamplerSpread(t *testing.T) {
	var vips []string
	for i := 0; i < 1000; i++ {
		vips = append(vips, protocol.VIP(i).String())
	}
	s := newSampler(nil, vips, 80, 100)
	if len(s.targets) != 100 || s.targets[0] != "10.96.1.0:80" || s.targets[99] != protocol.VIP(999).String()+":80" {
		t.Fatalf("targets %d, first %s, last %s", len(s.targets), s.targets[0], s.targets[len(s.targets)-1])
	}
	if s := newSampler(nil, vips[:10], 80, 100); len(s.targets) != 10 {
		t.Fatalf("a sample larger than N: %d targets", len(s.targets))
	}
}

func TestNotWhole(t *testing.T) {
	a, b := netip.MustParseAddr("10.96.1.0"), netip.MustParseAddr("10.96.1.1")
	r1, r2 := netip.MustParseAddr("10.128.0.0"), netip.MustParseAddr("10.128.0.1")
	tab := ipvsTable{a: {r1: 1, r2: 1}}
	if m := notWhole(tab, []netip.Addr{a}, 2); m != "" {
		t.Errorf("whole table: %q", m)
	}
	tab[a][r2] = 0
	if m := notWhole(tab, []netip.Addr{a, b}, 2); m != "2 virtual servers without 2 live real servers (10.96.1.0: 1 live of 2 real servers)" {
		t.Errorf("got %q", m)
	}
}
