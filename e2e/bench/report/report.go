// Package report turns the runs of one `make bench` into the section of
// docs/benchmarks.md (context, one table with ratios, the goals of issue 12
// met or missed) and the plot beside it.
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

var metrics = []metric{
	{"cold start to the full table", "s", func(r result.Run, t result.Tool) float64 { return t.ColdSeconds }},
	{"cold-start CPU", "CPU-s", func(r result.Run, t result.Tool) float64 { return t.ColdCPU }},
	{"start work done (quiet)", "s", func(r result.Run, t result.Tool) float64 {
		if t.SettleSeconds < 0 {
			return math.Inf(1)
		}
		return t.SettleSeconds
	}},
	{"start work CPU", "CPU-s", func(r result.Run, t result.Tool) float64 { return t.SettleCPU }},
	{"peak RSS", "MB", func(r result.Run, t result.Tool) float64 { return t.PeakRSSMB }},
	{"changes measured", "", func(r result.Run, t result.Tool) float64 { return float64(len(t.Latencies) + t.Timeouts) }},
	{"one change, p50", "s", func(r result.Run, t result.Tool) float64 { return result.Percentile(t.Latencies, 50) }},
	{"one change, p99", "s", func(r result.Run, t result.Tool) float64 { return result.Percentile(t.Latencies, 99) }},
	{"one change, max", "s", func(r result.Run, t result.Tool) float64 { return result.Max(t.Latencies) }},
	{"CPU per change (series CPU ÷ changes)", "CPU-s", cpuPerChange},
	{"burst: converged", "s", burstSeconds},
	{"burst: CPU", "CPU-s", func(r result.Run, t result.Tool) float64 { return t.BurstCPU }},
	{"idle CPU", "CPU-s", func(r result.Run, t result.Tool) float64 { return t.IdleCPU }},
}

// Table is the one table of a run set: a row per N and measure, a column
// per tool, and the ratio of each kube-proxy mode to kube-ipvs (above 1:
// kube-ipvs is lower, i.e. better, by that factor).
func Table(runs []result.Run) string {
	var b strings.Builder
	b.WriteString("| N | measure | kube-proxy IPVS | kube-proxy nftables | kube-ipvs | IPVS ÷ kube-ipvs | nftables ÷ kube-ipvs |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|\n")
	for _, r := range sorted(runs) {
		for _, m := range metrics {
			name := m.name
			switch {
			case strings.HasPrefix(name, "burst"):
				name = fmt.Sprintf("%s (%d changes)", name, r.BurstRequested)
			case name == "idle CPU":
				name = fmt.Sprintf("idle CPU over %.0f s", r.IdleSeconds)
			case name == "changes measured":
				name = fmt.Sprintf("changes measured (of %d asked)", r.ChangesRequested)
			}
			noRatio := m.unit == ""
			vals := map[string]float64{}
			cells := []string{}
			for _, tool := range Tools {
				t, ok := r.Find(tool)
				if !ok || t.Error != "" && m.value(r, t) == 0 {
					cells = append(cells, "—")
					vals[tool] = math.NaN()
					continue
				}
				v := m.value(r, t)
				vals[tool] = v
				cells = append(cells, cell(v, m.unit, t, m.name))
			}
			r1, r2 := ratio(vals[result.KubeProxyIPVS], vals[result.KubeIPVS]), ratio(vals[result.KubeProxyNFT], vals[result.KubeIPVS])
			if noRatio {
				r1, r2 = "", ""
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", shortN(r.N), name, strings.Join(cells, " | "), r1, r2)
		}
		if t, ok := r.Find(result.KubeIPVS); ok && t.OpsPerChange >= 0 {
			fmt.Fprintf(&b, "| %s | kube-ipvs kernel operations per change (burst: total) | | | %.1f (%.0f) | | |\n", shortN(r.N), t.OpsPerChange, t.BurstOps)
		}
	}
	return b.String()
}

func cell(v float64, unit string, t result.Tool, name string) string {
	var s string
	switch {
	case math.IsInf(v, 1) && name == "start work done (quiet)":
		s = "never quiet"
	case math.IsInf(v, 1):
		s = "not converged"
	case unit == "":
		s = fmt.Sprintf("%.0f", v)
	case math.IsNaN(v):
		s = "—"
	case unit == "MB":
		s = fmt.Sprintf("%.0f MB", v)
	default:
		s = num(v) + " " + unit
	}
	if name == "one change, max" && t.Timeouts > 0 {
		s += fmt.Sprintf(" (+%d never seen)", t.Timeouts)
	}
	if t.Error != "" {
		s += " (run failed)"
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

func shortN(n int) string {
	if n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func sorted(runs []result.Run) []result.Run {
	s := append([]result.Run(nil), runs...)
	sort.Slice(s, func(i, j int) bool { return s[i].N < s[j].N })
	return s
}
