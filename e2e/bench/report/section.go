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
	fmt.Fprintf(&b, "- Load: N Services × %d endpoints (endpoints: %s); %d runs of every tool per boot, the order rotated; a sample of %d Services asked from a pod; changes at one every %.0f s (%s); a burst of %d concurrent changes; idle window at least %.0f s and two periods of whole reads; kube-proxy nftables mode's hourly full sync brought forward once at rest, last (its node's zone label changed), and spread over its hour at rest%s.\n",
		first.EndpointsPerSvc, variantsOf(runs), max(first.RunsRequested, 1), first.SampleRequested, first.ChangeSpacing, strings.Join(counts, ", "), first.BurstRequested, first.IdleSeconds, rollLoad(first))
	var ns []string
	for _, r := range runs {
		ns = append(ns, fmt.Sprintf("N = %s, %s: %.0f s (fill %.0f s)", shortN(r.N), variant(r), r.WallSeconds, r.FillSeconds))
	}
	fmt.Fprintf(&b, "- Wall time: %s in all; %s.\n", wall.Round(time.Second), strings.Join(ns, "; "))
	for _, r := range runs {
		for _, t := range r.Tools {
			if t.Error != "" {
				fmt.Fprintf(&b, "- **N = %s, %s, %s failed** (run %d): %s\n", shortN(r.N), variant(r), ToolTitle[t.Name], t.Run, t.Error)
			}
			if t.Error == "" && t.ServeSeconds < 0 {
				fmt.Fprintf(&b, "- **N = %s, %s, %s never served** (run %d): %s\n", shortN(r.N), variant(r), ToolTitle[t.Name], t.Run, t.ServeMissing)
			}
		}
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- N = %s: %s\n", shortN(r.N), n)
		}
	}
	b.WriteString("\nEach cell is the median over the boot's runs, with the spread (lowest–highest) when they differ. Ratios are kube-proxy's median ÷ kube-ipvs's: above 1, kube-ipvs is lower (better) by that factor.\n\n")
	b.WriteString(Table(runs))
	b.WriteString("\nResolution: a time is taken when the read that saw the state ended, so it is late by up to one read. A single change reads one Service " +
		"(IPVS over netlink; nftables mode: the Service's chain and its map over netlink); the cold start reads the whole IPVS table " +
		"(/proc/net/ip_vs), or for nftables mode the service-ips map and the first and last Service's maps (kube-proxy writes a sync in one " +
		"transaction; every chain is then checked with nft, untimed); the burst reads the whole IPVS table, or each changed Service's map:\n\n")
	b.WriteString("| N | endpoints | tool | single-Service read (median) | slowest read, cold start | slowest read, burst | burst writes acknowledged |\n|---:|---|---|---:|---:|---:|---:|\n")
	for _, r := range runs {
		for _, tool := range Tools {
			if t, ok := r.Find(tool); ok {
				fmt.Fprintf(&b, "| %s | %s | %s | %s ms | %s s | %s s | %s s |\n", shortN(r.N), variant(r), ToolTitle[tool], num(t.ObservePollMs), num(t.ColdPollMax), num(t.BurstPollMax), num(t.BurstWrite))
			}
		}
	}
	b.WriteString("\nThe informers' sync is read from each tool's log as it is written: ")
	if t, ok := first.Find(result.KubeIPVS); ok {
		fmt.Fprintf(&b, "kube-ipvs, %s; ", t.SyncFrom)
	}
	if t, ok := first.Find(result.KubeProxyIPVS); ok {
		fmt.Fprintf(&b, "kube-proxy, %s", t.SyncFrom)
	}
	b.WriteString(" (a tool whose log does not say is timed from its process start).\n")
	b.WriteString("\n### Goals\n\n")
	b.WriteString(GoalsTable(runs))
	if png != "" {
		fmt.Fprintf(&b, "\n![change latency, time to serve, CPU at rest and peak RSS against N (endpoints %s)](%s)\n", variant(runs[0]), png)
	}
	return b.String()
}

// variantsOf lists the boots' variants, in order.
func variantsOf(runs []result.Run) string {
	var out []string
	seen := map[string]bool{}
	for _, r := range runs {
		if v := variant(r); !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return strings.Join(out, "; ")
}

// rollLoad is the rolling updates' part of the load line: the sizes, how
// long each went on, and how the observer read the rolled Service.
func rollLoad(r result.Run) string {
	if len(r.RollSizes) == 0 {
		return ""
	}
	reads := "its destinations read back to back"
	if r.RollRest > 0 {
		reads = fmt.Sprintf("its destinations read with a rest of %g × each read's time after it", r.RollRest)
	}
	return fmt.Sprintf("; the IPVS tools' rolling update of %s endpoints, %.0f s each, %s", rollSizesText(r.RollSizes), r.RollFor, reads)
}
