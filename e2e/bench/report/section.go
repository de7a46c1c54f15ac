package report

import (
	"fmt"
	"strings"
	"time"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/result"
)

// Section is one run set's part of docs/benchmarks.md: when, where, with
// what, the table, the goals, and the plot (png: its path relative to the doc).
func Section(runs []result.Run, png string, wall time.Duration) string {
	runs = sorted(runs)
	if len(runs) == 0 {
		return ""
	}
	first := runs[0]
	var b strings.Builder
	fmt.Fprintf(&b, "## Run of %s UTC\n\n", first.Started.Format("2006-01-02 15:04"))
	fmt.Fprintf(&b, "- Machine: %d CPUs (%s), shared with other work (load average %s at the start): **compare only within this run**.\n",
		first.Machine.NProc, first.Machine.CPUModel, first.Machine.Load1)
	fmt.Fprintf(&b, "- VM: kernel %s, %d vCPUs software-emulated (TCG), %d MB; API server on the host's loopback.\n",
		first.GuestKernel, first.GuestCPUs, first.GuestMemMB)
	v := first.Versions
	fmt.Fprintf(&b, "- Versions: kube-ipvs %s; kube-proxy %s; kube-apiserver %s; nft %s (kube-proxy's nftables mode); bench built with %s.\n",
		v.KubeIPVS, v.KubeProxy, v.KubeAPIServer, v.Nft, v.Go)
	var counts []string
	for _, r := range runs {
		c := fmt.Sprintf("%d at N = %s", r.ChangesRequested, shortN(r.N))
		if r.ChangeBudget > 0 {
			c += fmt.Sprintf(" within %s a tool", time.Duration(r.ChangeBudget*float64(time.Second)))
		}
		counts = append(counts, c)
	}
	fmt.Fprintf(&b, "- Load: N Services × %d endpoints; single changes per tool spaced %.0f s (%s); a burst of %d concurrent changes; idle window %.0f s.\n",
		first.EndpointsPerSvc, first.ChangeSpacing, strings.Join(counts, ", "), first.BurstRequested, first.IdleSeconds)
	var ns []string
	for _, r := range runs {
		ns = append(ns, fmt.Sprintf("N = %s: %.0f s (fill %.0f s)", shortN(r.N), r.WallSeconds, r.FillSeconds))
	}
	fmt.Fprintf(&b, "- Wall time: %s in all; %s.\n", wall.Round(time.Second), strings.Join(ns, "; "))
	for _, r := range runs {
		for _, t := range r.Tools {
			if t.Error != "" {
				fmt.Fprintf(&b, "- **N = %s, %s failed**: %s\n", shortN(r.N), ToolTitle[t.Name], t.Error)
			}
		}
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- N = %s: %s\n", shortN(r.N), n)
		}
	}
	b.WriteString("\nRatios are kube-proxy's value ÷ kube-ipvs's: above 1, kube-ipvs is lower (better) by that factor.\n\n")
	b.WriteString(Table(runs))
	b.WriteString("\nResolution: a time is taken when the read that saw the state ended, so it is late by up to one read. A single change reads one Service " +
		"(IPVS over netlink; nftables mode: the Service's chain and its map over netlink); the cold start reads the whole IPVS table " +
		"(/proc/net/ip_vs), or for nftables mode the service-ips map and the first and last Service's maps (kube-proxy writes a sync in one " +
		"transaction; every chain is then checked with nft, untimed); the burst reads the whole IPVS table, or each changed Service's map:\n\n")
	b.WriteString("| N | tool | single-Service read (median) | slowest read, cold start | slowest read, burst | burst writes acknowledged |\n|---:|---|---:|---:|---:|---:|\n")
	for _, r := range runs {
		for _, tool := range Tools {
			if t, ok := r.Find(tool); ok {
				fmt.Fprintf(&b, "| %s | %s | %s ms | %s s | %s s | %s s |\n", shortN(r.N), ToolTitle[tool], num(t.ObservePollMs), num(t.ColdPollMax), num(t.BurstPollMax), num(t.BurstWrite))
			}
		}
	}
	b.WriteString("\n### Goals of issue 12\n\n")
	b.WriteString(Goals(runs))
	if png != "" {
		fmt.Fprintf(&b, "\n![change latency, cold start, idle CPU and peak RSS against N](%s)\n", png)
	}
	return b.String()
}
