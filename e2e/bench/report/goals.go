package report

import (
	"fmt"
	"math"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/result"
)

// GoalN is where the goals are set.
const GoalN = 10000

// Comparisons a goal makes of kube-ipvs's median.
const (
	// TimesLower: the other tool's median ÷ kube-ipvs's is at least Threshold.
	TimesLower = "times lower"
	// NoHigher: kube-ipvs's median is at most the other tool's.
	NoHigher = "no higher"
	// Lower: kube-ipvs's median is below the other tool's.
	Lower = "lower"
	// AtMost: kube-ipvs's median is at most Threshold (in the measure's unit).
	AtMost = "at most"
)

// Goal is one goal, as data: a measure (a row of the table), how
// kube-ipvs's median must compare, and with what. A goal whose values are
// missing, never reached or only bounded the wrong way is missed: nothing
// meets a goal by not being measured.
type Goal struct {
	Goal      string
	Measure   string  // a metric's name
	Against   string  // the other tool; "" for AtMost
	Compare   string  // TimesLower, NoHigher, Lower or AtMost
	Threshold float64 // TimesLower's factor, AtMost's bound
}

// Goals are the goals every boot is judged on (at N = 10k; a smaller N
// shows the direction).
var Goals = []Goal{
	{"serves ≥ 5× sooner than kube-proxy IPVS", MServe, result.KubeProxyIPVS, TimesLower, 5},
	{"serves ≥ 10× sooner than kube-proxy nftables", MServe, result.KubeProxyNFT, TimesLower, 10},
	{"CPU until serving ≥ 5× lower than kube-proxy IPVS", MServeCPU, result.KubeProxyIPVS, TimesLower, 5},
	{"CPU until serving ≥ 10× lower than kube-proxy nftables", MServeCPU, result.KubeProxyNFT, TimesLower, 10},
	{"kubernetes.default serves within 5 s of the informers' sync", MKubernetes, "", AtMost, 5},
	{"CPU at rest, averaged over an hour with drift repair, no higher than kube-proxy nftables", MIdleHour, result.KubeProxyNFT, NoHigher, 0},
	{"change p99 ≥ 20× lower than kube-proxy IPVS's own network programming p99", MP99, result.KubeProxyIPVS, TimesLower, 20},
	{"change p99 lower than kube-proxy nftables's own network programming p99", MP99, result.KubeProxyNFT, Lower, 0},
	{"change max ≤ 1 s, none never seen", MMax, "", AtMost, 1},
	{"CPU a minute at one change every 2 s ≥ 20× lower than kube-proxy IPVS", MCPUMinute, result.KubeProxyIPVS, TimesLower, 20},
	{"CPU a minute at one change every 2 s no higher than kube-proxy nftables", MCPUMinute, result.KubeProxyNFT, NoHigher, 0},
	{"peak RSS no higher than kube-proxy IPVS", MPeakRSS, result.KubeProxyIPVS, NoHigher, 0},
	{"peak RSS no higher than kube-proxy nftables", MPeakRSS, result.KubeProxyNFT, NoHigher, 0},
	{"rolling update of the largest Service (100 pods a second): the kernel lags by ≤ 2 s at p99", MRollP99, "", AtMost, 2},
	{"rolling update: the CPU per endpoint change does not grow with the Service (largest ÷ smallest ≤ 1.5)", MRollGrowth, "", AtMost, 1.5},
}

// threshold renders the goal's threshold.
func (g Goal) threshold() string {
	m := metricNamed(g.Measure)
	switch g.Compare {
	case TimesLower:
		return fmt.Sprintf("%s ÷ kube-ipvs ≥ %s", ToolTitle[g.Against], num(g.Threshold))
	case AtMost:
		return fmt.Sprintf("≤ %s %s", num(g.Threshold), m.unit)
	case NoHigher:
		return "≤ " + ToolTitle[g.Against]
	}
	return "< " + ToolTitle[g.Against]
}

// otherValue is the other tool's side of a latency goal: kube-proxy's own
// network programming histogram where the goal names it (the bucket's
// lower bound: what kube-proxy certainly took, so the bucket's width never
// meets a goal for kube-ipvs), else the same measure's median.
func (g Goal) otherValue(r result.Run) (float64, string) {
	if g.Measure == MP99 {
		st := statOf(r, g.Against, func(_ result.Run, t result.Tool) float64 { return t.NetProgram.QuantileAbove(0.99) })
		return st.med, fmt.Sprintf("its network_programming_duration_seconds p99 > %s s", bare(st.med, ""))
	}
	st := statOf(r, g.Against, metricNamed(g.Measure).value)
	return st.med, bare(st.med, g.Measure) + " " + metricNamed(g.Measure).unit
}

// serveBound is a serving measure with a tool that did not serve within
// the run's bound taken at the bound: the time at least the bound, the CPU
// at least what it had used by then. atLeast says some run was bounded.
func serveBound(r result.Run, tool, measure string) (st stat, atLeast bool) {
	st = statOf(r, tool, func(_ result.Run, t result.Tool) float64 {
		if t.ServeSeconds >= 0 {
			if measure == MServe {
				return t.ServeSeconds
			}
			return t.ServeCPU
		}
		atLeast = true
		switch {
		case measure == MServeCPU && t.ServeCPU > 0:
			return t.ServeCPU
		case measure == MServe && r.ColdTimeout > 0:
			return r.ColdTimeout
		}
		return math.NaN()
	})
	return st, atLeast
}

// idleShort: a run of kube-ipvs or of the other tool had an idle window
// shorter than two periods of its whole reads, so its hour at rest is not
// known.
func idleShort(r result.Run, other string) bool {
	for _, t := range append(r.All(result.KubeIPVS), r.All(other)...) {
		if t.IdleShort {
			return true
		}
	}
	return false
}

// judge is the goal on one boot: what was measured and whether it is met.
func (g Goal) judge(r result.Run) (string, bool) {
	m := metricNamed(g.Measure)
	if g.Measure == MServe || g.Measure == MServeCPU {
		for _, t := range r.All(result.KubeIPVS) {
			if t.ServeSeconds < 0 {
				return "kube-ipvs did not serve within the bound", false
			}
		}
		ki := statOf(r, result.KubeIPVS, m.value)
		other, atLeast := serveBound(r, g.Against, g.Measure)
		if ki.n == 0 || other.n == 0 || ki.med == 0 {
			return "not measured", false
		}
		ge := ""
		if atLeast {
			ge = "≥ "
		}
		x := other.med / ki.med
		return fmt.Sprintf("%s: %s%s %s, kube-ipvs %s %s: %s%s×", ToolTitle[g.Against], ge, bare(other.med, ""), m.unit,
			bare(ki.med, ""), m.unit, ge, bare(x, "")), x >= g.Threshold
	}
	if g.Measure == MIdleHour && idleShort(r, g.Against) {
		return "a window shorter than two periods of whole reads: not judged", false
	}
	ki := statOf(r, result.KubeIPVS, m.value)
	if ki.n == 0 {
		return "kube-ipvs not measured", false
	}
	kiText := fmt.Sprintf("kube-ipvs %s %s", bare(ki.med, g.Measure), m.unit)
	if g.Measure == MMax {
		never := 0
		for _, t := range r.All(result.KubeIPVS) {
			never += t.Timeouts
		}
		return fmt.Sprintf("%s, %d never seen", kiText, never), ki.med <= g.Threshold && never == 0
	}
	if g.Compare == AtMost {
		return kiText, ki.med <= g.Threshold
	}
	ov, oText := g.otherValue(r)
	if math.IsNaN(ov) {
		return kiText + "; " + ToolTitle[g.Against] + " not measured", false
	}
	text := fmt.Sprintf("%s: %s, %s", ToolTitle[g.Against], oText, kiText)
	if math.IsInf(ki.med, 1) {
		return text, false
	}
	switch g.Compare {
	case TimesLower:
		if ki.med == 0 {
			return text, false
		}
		x := ov / ki.med
		return fmt.Sprintf("%s: %s×", text, bare(x, "")), x >= g.Threshold
	case NoHigher:
		return text, ki.med <= ov
	}
	return text, ki.med < ov
}

// GoalsTable judges the goals on each variant's largest N: goal, measure,
// threshold, what was measured (medians over the runs), met or missed.
func GoalsTable(runs []result.Run) string {
	if len(runs) == 0 {
		return ""
	}
	var b strings.Builder
	largest := map[string]result.Run{}
	var order []string
	for _, r := range sorted(runs) {
		if _, ok := largest[variant(r)]; !ok {
			order = append(order, variant(r))
		}
		largest[variant(r)] = r
	}
	for _, v := range order {
		r := largest[v]
		fmt.Fprintf(&b, "Endpoints %s, N = %s (medians over %d runs):", v, shortN(r.N), max(r.RunsRequested, 1))
		if r.N != GoalN {
			fmt.Fprintf(&b, " the goals are set at N = %s, so these verdicts show the direction, not the goal.", shortN(GoalN))
		}
		b.WriteString("\n\n| goal | measure | threshold | measured | verdict |\n|---|---|---|---|---|\n")
		for _, g := range Goals {
			got, met := g.judge(r)
			verdict := "missed"
			if met {
				verdict = "met"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", g.Goal, g.Measure, g.threshold(), got, verdict)
		}
		b.WriteString("\n")
	}
	return b.String()
}
