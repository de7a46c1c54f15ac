// Package report turns the runs of one `make bench` into the section of
// docs/benchmarks.md (context, one table of medians with ratios, the goals
// as data, met or missed) and the plot beside it.
package report

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/result"
)

// Tools in column order.
var Tools = []string{result.KubeProxyIPVS, result.KubeProxyNFT, result.KubeIPVS}

// ToolTitle is how the doc names a tool.
var ToolTitle = map[string]string{
	result.KubeProxyIPVS: "kube-proxy IPVS",
	result.KubeProxyNFT:  "kube-proxy nftables",
	result.KubeIPVS:      "kube-ipvs",
}

// metric is one row: a value per tool, lower is better.
type metric struct {
	name  string
	unit  string
	value func(r result.Run, t result.Tool) float64
}

func cpuPerChange(r result.Run, t result.Tool) float64 {
	n := len(t.Latencies) + t.Timeouts
	if n == 0 {
		return math.NaN()
	}
	return t.ChangesCPU / float64(n)
}

func burstSeconds(r result.Run, t result.Tool) float64 {
	if t.BurstSeconds < 0 {
		return math.Inf(1) // did not converge
	}
	return t.BurstSeconds
}

// neverIsInf: -1 (never within the bound) reads as +Inf, so that medians
// and goals treat it as slower than any time.
func neverIsInf(v float64) float64 {
	if v < 0 {
		return math.Inf(1)
	}
	return v
}

// ipvsOnly: a part of serving that nftables mode has no such thing as.
func ipvsOnly(f func(t result.Tool) float64) func(r result.Run, t result.Tool) float64 {
	return func(r result.Run, t result.Tool) float64 {
		if t.Name == result.KubeProxyNFT {
			return math.NaN()
		}
		return neverIsInf(f(t))
	}
}

// kubernetesAfterSync is kubernetes.default's first answer after the
// informers' sync, or after the process start when its log does not say
// (SyncSeconds -1). +Inf: never answered.
func kubernetesAfterSync(r result.Run, t result.Tool) float64 {
	if t.KubernetesSeconds < 0 {
		return math.Inf(1)
	}
	return t.KubernetesSeconds - max(t.SyncSeconds, 0)
}

// hist reads one quantile of kube-proxy's own histogram (the bucket's upper bound).
func hist(h func(t result.Tool) *result.Histogram, q float64) func(r result.Run, t result.Tool) float64 {
	return func(r result.Run, t result.Tool) float64 { return h(t).Quantile(q) }
}

// fullSyncPart is one part of the full sync at rest (nftables mode), NaN
// where none was measured.
func fullSyncPart(f func(t result.Tool) float64) func(r result.Run, t result.Tool) float64 {
	return func(r result.Run, t result.Tool) float64 {
		if t.FullSyncSeconds <= 0 {
			return math.NaN()
		}
		return f(t)
	}
}

var (
	syncRules  = func(t result.Tool) *result.Histogram { return t.SyncRules }
	netProgram = func(t result.Tool) *result.Histogram { return t.NetProgram }
)

// Metric names the goals refer to.
const (
	MServe       = "time to serve"
	MServeCPU    = "CPU by then"
	MKubernetes  = "kubernetes.default after the informers' sync"
	MPeakRSS     = "peak RSS"
	MP50         = "one change, p50"
	MP99         = "one change, p99"
	MMax         = "one change, max"
	MCPUMinute   = "CPU a minute, one change every 2 s"
	MIdleMinute  = "idle CPU a minute"
	MIdleHour    = "CPU a minute at rest, over an hour with drift repair"
	MNetProgP99  = "its own network programming, p99 ≤"
	MSyncRuleP99 = "its own rules sync, p99 ≤"
	MRollP99     = "rolling update, largest Service: lag p99"
	MRollGrowth  = "rolling update: CPU per endpoint change, largest ÷ smallest Service"
)

var metrics = []metric{
	{MServe, "s", func(r result.Run, t result.Tool) float64 { return neverIsInf(t.ServeSeconds) }},
	{MServeCPU, "CPU-s", func(r result.Run, t result.Tool) float64 {
		if t.ServeSeconds < 0 {
			return math.NaN()
		}
		return t.ServeCPU
	}},
	{"… the table whole", "s", func(r result.Run, t result.Tool) float64 { return t.ColdSeconds }},
	{"… every ClusterIP bound", "s", ipvsOnly(func(t result.Tool) float64 { return t.AddrsSeconds })},
	{"… sets and rules in place", "s", ipvsOnly(func(t result.Tool) float64 { return t.SetsSeconds })},
	{"… the sample answering from a pod", "s", func(r result.Run, t result.Tool) float64 { return neverIsInf(t.SampleSeconds) }},
	{"kubernetes.default answers", "s", func(r result.Run, t result.Tool) float64 { return neverIsInf(t.KubernetesSeconds) }},
	{MKubernetes, "s", kubernetesAfterSync},
	{"start work done (quiet)", "s", func(r result.Run, t result.Tool) float64 { return neverIsInf(t.SettleSeconds) }},
	{"start work CPU", "CPU-s", func(r result.Run, t result.Tool) float64 { return t.SettleCPU }},
	{MPeakRSS, "MB", func(r result.Run, t result.Tool) float64 { return t.PeakRSSMB }},
	{"changes measured", "", func(r result.Run, t result.Tool) float64 { return float64(len(t.Latencies) + t.Timeouts) }},
	{MP50, "s", func(r result.Run, t result.Tool) float64 { return result.Percentile(t.Latencies, 50) }},
	{MP99, "s", func(r result.Run, t result.Tool) float64 {
		v, _ := result.CensoredPercentile(t.Latencies, t.Timeouts, r.ChangeTimeout, 99)
		return v
	}},
	{MMax, "s", func(r result.Run, t result.Tool) float64 { return result.Max(t.Latencies) }},
	{MCPUMinute, "CPU-s", func(r result.Run, t result.Tool) float64 { return t.CPUPerMinute() }},
	{MSyncRuleP99, "s", hist(syncRules, 0.99)},
	{MNetProgP99, "s", hist(netProgram, 0.99)},
	{"burst: converged", "s", burstSeconds},
	{"burst: CPU", "CPU-s", func(r result.Run, t result.Tool) float64 { return t.BurstCPU }},
	{MIdleMinute, "CPU-s", idle},
	{MIdleHour, "CPU-s", idleHour},
	{"full sync at rest: CPU", "CPU-s", fullSyncPart(func(t result.Tool) float64 { return t.FullSyncCPU })},
	{"full sync at rest: wall time", "s", fullSyncPart(func(t result.Tool) float64 { return t.FullSyncSeconds })},
	{"full sync at rest: its own duration", "s", fullSyncPart(func(t result.Tool) float64 { return t.FullSyncOwn })},
	{MRollP99, "s", rollOn(true, func(r result.Run, ro result.Roll) float64 {
		v, _ := result.CensoredPercentile(ro.Lags, ro.Timeouts, r.ChangeTimeout, 99)
		return v
	})},
	{"rolling update, largest Service: lag max", "s", rollOn(true, func(_ result.Run, ro result.Roll) float64 { return result.Max(ro.Lags) })},
	{"rolling update, largest Service: steps not seen", "", rollOn(true, func(_ result.Run, ro result.Roll) float64 { return float64(ro.Timeouts) })},
	{"rolling update, largest Service: CPU per endpoint change", "CPU-ms", rollOn(true, func(_ result.Run, ro result.Roll) float64 { return ro.CPUPerChange() * 1000 })},
	{"rolling update, smallest Service: CPU per endpoint change", "CPU-ms", rollOn(false, func(_ result.Run, ro result.Roll) float64 { return ro.CPUPerChange() * 1000 })},
	{MRollGrowth, "×", rollGrowth(result.Roll.CPUPerChange)},
	{"rolling update: user CPU per endpoint change (the kernel's left out), largest ÷ smallest Service", "×", rollGrowth(result.Roll.UserPerChange)},
}

// rollOn is f of the tool's rolling update of its largest Service (or
// smallest), NaN when it made none or that Service never went live.
func rollOn(largest bool, f func(result.Run, result.Roll) float64) func(r result.Run, t result.Tool) float64 {
	return func(r result.Run, t result.Tool) float64 {
		ro, ok := rollOf(t, largest)
		if !ok {
			return math.NaN()
		}
		return f(r, ro)
	}
}

// rollOf is the tool's rolling update of its largest (or smallest)
// Service that went live.
func rollOf(t result.Tool, largest bool) (result.Roll, bool) {
	var best result.Roll
	ok := false
	for _, ro := range t.Rolls {
		if ro.ServeSeconds < 0 || ro.Steps == 0 {
			continue
		}
		if !ok || largest && ro.Size > best.Size || !largest && ro.Size < best.Size {
			best, ok = ro, true
		}
	}
	return best, ok
}

// rollGrowth is how much more an endpoint change cost, by perChange, in
// the largest Service rolled than in the smallest: 1 when a change costs
// what it changes, whatever the Service holds. NaN with fewer than two
// sizes.
func rollGrowth(perChange func(result.Roll) float64) func(r result.Run, t result.Tool) float64 {
	return func(r result.Run, t result.Tool) float64 {
		big, ok1 := rollOf(t, true)
		small, ok2 := rollOf(t, false)
		if !ok1 || !ok2 || big.Size == small.Size || perChange(small) <= 0 {
			return math.NaN()
		}
		return perChange(big) / perChange(small)
	}
}

// metricNamed is the metric of that name.
func metricNamed(name string) metric {
	for _, m := range metrics {
		if m.name == name {
			return m
		}
	}
	panic("report: no metric " + name) // a goal naming no metric is a bug in this file
}

// stat is one measure of one tool over a boot's runs: the median, the
// spread (min and max) and how many runs had a value.
type stat struct {
	med, lo, hi float64
	n           int
	failed      bool // some run of the tool failed
}

// statOf is f over every run of tool in r; NaN when no run has a value.
func statOf(r result.Run, tool string, f func(result.Run, result.Tool) float64) stat {
	var xs []float64
	st := stat{med: math.NaN(), lo: math.NaN(), hi: math.NaN()}
	for _, t := range r.All(tool) {
		if t.Error != "" {
			st.failed = true
		}
		v := f(r, t)
		if t.Error != "" && v == 0 || math.IsNaN(v) {
			continue
		}
		xs = append(xs, v)
	}
	if len(xs) == 0 {
		return st
	}
	sort.Float64s(xs)
	st.n, st.lo, st.hi = len(xs), xs[0], xs[len(xs)-1]
	if len(xs)%2 == 1 {
		st.med = xs[len(xs)/2]
	} else {
		a, b := xs[len(xs)/2-1], xs[len(xs)/2]
		if math.IsInf(b, 1) {
			st.med = b
		} else {
			st.med = (a + b) / 2
		}
	}
	return st
}

// Table is the one table of a run set: a row per boot (N, variant) and
// measure, a column per tool (the median over the boot's runs, with the
// spread when there were several), and the ratio of each kube-proxy
// mode's median to kube-ipvs's (above 1: kube-ipvs is lower, i.e.
// better, by that factor).
func Table(runs []result.Run) string {
	var b strings.Builder
	b.WriteString("| N | endpoints | measure | kube-proxy IPVS | kube-proxy nftables | kube-ipvs | IPVS ÷ kube-ipvs | nftables ÷ kube-ipvs |\n")
	b.WriteString("|---:|---|---|---:|---:|---:|---:|---:|\n")
	for _, r := range sorted(runs) {
		for _, m := range metrics {
			name := m.name
			switch {
			case strings.HasPrefix(name, "burst"):
				name = fmt.Sprintf("%s (%d changes)", name, r.BurstRequested)
			case name == "changes measured":
				name = fmt.Sprintf("changes measured (of %d asked)", r.ChangesRequested)
			case name == "… the sample answering from a pod":
				name = fmt.Sprintf("… the sample (%d Services) answering from a pod", r.SampleRequested)
			case strings.HasPrefix(name, "rolling update"):
				name = fmt.Sprintf("%s (%s endpoints)", name, rollSizesText(r.RollSizes))
			}
			vals := map[string]float64{}
			cells := []string{}
			for _, tool := range Tools {
				st := statOf(r, tool, m.value)
				vals[tool] = st.med
				cells = append(cells, statCell(st, m.unit, r, tool, m.name))
			}
			r1, r2 := ratio(vals[result.KubeProxyIPVS], vals[result.KubeIPVS]), ratio(vals[result.KubeProxyNFT], vals[result.KubeIPVS])
			if m.unit == "" || m.unit == "×" {
				r1, r2 = "", ""
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", shortN(r.N), variant(r), name, strings.Join(cells, " | "), r1, r2)
		}
		if st := statOf(r, result.KubeIPVS, func(_ result.Run, t result.Tool) float64 {
			if t.OpsPerChange < 0 {
				return math.NaN()
			}
			return t.OpsPerChange
		}); st.n > 0 {
			fmt.Fprintf(&b, "| %s | %s | kube-ipvs kernel operations per change | | | %.1f | | |\n", shortN(r.N), variant(r), st.med)
		}
	}
	return b.String()
}

// variant names where a boot's endpoints were.
func variant(r result.Run) string {
	if r.Variant == "" {
		return result.VariantNoNode
	}
	return r.Variant
}

// statCell is a median, and its spread when there was more than one run.
func statCell(st stat, unit string, r result.Run, tool, name string) string {
	s := "—"
	if st.n > 0 {
		s = cell(st.med, unit, name)
	}
	if st.n > 1 && unit != "" && !(st.lo == st.hi) {
		s += fmt.Sprintf(" (%s–%s)", bare(st.lo, name), bare(st.hi, name))
	}
	if name == MMax {
		never := 0
		for _, t := range r.All(tool) {
			never += t.Timeouts
		}
		if never > 0 {
			s += fmt.Sprintf(" (+%d never seen)", never)
		}
	}
	if name == MIdleMinute && st.n > 0 {
		if ts := r.All(tool); len(ts) > 0 {
			s += fmt.Sprintf(" over %.0f s", ts[0].IdleWindow)
			if ts[0].IdleShort {
				s += " (< 2 periods)"
			}
		}
	}
	if st.failed {
		s += " (a run failed)"
	}
	return s
}

// bare is a value without its unit (Inf as "never").
func bare(v float64, name string) string {
	if math.IsInf(v, 1) {
		return "never"
	}
	return num(v)
}

func cell(v float64, unit string, name string) string {
	var s string
	switch {
	case math.IsInf(v, 1) && name == "start work done (quiet)":
		s = "never quiet"
	case math.IsInf(v, 1) && strings.HasPrefix(name, "burst"):
		s = "not converged"
	case math.IsInf(v, 1) && strings.HasPrefix(name, "its own"):
		s = "> largest bucket"
	case math.IsInf(v, 1):
		s = "never"
	case unit == "":
		s = fmt.Sprintf("%.0f", v)
	case math.IsNaN(v):
		s = "—"
	case unit == "MB":
		s = fmt.Sprintf("%.0f MB", v)
	default:
		s = num(v) + " " + unit
	}
	return s
}

// num prints 3 significant digits, never in e-notation.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	case a >= 0.01:
		return fmt.Sprintf("%.3f", v)
	default:
		return fmt.Sprintf("%.4f", v)
	}
}

// ratio of other to kube-ipvs, "—" when either is missing or zero.
func ratio(other, ki float64) string {
	if math.IsNaN(other) || math.IsNaN(ki) || ki == 0 || math.IsInf(ki, 0) {
		return "—"
	}
	if math.IsInf(other, 1) {
		return "∞"
	}
	return num(other/ki) + "×"
}

// rollSizesText lists the rolled Services' sizes, "none" when none was.
func rollSizesText(sizes []int) string {
	if len(sizes) == 0 {
		return "none rolled"
	}
	parts := make([]string, len(sizes))
	for i, n := range sizes {
		parts[i] = shortN(n)
	}
	return strings.Join(parts, ", ")
}

func shortN(n int) string {
	if n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// sorted orders boots by variant (as given: the first seen first), then N.
func sorted(runs []result.Run) []result.Run {
	s := append([]result.Run(nil), runs...)
	rank := map[string]int{}
	for _, r := range runs {
		if _, ok := rank[variant(r)]; !ok {
			rank[variant(r)] = len(rank)
		}
	}
	sort.SliceStable(s, func(i, j int) bool {
		if a, b := rank[variant(s[i])], rank[variant(s[j])]; a != b {
			return a < b
		}
		return s[i].N < s[j].N
	})
	return s
}
