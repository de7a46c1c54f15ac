package report

import (
	"fmt"
	"math"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/result"
)

// GoalN is where issue 12 sets its goals.
const GoalN = 10000

// goal is one of issue 12's goals, judged on one run.
type goal struct {
	what string
	// check returns the measured comparison and whether it meets the goal.
	check func(ipvs, nft, ki result.Tool, r result.Run) (string, bool)
}

func factor(what string, min float64, f func(r result.Run, t result.Tool) float64) func(ipvs, nft, ki result.Tool, r result.Run) (string, bool) {
	return func(ipvs, _, ki result.Tool, r result.Run) (string, bool) {
		a, b := f(r, ipvs), f(r, ki)
		if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
			return "not measured", false
		}
		x := a / b
		return fmt.Sprintf("kube-proxy %s %s, kube-ipvs %s %s: %s×", num(a), what, num(b), what, num(x)), x >= min
	}
}

func noHigher(what string, f func(r result.Run, t result.Tool) float64, pick func(ipvs, nft result.Tool) result.Tool) func(ipvs, nft, ki result.Tool, r result.Run) (string, bool) {
	return func(ipvs, nft, ki result.Tool, r result.Run) (string, bool) {
		a, b := f(r, pick(ipvs, nft)), f(r, ki)
		if math.IsNaN(a) || math.IsNaN(b) {
			return "not measured", false
		}
		return fmt.Sprintf("kube-ipvs %s %s, kube-proxy %s %s", num(b), what, num(a), what), b <= a
	}
}

func lower(what string, f func(r result.Run, t result.Tool) float64) func(ipvs, nft, ki result.Tool, r result.Run) (string, bool) {
	return func(ipvs, nft, ki result.Tool, r result.Run) (string, bool) {
		a, b := f(r, nft), f(r, ki)
		if math.IsNaN(a) || math.IsNaN(b) {
			return "not measured", false
		}
		return fmt.Sprintf("kube-ipvs %s %s, kube-proxy %s %s", num(b), what, num(a), what), b < a
	}
}

// p99Goal judges a change-p99 goal on every change asked, seen or not
// (result.CensoredPercentile): kube-proxy's p99 may be a lower bound (its
// changes were not seen within the timeout), which is enough to meet a
// goal that asks kube-ipvs to be lower; kube-ipvs's own must be a value.
// meets gets both p99s and tells whether the goal is met.
func p99Goal(pick func(ipvs, nft result.Tool) result.Tool, ratio bool, meets func(kp, ki float64) bool) func(ipvs, nft, ki result.Tool, r result.Run) (string, bool) {
	return func(ipvs, nft, ki result.Tool, r result.Run) (string, bool) {
		kp := pick(ipvs, nft)
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

var (
	cold    = func(r result.Run, t result.Tool) float64 { return t.ColdSeconds }
	coldCPU = func(r result.Run, t result.Tool) float64 { return t.ColdCPU }
	p50     = func(r result.Run, t result.Tool) float64 { return result.Percentile(t.Latencies, 50) }
	p99     = func(r result.Run, t result.Tool) float64 { return result.Percentile(t.Latencies, 99) }
	idle    = func(r result.Run, t result.Tool) float64 { return t.IdleCPU }
	rss     = func(r result.Run, t result.Tool) float64 { return t.PeakRSSMB }
	useIPVS = func(ipvs, _ result.Tool) result.Tool { return ipvs }
	useNFT  = func(_, nft result.Tool) result.Tool { return nft }
)

var goals = []goal{
	{"vs kube-proxy IPVS: cold start ≥ 5× faster", factor("s", 5, cold)},
	{"vs kube-proxy IPVS: change p99 ≥ 20× lower", p99Goal(useIPVS, true, func(kp, ki float64) bool { return kp/ki >= 20 })},
	{"vs kube-proxy IPVS: change max ≤ 1 s (and none never seen)", func(_, _, ki result.Tool, _ result.Run) (string, bool) {
		m := result.Max(ki.Latencies)
		return fmt.Sprintf("kube-ipvs max %s s, %d never seen", num(m), ki.Timeouts), m <= 1 && ki.Timeouts == 0
	}},
	{"vs kube-proxy IPVS: idle CPU ≥ 10× lower", factor("CPU-s", 10, idle)},
	{"vs kube-proxy IPVS: CPU per change ≥ 20× lower", factor("CPU-s", 20, cpuPerChange)},
	{"vs kube-proxy IPVS: peak RSS no higher", noHigher("MB", rss, useIPVS)},
	{"vs kube-proxy nftables: faster cold start", lower("s", cold)},
	{"vs kube-proxy nftables: lower change latency p50", lower("s", p50)},
	{"vs kube-proxy nftables: lower change latency p99", p99Goal(useNFT, false, func(kp, ki float64) bool { return ki < kp })},
	{"vs kube-proxy nftables: CPU per change no higher", noHigher("CPU-s", cpuPerChange, useNFT)},
	{"vs kube-proxy nftables: cold-start CPU no higher", noHigher("CPU-s", coldCPU, useNFT)},
	{"vs kube-proxy nftables: idle CPU no higher", noHigher("CPU-s", idle, useNFT)},
	{"vs kube-proxy nftables: peak RSS no higher", noHigher("MB", rss, useNFT)},
}

// Goals judges issue 12's goals on the largest N of runs. They are set at
// N = 10k: at a smaller N the verdicts only show the direction.
func Goals(runs []result.Run) string {
	if len(runs) == 0 {
		return ""
	}
	r := sorted(runs)[len(runs)-1]
	ipvs, ok1 := r.Find(result.KubeProxyIPVS)
	nft, ok2 := r.Find(result.KubeProxyNFT)
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
	for _, g := range goals {
		got, met := g.check(ipvs, nft, ki, r)
		v := "missed"
		if met {
			v = "met"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", g.what, got, v)
	}
	return b.String()
}
