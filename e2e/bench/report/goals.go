package report

import (
	"fmt"
	"math"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/result"
)

// Goal is one target kube-ipvs is held to beside one kube-proxy mode:
// plain data, judged by Goals on the run at GoalN.
type Goal struct {
	What    string  // the goal as the report prints it
	Against string  // result.KubeProxyIPVS or result.KubeProxyNFT
	Measure string  // a key of goalMeasures
	Rule    Rule    // how kube-ipvs's value must compare
	Value   float64 // the factor of RatioAtLeast, the ceiling of AtMost
}

// Rule is how a goal compares kube-ipvs's value with kube-proxy's.
type Rule int

const (
	RatioAtLeast Rule = iota // kube-proxy's value ÷ kube-ipvs's ≥ Value
	Lower                    // kube-ipvs's value < kube-proxy's
	NoHigher                 // kube-ipvs's value ≤ kube-proxy's
	AtMost                   // kube-ipvs's value ≤ Value, and every change seen
)

// GoalN is the N the goals are set at; at a smaller N the verdicts only
// show the direction.
const GoalN = 10000

// Goals10k are the goals the report judges.
var Goals10k = []Goal{
	{"vs kube-proxy IPVS: cold start ≥ 5× faster", result.KubeProxyIPVS, "cold", RatioAtLeast, 5},
	{"vs kube-proxy IPVS: change p99 ≥ 20× lower", result.KubeProxyIPVS, "p99", RatioAtLeast, 20},
	{"vs kube-proxy IPVS: change max ≤ 1 s (and none never seen)", result.KubeProxyIPVS, "max", AtMost, 1},
	{"vs kube-proxy IPVS: idle CPU ≥ 10× lower", result.KubeProxyIPVS, "idle", RatioAtLeast, 10},
	{"vs kube-proxy IPVS: CPU per change ≥ 20× lower", result.KubeProxyIPVS, "cpu-per-change", RatioAtLeast, 20},
	{"vs kube-proxy IPVS: peak RSS no higher", result.KubeProxyIPVS, "rss", NoHigher, 0},
	{"vs kube-proxy nftables: faster cold start", result.KubeProxyNFT, "cold", Lower, 0},
	{"vs kube-proxy nftables: lower change latency p50", result.KubeProxyNFT, "p50", Lower, 0},
	{"vs kube-proxy nftables: lower change latency p99", result.KubeProxyNFT, "p99", Lower, 0},
	{"vs kube-proxy nftables: CPU per change no higher", result.KubeProxyNFT, "cpu-per-change", NoHigher, 0},
	{"vs kube-proxy nftables: cold-start CPU no higher", result.KubeProxyNFT, "cold-cpu", NoHigher, 0},
	{"vs kube-proxy nftables: idle CPU no higher", result.KubeProxyNFT, "idle", NoHigher, 0},
	{"vs kube-proxy nftables: peak RSS no higher", result.KubeProxyNFT, "rss", NoHigher, 0},
}

// judge is a goal's check: the measured comparison and whether it meets
// the goal.
type judge func(kp, ki result.Tool, r result.Run) (string, bool)

// goalMeasure is what a goal's Measure names: its unit and its value.
type goalMeasure struct {
	unit string
	of   func(r result.Run, t result.Tool) float64
}

var goalMeasures = map[string]goalMeasure{
	"cold":           {"s", cold},
	"cold-cpu":       {"CPU-s", coldCPU},
	"p50":            {"s", p50},
	"idle":           {"CPU-s", idle},
	"cpu-per-change": {"CPU-s", cpuPerChange},
	"rss":            {"MB", rss},
}

var (
	cold    = func(r result.Run, t result.Tool) float64 { return t.ColdSeconds }
	coldCPU = func(r result.Run, t result.Tool) float64 { return t.ColdCPU }
	p50     = func(r result.Run, t result.Tool) float64 { return result.Percentile(t.Latencies, 50) }
	p99     = func(r result.Run, t result.Tool) float64 { return result.Percentile(t.Latencies, 99) }
	idle    = func(r result.Run, t result.Tool) float64 { return t.IdleCPU }
	rss     = func(r result.Run, t result.Tool) float64 { return t.PeakRSSMB }
)

// judgeOf makes g's check; false when g's measure and rule do not go
// together.
func judgeOf(g Goal) (judge, bool) {
	switch {
	case g.Measure == "p99" && g.Rule == RatioAtLeast:
		return p99Goal(true, func(kp, ki float64) bool { return kp/ki >= g.Value }), true
	case g.Measure == "p99" && g.Rule == Lower:
		return p99Goal(false, func(kp, ki float64) bool { return ki < kp }), true
	case g.Measure == "max" && g.Rule == AtMost:
		return changeMax(g.Value), true
	}
	m, ok := goalMeasures[g.Measure]
	if !ok {
		return nil, false
	}
	switch g.Rule {
	case RatioAtLeast:
		return factor(m.unit, g.Value, m.of), true
	case Lower:
		return compare(m.unit, m.of, func(kp, ki float64) bool { return ki < kp }), true
	case NoHigher:
		return compare(m.unit, m.of, func(kp, ki float64) bool { return ki <= kp }), true
	}
	return nil, false
}

func factor(what string, min float64, f func(r result.Run, t result.Tool) float64) judge {
	return func(kp, ki result.Tool, r result.Run) (string, bool) {
		a, b := f(r, kp), f(r, ki)
		if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
			return "not measured", false
		}
		x := a / b
		return fmt.Sprintf("kube-proxy %s %s, kube-ipvs %s %s: %s×", num(a), what, num(b), what, num(x)), x >= min
	}
}

// compare reports both values and whether meets(kube-proxy's, kube-ipvs's).
func compare(what string, f func(r result.Run, t result.Tool) float64, meets func(kp, ki float64) bool) judge {
	return func(kp, ki result.Tool, r result.Run) (string, bool) {
		a, b := f(r, kp), f(r, ki)
		if math.IsNaN(a) || math.IsNaN(b) {
			return "not measured", false
		}
		return fmt.Sprintf("kube-ipvs %s %s, kube-proxy %s %s", num(b), what, num(a), what), meets(a, b)
	}
}

// changeMax: kube-ipvs's slowest change within ceiling seconds, and none
// never seen.
func changeMax(ceiling float64) judge {
	return func(_, ki result.Tool, _ result.Run) (string, bool) {
		m := result.Max(ki.Latencies)
		return fmt.Sprintf("kube-ipvs max %s s, %d never seen", num(m), ki.Timeouts), m <= ceiling && ki.Timeouts == 0
	}
}

// p99Goal judges a change-p99 goal on every change asked, seen or not
// (result.CensoredPercentile): kube-proxy's p99 may be a lower bound (its
// changes were not seen within the timeout), which is enough to meet a
// goal that asks kube-ipvs to be lower; kube-ipvs's own must be a value.
// meets gets both p99s and tells whether the goal is met.
func p99Goal(ratio bool, meets func(kp, ki float64) bool) judge {
	return func(kp, ki result.Tool, r result.Run) (string, bool) {
		a, aBound := result.CensoredPercentile(kp.Latencies, kp.Timeouts, r.ChangeTimeout, 99)
		b, bBound := result.CensoredPercentile(ki.Latencies, ki.Timeouts, r.ChangeTimeout, 99)
		if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
			return "not measured", false
		}
		kpText := num(a) + " s"
		if aBound {
			kpText = fmt.Sprintf("at least %s s (%d of %d never seen within it)", num(a), kp.Timeouts, len(kp.Latencies)+kp.Timeouts)
		}
		got := fmt.Sprintf("kube-proxy %s, kube-ipvs %s s", kpText, num(b))
		if ratio {
			at := ""
			if aBound {
				at = "≥ "
			}
			got += fmt.Sprintf(": %s%s×", at, num(a/b))
		}
		if bBound {
			return got + " (kube-ipvs's is a bound too)", false
		}
		return got, meets(a, b)
	}
}

// Goals judges Goals10k on the largest N of runs. At an N other than
// GoalN the verdicts only show the direction.
func Goals(runs []result.Run) string {
	if len(runs) == 0 {
		return ""
	}
	r := sorted(runs)[len(runs)-1]
	_, ok1 := r.Find(result.KubeProxyIPVS)
	_, ok2 := r.Find(result.KubeProxyNFT)
	ki, ok3 := r.Find(result.KubeIPVS)
	var b strings.Builder
	if r.N != GoalN {
		fmt.Fprintf(&b, "The goals are set at N = %s; this run's largest N is %s, so these verdicts show the direction, not the goal.\n\n", shortN(GoalN), shortN(r.N))
	}
	if !ok1 || !ok2 || !ok3 {
		b.WriteString("Not every tool was measured at this N: no verdict.\n")
		return b.String()
	}
	b.WriteString("| goal | measured | verdict |\n|---|---|---|\n")
	for _, g := range Goals10k {
		kp, _ := r.Find(g.Against)
		check, ok := judgeOf(g)
		if !ok {
			fmt.Fprintf(&b, "| %s | no rule %d for measure %q | missed |\n", g.What, g.Rule, g.Measure)
			continue
		}
		got, met := check(kp, ki, r)
		v := "missed"
		if met {
			v = "met"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", g.What, got, v)
	}
	return b.String()
}
