package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/result"
)

func run(n int) result.Run {
	return result.Run{N: n, EndpointsPerSvc: 10, ChangesRequested: 4, BurstRequested: 10, IdleSeconds: 60, Tools: []result.Tool{
		{Name: result.KubeProxyIPVS, ColdSeconds: 20, ColdCPU: 10, PeakRSSMB: 100, IdleCPU: 5, Latencies: []float64{2, 2, 3, 8}, ChangesCPU: 8, BurstSeconds: 30, OpsPerChange: -1},
		{Name: result.KubeProxyNFT, ColdSeconds: 10, ColdCPU: 3, PeakRSSMB: 90, IdleCPU: 0.02, Latencies: []float64{1.2, 1.2, 1.3, 1.3}, ChangesCPU: 2, BurstSeconds: -1, OpsPerChange: -1},
		{Name: result.KubeIPVS, ColdSeconds: 4, ColdCPU: 6, PeakRSSMB: 95, IdleCPU: 1, Latencies: []float64{0.1, 0.1, 0.1, 0.2}, Timeouts: 1, ChangesCPU: 0.5, BurstSeconds: 3, OpsPerChange: 4, BurstOps: 40},
	}}
}

func TestTable(t *testing.T) {
	tab := Table([]result.Run{run(5000), run(1000)})
	for _, want := range []string{
		"| 1k | cold start to the full table | 20.0 s | 10.0 s | 4.00 s | 5.00× | 2.50× |",
		"| 1k | one change, max | 8.00 s | 1.30 s | 0.200 s (+1 never seen) | 40.0× | 6.50× |",
		"| 1k | changes measured (of 4 asked) | 4 | 4 | 5 |  |  |",
		// 4 requested changes, one never seen: CPU per change still divides by 4.
		"| 1k | CPU per change (series CPU ÷ changes) | 2.00 CPU-s | 0.500 CPU-s | 0.100 CPU-s | 20.0× | 5.00× |",
		"| 1k | burst: converged (10 changes) | 30.0 s | not converged | 3.00 s | 10.0× | ∞ |",
		"| 1k | kube-ipvs kernel operations per change (burst: total) | | | 4.0 (40) | | |",
	} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
	if strings.Index(tab, "| 1k |") > strings.Index(tab, "| 5k |") {
		t.Error("rows not in order of N")
	}
}

func TestGoals(t *testing.T) {
	g := Goals([]result.Run{run(1000)})
	for _, want := range []string{
		"largest N is 1k",
		"| vs kube-proxy IPVS: cold start ≥ 5× faster | kube-proxy 20.0 s, kube-ipvs 4.00 s: 5.00× | met |",
		"| vs kube-proxy IPVS: change max ≤ 1 s (and none never seen) | kube-ipvs max 0.200 s, 1 never seen | missed |",
		"| vs kube-proxy nftables: idle CPU no higher | kube-ipvs 1.00 CPU-s, kube-proxy 0.020 CPU-s | missed |",
		"| vs kube-proxy nftables: faster cold start | kube-ipvs 4.00 s, kube-proxy 10.0 s | met |",
	} {
		if !strings.Contains(g, want) {
			t.Errorf("goals lack %q:\n%s", want, g)
		}
	}
}

// A kube-proxy that saw none of its changes within the timeout has a p99 of
// at least the timeout: the goal divides that bound, and says it is one.
func TestGoalsCountChangesNeverSeen(t *testing.T) {
	r := run(10000)
	r.ChangeTimeout = 60
	r.Tools[0].Latencies, r.Tools[0].Timeouts = nil, 4
	r.Tools[2].Timeouts = 0
	g := Goals([]result.Run{r})
	for _, want := range []string{
		"| vs kube-proxy IPVS: change p99 ≥ 20× lower | kube-proxy at least 60.0 s (4 of 4 never seen within it), kube-ipvs 0.200 s: ≥ 300× | met |",
		"| vs kube-proxy nftables: lower change latency p99 | kube-proxy 1.30 s, kube-ipvs 0.200 s | met |",
	} {
		if !strings.Contains(g, want) {
			t.Errorf("goals lack %q:\n%s", want, g)
		}
	}
	// Without the timeout recorded (a run before it was), nothing to divide.
	r.ChangeTimeout = 0
	if g := Goals([]result.Run{r}); !strings.Contains(g, "| vs kube-proxy IPVS: change p99 ≥ 20× lower | not measured | missed |") {
		t.Errorf("a bound that was not recorded was used:\n%s", g)
	}
	// kube-ipvs's own p99 on a timeout is no value to meet a goal with.
	r.ChangeTimeout, r.Tools[2].Latencies, r.Tools[2].Timeouts = 60, []float64{0.1}, 3
	if g := Goals([]result.Run{r}); !strings.Contains(g, "(kube-ipvs's is a bound too) | missed |") {
		t.Errorf("a censored kube-ipvs p99 met a goal:\n%s", g)
	}
}

func TestPlotWritesPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.png")
	if err := Plot([]result.Run{run(1000), run(5000)}, path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || len(data) < 1000 || string(data[1:4]) != "PNG" {
		t.Fatalf("not a PNG: %d bytes, %v", len(data), err)
	}
}

func TestSection(t *testing.T) {
	r1, r5 := run(1000), run(5000)
	r5.ChangesRequested, r5.ChangeBudget = 20, 120
	r1.Tools[0].Error = "table not full within 15m0s"
	s := Section([]result.Run{r5, r1}, "benchmarks/x.png", 0)
	for _, want := range []string{
		"**compare only within this run**",
		"(4 at N = 1k, 20 at N = 5k within 2m0s a tool)",
		"- **N = 1k, kube-proxy IPVS failed**: table not full within 15m0s",
		"![change latency, cold start, idle CPU and peak RSS against N](benchmarks/x.png)",
		"largest N is 5k",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
}
