package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/result"
)

// histAt is a histogram with count observations in the bucket ending at
// bound (bounds 0.5, 1, 2, 5, 60, 120, +Inf).
func histAt(bound float64, count float64) *result.Histogram {
	h := &result.Histogram{Count: count, Bounds: []float64{0.5, 1, 2, 5, 60, 120}}
	for _, b := range h.Bounds {
		c := 0.0
		if b >= bound {
			c = count
		}
		h.Buckets = append(h.Buckets, c)
	}
	return h
}

func tool(name string, serve, serveCPU float64) result.Tool {
	return result.Tool{Name: name, Run: 1, ServeSeconds: serve, ServeCPU: serveCPU, ColdSeconds: serve / 2,
		AddrsSeconds: serve, SetsSeconds: serve, SampleSeconds: serve, SampleSize: 100, SampleOK: 100,
		KubernetesSeconds: 3, SyncSeconds: 1, PeakRSSMB: 100, IdleCPU: 1, IdleWindow: 60,
		Latencies: []float64{0.1, 0.1, 0.1, 0.2}, ChangesCPU: 2, ChangesWall: 120, BurstSeconds: 3, OpsPerChange: -1}
}

// boot: three runs of every tool; kube-ipvs serves in 4, 5 and 40 s.
func boot(n int) result.Run {
	r := result.Run{N: n, EndpointsPerSvc: 10, ChangesRequested: 4, BurstRequested: 10, IdleSeconds: 60,
		ChangeTimeout: 60, RunsRequested: 3, SampleRequested: 100, Variant: "1 in 10 on the node", LocalEvery: 10}
	for run, ki := range []float64{4, 40, 5} {
		ipvs := tool(result.KubeProxyIPVS, 30, 60)
		ipvs.Latencies, ipvs.Timeouts = nil, 4 // none seen within the timeout
		ipvs.NetProgram = histAt(120, 4)       // kube-proxy says: between 60 and 120 s
		ipvs.ChangesCPU = 80                   // 40 CPU-s a minute
		nft := tool(result.KubeProxyNFT, 10, 12)
		nft.NetProgram = histAt(2, 4)
		// 0.5 CPU-s a minute in the window; its hour adds a 6 CPU-s full sync ÷ 60.
		nft.IdleCPU = 0.5
		nft.FullSyncCPU, nft.FullSyncSeconds, nft.FullSyncOwn, nft.FullSyncs = 6, 8, 5, 2
		k := tool(result.KubeIPVS, ki, 5)
		k.OpsPerChange = 4
		for _, t := range []*result.Tool{&ipvs, &nft, &k} {
			t.Run = run + 1
		}
		r.Tools = append(r.Tools, ipvs, nft, k)
	}
	return r
}

func TestTableMediansAndSpread(t *testing.T) {
	tab := Table([]result.Run{boot(5000), boot(1000)})
	for _, want := range []string{
		// kube-ipvs's median of 4, 40, 5 is 5; the spread shows the outlier.
		"| 1k | 1 in 10 on the node | time to serve | 30.0 s | 10.0 s | 5.00 s (4.00–40.0) | 6.00× | 2.00× |",
		"| 1k | 1 in 10 on the node | kubernetes.default after the informers' sync | 2.00 s | 2.00 s | 2.00 s | 1.00× | 1.00× |",
		"| 1k | 1 in 10 on the node | CPU a minute, one change every 2 s | 40.0 CPU-s | 1.00 CPU-s | 1.00 CPU-s | 40.0× | 1.00× |",
		// kube-proxy's own histogram: the p99's bucket ends at 120 s.
		"| 1k | 1 in 10 on the node | its own network programming, p99 ≤ | 120 s | 2.00 s | — | — | — |",
		"| 1k | 1 in 10 on the node | one change, max | — (+12 never seen) |",
		"| 1k | 1 in 10 on the node | kube-ipvs kernel operations per change | | | 4.0 | | |",
		// The window alone, then the hour: nftables mode's full sync spread over 60 minutes.
		"| 1k | 1 in 10 on the node | idle CPU a minute | 1.00 CPU-s over 60 s | 0.500 CPU-s over 60 s | 1.00 CPU-s over 60 s | 1.00× | 0.500× |",
		"| 1k | 1 in 10 on the node | CPU a minute at rest, over an hour with drift repair | 1.00 CPU-s | 0.599 CPU-s | 1.00 CPU-s | 1.00× | 0.599× |",
		"| 1k | 1 in 10 on the node | full sync at rest: CPU | — | 6.00 CPU-s | — | — | — |",
		"| 1k | 1 in 10 on the node | full sync at rest: wall time | — | 8.00 s | — | — | — |",
		"| 1k | 1 in 10 on the node | full sync at rest: its own duration | — | 5.00 s | — | — | — |",
	} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
	if strings.Index(tab, "| 1k |") > strings.Index(tab, "| 5k |") {
		t.Error("rows not in order of N")
	}
}

func TestGoalsAsData(t *testing.T) {
	g := GoalsTable([]result.Run{boot(10000)})
	for _, want := range []string{
		"| goal | measure | threshold | measured | verdict |",
		// 30 ÷ 5 = 6 ≥ 5: met; 10 ÷ 5 = 2 < 10: missed.
		"| serves ≥ 5× sooner than kube-proxy IPVS | time to serve | kube-proxy IPVS ÷ kube-ipvs ≥ 5.00 | kube-proxy IPVS: 30.0 s, kube-ipvs 5.00 s: 6.00× | met |",
		"| serves ≥ 10× sooner than kube-proxy nftables | time to serve | kube-proxy nftables ÷ kube-ipvs ≥ 10.0 | kube-proxy nftables: 10.0 s, kube-ipvs 5.00 s: 2.00× | missed |",
		"| kubernetes.default serves within 5 s of the informers' sync | kubernetes.default after the informers' sync | ≤ 5.00 s | kube-ipvs 2.00 s | met |",
		// kube-proxy's own p99 is above 60 s (its bucket's lower bound), not the harness's timeout.
		"| change p99 ≥ 20× lower than kube-proxy IPVS's own network programming p99 | one change, p99 | kube-proxy IPVS ÷ kube-ipvs ≥ 20.0 | kube-proxy IPVS: its network_programming_duration_seconds p99 > 60.0 s, kube-ipvs 0.200 s: 300× | met |",
		// 1.00 > 0.5 + 6 ÷ 60: missed over the hour, as in the window alone.
		"| " + idleGoal + " | CPU a minute at rest, over an hour with drift repair | ≤ kube-proxy nftables | kube-proxy nftables: 0.599 CPU-s, kube-ipvs 1.00 CPU-s | missed |",
		"| CPU a minute at one change every 2 s ≥ 20× lower than kube-proxy IPVS | CPU a minute, one change every 2 s | kube-proxy IPVS ÷ kube-ipvs ≥ 20.0 | kube-proxy IPVS: 40.0 CPU-s, kube-ipvs 1.00 CPU-s: 40.0× | met |",
	} {
		if !strings.Contains(g, want) {
			t.Errorf("goals lack %q:\n%s", want, g)
		}
	}
	if strings.Contains(g, "show the direction") {
		t.Error("a 10k boot said its verdicts only show the direction")
	}
}

const idleGoal = "CPU at rest, averaged over an hour with drift repair, no higher than kube-proxy nftables"

// verdict is the goal's verdict on r, met or missed.
func verdict(t *testing.T, r result.Run, goal string) string {
	t.Helper()
	for _, l := range strings.Split(GoalsTable([]result.Run{r}), "\n") {
		if strings.HasPrefix(l, "| "+goal+" |") {
			return l[strings.LastIndex(strings.TrimSuffix(l, " |"), "| ")+2 : len(l)-2]
		}
	}
	t.Fatalf("no goal %q", goal)
	return ""
}

// withTool is r with f applied to every run of the tool named name.
func withTool(r result.Run, name string, f func(t *result.Tool)) result.Run {
	r.Tools = append([]result.Tool(nil), r.Tools...)
	for i := range r.Tools {
		if r.Tools[i].Name == name {
			f(&r.Tools[i])
		}
	}
	return r
}

// The idle goal judges the hour, nftables mode's full sync in it, not the
// window alone; nftables mode without its full sync is not measured.
func TestGoalIdleHour(t *testing.T) {
	idle := func(cpu float64) func(t *result.Tool) { return func(t *result.Tool) { t.IdleCPU = cpu } }
	for _, tc := range []struct {
		what string
		r    result.Run
		want string
	}{
		// 0.55 a minute: above nftables mode's window (0.5), within its hour (0.599).
		{"window missed, hour met", withTool(boot(10000), result.KubeIPVS, idle(0.55)), "met"},
		{"window and hour missed", withTool(boot(10000), result.KubeIPVS, idle(0.65)), "missed"},
		// 0.4 a minute: within nftables mode's window, but its hour unknown.
		{"full sync not measured", withTool(withTool(boot(10000), result.KubeIPVS, idle(0.4)), result.KubeProxyNFT,
			func(t *result.Tool) { t.FullSyncSeconds = -1 }), "missed"},
	} {
		if got := verdict(t, tc.r, idleGoal); got != tc.want {
			t.Errorf("%s: %s, want %s\n%s", tc.what, got, tc.want, GoalsTable([]result.Run{tc.r}))
		}
	}
	r := withTool(boot(10000), result.KubeIPVS, idle(0.55))
	want := "kube-proxy nftables: 0.599 CPU-s, kube-ipvs 0.550 CPU-s | met |"
	if g := GoalsTable([]result.Run{r}); !strings.Contains(g, want) {
		t.Errorf("goals lack %q:\n%s", want, g)
	}
	short := withTool(r, result.KubeProxyNFT, func(t *result.Tool) { t.IdleShort = true })
	if g := GoalsTable([]result.Run{short}); !strings.Contains(g, "| a window shorter than two periods of whole reads: not judged | missed |") {
		t.Errorf("a window shorter than two periods was judged:\n%s", g)
	}
	r = withTool(r, result.KubeProxyNFT, func(t *result.Tool) { t.FullSyncSeconds = 0 })
	if g := GoalsTable([]result.Run{r}); !strings.Contains(g, "kube-ipvs 0.550 CPU-s; kube-proxy nftables not measured | missed |") {
		t.Errorf("a result without the full sync:\n%s", g)
	}
}

// Goals a wrong answer fails: a kube-ipvs that never served, an idle window
// shorter than two periods, a kube-proxy without its own histogram, and a
// kubernetes.default that never answered are each missed, never met.
func TestGoalsFail(t *testing.T) {
	r := boot(10000)
	for i := range r.Tools {
		if r.Tools[i].Name == result.KubeIPVS {
			r.Tools[i].ServeSeconds, r.Tools[i].KubernetesSeconds = -1, -1
			r.Tools[i].IdleCPU, r.Tools[i].IdleShort = 0, true
		}
		if r.Tools[i].Name == result.KubeProxyIPVS {
			r.Tools[i].NetProgram = nil
		}
	}
	for _, g := range []string{
		"serves ≥ 5× sooner than kube-proxy IPVS",
		"CPU until serving ≥ 5× lower than kube-proxy IPVS",
		"kubernetes.default serves within 5 s of the informers' sync",
		idleGoal,
		"change p99 ≥ 20× lower than kube-proxy IPVS's own network programming p99",
	} {
		if v := verdict(t, r, g); v != "missed" {
			t.Errorf("%s: %q, want missed", g, v)
		}
	}
}

func TestPlotWritesPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.png")
	if err := Plot([]result.Run{boot(1000), boot(5000)}, path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || len(data) < 1000 || string(data[1:4]) != "PNG" {
		t.Fatalf("not a PNG: %d bytes, %v", len(data), err)
	}
}

func TestSection(t *testing.T) {
	r1, r5 := boot(1000), boot(5000)
	r5.ChangesRequested, r5.ChangeBudget = 20, 120
	r1.Tools[0].Error = "table not full within 15m0s"
	r1.Tools[2].ServeSeconds, r1.Tools[2].ServeMissing = -1, "3 of 100 sampled Services answer from a pod"
	s := Section([]result.Run{r5, r1}, "benchmarks/x.png", 0)
	for _, want := range []string{
		"**compare only within this run**",
		"(4 at N = 1k, 20 at N = 5k within 2m0s a tool)",
		"- **N = 1k, 1 in 10 on the node, kube-proxy IPVS failed** (run 1): table not full within 15m0s",
		"- **N = 1k, 1 in 10 on the node, kube-ipvs never served** (run 1): 3 of 100 sampled Services answer from a pod",
		"3 runs of every tool per boot, the order rotated",
		"### Goals",
		"kube-proxy nftables mode's hourly full sync brought forward once at rest",
		"Endpoints 1 in 10 on the node, N = 5k (medians over 3 runs): the goals are set at N = 10k",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
}

// The load line says how the rolled Service was read: back to back, or
// with the observer's rest; without rolling updates it says nothing of them.
func TestSectionRollLoad(t *testing.T) {
	r := boot(1000)
	if s := Section([]result.Run{r}, "benchmarks/x.png", 0); strings.Contains(s, "the IPVS tools' rolling update") {
		t.Errorf("no roll, yet the load line names one:\n%s", s)
	}
	r.RollSizes, r.RollFor = []int{1000, 10000}, 60
	if s := Section([]result.Run{r}, "benchmarks/x.png", 0); !strings.Contains(s,
		"; the IPVS tools' rolling update of 1k, 10k endpoints, 60 s each, its destinations read back to back.") {
		t.Errorf("load line without the roll read back to back:\n%s", s)
	}
	r.RollRest = 1
	if s := Section([]result.Run{r}, "benchmarks/x.png", 0); !strings.Contains(s,
		"its destinations read with a rest of 1 × each read's time after it.") {
		t.Errorf("load line without the observer's rest:\n%s", s)
	}
}

// A kube-proxy that did not serve within the bound took at least the
// bound: the goal divides that, says so, and a bound too short to show
// the factor misses.
func TestGoalsServeBound(t *testing.T) {
	r := boot(10000)
	r.ColdTimeout = 900
	for i := range r.Tools {
		if r.Tools[i].Name == result.KubeProxyIPVS {
			r.Tools[i].ServeSeconds, r.Tools[i].ServeCPU = -1, 800
		}
	}
	g := GoalsTable([]result.Run{r})
	for _, want := range []string{
		"| serves ≥ 5× sooner than kube-proxy IPVS | time to serve | kube-proxy IPVS ÷ kube-ipvs ≥ 5.00 | kube-proxy IPVS: ≥ 900 s, kube-ipvs 5.00 s: ≥ 180× | met |",
		"| CPU until serving ≥ 5× lower than kube-proxy IPVS | CPU by then | kube-proxy IPVS ÷ kube-ipvs ≥ 5.00 | kube-proxy IPVS: ≥ 800 CPU-s, kube-ipvs 5.00 CPU-s: ≥ 160× | met |",
	} {
		if !strings.Contains(g, want) {
			t.Errorf("goals lack %q:\n%s", want, g)
		}
	}
	r.ColdTimeout = 20 // 20 s ÷ 5 s: the bound shows only 4×
	if g := GoalsTable([]result.Run{r}); !strings.Contains(g, "kube-ipvs 5.00 s: ≥ 4.00× | missed |") {
		t.Errorf("a bound too short met the goal:\n%s", g)
	}
}

const (
	rollLagGoal    = "rolling update of the largest Service (100 pods a second): the kernel lags by ≤ 2 s at p99"
	rollGrowthGoal = "rolling update: the CPU per endpoint change does not grow with the Service (largest ÷ smallest ≤ 1.5)"
)

// rolled gives every run of kube-ipvs two rolling updates: 1,000 endpoints
// at cpuSmall CPU-s and 10,000 at cpuBig, 300 steps of 30 changes each,
// the large one's steps seen after lag seconds (timeouts of them never).
func rolled(r result.Run, cpuSmall, cpuBig, lag float64, timeouts int) result.Run {
	r.RollSizes = []int{1000, 10000}
	return withTool(r, result.KubeIPVS, func(t *result.Tool) {
		var lags []float64
		for range 300 - timeouts {
			lags = append(lags, lag)
		}
		t.Rolls = []result.Roll{
			{Size: 1000, ServeSeconds: 1, Steps: 300, EndpointChanges: 9000, Lags: []float64{0.1}, CPU: cpuSmall, System: cpuSmall / 3, Wall: 30},
			{Size: 10000, ServeSeconds: 5, Steps: 300, EndpointChanges: 9000, Lags: lags, Timeouts: timeouts, CPU: cpuBig, System: cpuBig / 4, Wall: 30},
		}
	})
}

// The rolling update's goals: the large Service's lag at p99, steps never
// seen counting as the timeout, and the CPU per endpoint change of the
// large Service against the small one's; without rolls both are missed.
func TestGoalsRoll(t *testing.T) {
	for _, tc := range []struct {
		what        string
		r           result.Run
		lag, growth string
	}{
		{"flat and quick", rolled(boot(10000), 9, 12, 0.3, 0), "met", "met"},
		{"growing", rolled(boot(10000), 9, 90, 0.3, 0), "met", "missed"},
		{"slow", rolled(boot(10000), 9, 9, 2.5, 0), "missed", "met"},
		// 4 of 300 never seen: p99 ranks on a timeout (60 s).
		{"steps lost", rolled(boot(10000), 9, 9, 0.3, 4), "missed", "met"},
		{"not rolled", boot(10000), "missed", "missed"},
	} {
		if got := verdict(t, tc.r, rollLagGoal); got != tc.lag {
			t.Errorf("%s: lag goal %s, want %s\n%s", tc.what, got, tc.lag, GoalsTable([]result.Run{tc.r}))
		}
		if got := verdict(t, tc.r, rollGrowthGoal); got != tc.growth {
			t.Errorf("%s: growth goal %s, want %s\n%s", tc.what, got, tc.growth, GoalsTable([]result.Run{tc.r}))
		}
	}
	tab := Table([]result.Run{rolled(boot(10000), 9, 12, 0.3, 0)})
	for _, want := range []string{
		// 12 CPU-s over 9,000 changes: 1.33 ms each; against 1.00 ms: 1.33×.
		"| rolling update, largest Service: CPU per endpoint change (1k, 10k endpoints) | — | — | 1.33 CPU-ms |",
		"| rolling update: CPU per endpoint change, largest ÷ smallest Service (1k, 10k endpoints) | — | — | 1.33 × |  |  |",
		// User CPU: 9 ÷ 6 (12 less a quarter, 9 less a third).
		"| rolling update: user CPU per endpoint change (the kernel's left out), largest ÷ smallest Service (1k, 10k endpoints) | — | — | 1.50 × |  |  |",
	} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
}
