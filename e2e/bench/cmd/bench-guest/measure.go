package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/protocol"
	"github.com/kube-ipvs/kube-ipvs/e2e/bench/result"
)

// observer reads one kind of kernel table.
type observer interface {
	full() (bool, time.Time, error)             // every Service with all its endpoints, as of when
	notFull() string                            // what the last full() found missing
	seen(ch protocol.Change) (bool, error)      // one change, cheaply
	seenAll(chs []protocol.Change) (int, error) // how many of chs, one read of everything
	close()
}

// command runs each tool at its defaults: only what it must be told to
// reach the API server as this node.
// extra (BENCH_EXTRA_FLAGS) is appended to every command: for looking into
// a tool (e.g. --v=4), not for a measured run.
func command(name, node string, extra []string) ([]string, error) {
	var argv []string
	switch name {
	case result.KubeProxyIPVS:
		argv = []string{"kube-proxy", "--kubeconfig", kubeconfig, "--hostname-override", node, "--proxy-mode", "ipvs"}
	case result.KubeProxyNFT:
		argv = []string{"kube-proxy", "--kubeconfig", kubeconfig, "--hostname-override", node, "--proxy-mode", "nftables"}
	case result.KubeIPVS:
		argv = []string{"kube-ipvs", "agent", "--kubeconfig", kubeconfig, "--hostname-override", node}
	default:
		return nil, fmt.Errorf("unknown tool %q", name)
	}
	return append(argv, extra...), nil
}

// kubeIPVSMetrics is the agent's /metrics at its default
// --metrics-bind-address (kube-proxy's).
const kubeIPVSMetrics = "http://127.0.0.1:10249/metrics"

// measure runs one tool through every measurement; t is named so that the
// deferred stop can still add the tool's last log lines.
func measure(s settings, plan protocol.Plan, name string, pn *podNet) (t result.Tool) {
	t = result.Tool{Name: name, OpsPerChange: -1, BurstOps: -1, ServeSeconds: -1, KubernetesSeconds: -1, SyncSeconds: -1,
		FullSyncCPU: -1, FullSyncSeconds: -1, FullSyncOwn: -1}
	argv, err := command(name, s.node, s.extra)
	if err != nil {
		t.Error = err.Error()
		return t
	}
	if err := cleanKernel(); err != nil {
		t.Error = err.Error()
		return t
	}
	ipvsTool := name != result.KubeProxyNFT
	if ipvsTool {
		settleTrash(name)
	}
	if err := cniMasquerade(); err != nil {
		t.Error = err.Error()
		return t
	}
	var obs observer
	if name == result.KubeProxyNFT {
		obs, err = newNFTObserver(plan)
	} else {
		obs, err = newIPVSObserver(plan)
	}
	if err != nil {
		t.Error = err.Error()
		return t
	}
	defer obs.close()

	logf, err := os.Create("/tmp/" + name + ".log")
	if err != nil {
		t.Error = err.Error()
		return t
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if s.godebug != "" {
		cmd.Env = append(os.Environ(), "GODEBUG="+s.godebug)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Error = fmt.Sprintf("start %s: %v", name, err)
		return t
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	pid := cmd.Process.Pid
	zoned := false // the node's zone label changed: put back once the tool has stopped
	defer func() {
		stop(cmd, exited)
		if zoned {
			if err := setZone(s, ""); err != nil {
				fmt.Printf("bench-guest: after %s: put its node's zone label back: %v\n", name, err)
			}
		}
		t.Log, t.LogErrors = logSummary(logf.Name(), s.logLines)
		if err := cleanKernel(); err != nil {
			fmt.Printf("bench-guest: after %s: %v\n", name, err)
		}
		if ipvsTool {
			ipvsStopped = time.Now()
		}
	}()
	fmt.Printf("bench-guest: %s: started (%s)\n", name, strings.Join(argv, " "))

	kube := watchKubernetes(pn.client, logf.Name(), name, start, s.coldTimeout)
	err = serve(&t, s, plan, name, obs, pn, pid, start, exited)
	t.KubernetesSeconds, t.SyncSeconds, t.SyncFrom = kube.wait()
	if err != nil {
		t.Error = err.Error()
		return t
	}
	fmt.Printf("bench-guest: %s: full table after %.1f s, %.1f CPU-s, %.0f MB; serving after %.1f s, %.1f CPU-s (ClusterIPs bound %.1f s, sets and rules %.1f s, %d of %d sampled Services answering %.1f s)\n",
		name, t.ColdSeconds, t.ColdCPU, t.ColdRSSMB, t.ServeSeconds, t.ServeCPU, t.AddrsSeconds, t.SetsSeconds, t.SampleOK, t.SampleSize, t.SampleSeconds)
	fmt.Printf("bench-guest: %s: kubernetes.default answered after %.1f s; informers synced after %.1f s (%s)\n", name, t.KubernetesSeconds, t.SyncSeconds, t.SyncFrom)
	if t.ServeSeconds < 0 {
		fmt.Printf("bench-guest: %s: not serving within %s: %s\n", name, s.coldTimeout, t.ServeMissing)
	}

	// A full table is not the end of a start: kube-proxy's IPVS mode then
	// fills its ipsets and iptables, and syncs IPv6 too. Idle begins when
	// the tool has gone quiet.
	if err := settle(&t, pid, start, s.settleLimit); err != nil {
		t.Error = err.Error()
		return t
	}
	if t.SettleSeconds < 0 {
		fmt.Printf("bench-guest: %s: still busy %s after the full table; idle measured anyway\n", name, s.settleLimit)
	} else {
		fmt.Printf("bench-guest: %s: quiet after %.1f s, %.1f CPU-s\n", name, t.SettleSeconds, t.SettleCPU)
	}
	t.DriftPeriod = driftPeriod(name, logf.Name()).Seconds()
	window := max(s.idle, 2*time.Duration(t.DriftPeriod*float64(time.Second))+idleSlice)
	if window > s.idleMax {
		window, t.IdleShort = s.idleMax, true
	}
	t.IdleWindow = window.Seconds()
	if err := idle(&t, pid, window); err != nil {
		t.Error = err.Error()
		return t
	}
	fmt.Printf("bench-guest: %s: idle %.0f s (period of whole reads %.0f s): %.2f CPU-s, %.3f CPU-s a minute (per 10 s: %s)\n",
		name, t.IdleWindow, t.DriftPeriod, t.IdleCPU, t.IdlePerMinute(), cpuSlices(t.IdleSlices))

	if err := changes(&t, s, obs, pid, name); err != nil {
		t.Error = err.Error()
		return t
	}
	fmt.Printf("bench-guest: %s: %d changes: p50 %.3f s, p99 %.3f s, max %.3f s, %d timeouts, %.2f CPU-s over %.0f s (%.2f CPU-s a minute)\n", name,
		len(t.Latencies), result.Percentile(t.Latencies, 50), result.Percentile(t.Latencies, 99), result.Max(t.Latencies), t.Timeouts, t.ChangesCPU, t.ChangesWall, t.CPUPerMinute())
	if t.SyncRules != nil || t.NetProgram != nil {
		fmt.Printf("bench-guest: %s: its own histograms over the series: sync_proxy_rules p50 ≤ %.3f s p99 ≤ %.3f s (%v syncs); network_programming p50 ≤ %.3f s p99 ≤ %.3f s (%v)\n", name,
			t.SyncRules.Quantile(0.5), t.SyncRules.Quantile(0.99), countOf(t.SyncRules), t.NetProgram.Quantile(0.5), t.NetProgram.Quantile(0.99), countOf(t.NetProgram))
	}

	if err := burst(&t, s, obs, pid, name); err != nil {
		t.Error = err.Error()
		return t
	}
	fmt.Printf("bench-guest: %s: burst of %d converged in %.1f s (writes %.1f s), %.1f CPU-s\n", name, t.BurstCount, t.BurstSeconds, t.BurstWrite, t.BurstCPU)
	if t.PeakRSSMB, err = peakRSSMB(pid); err != nil {
		t.Error = err.Error()
		return t
	}

	// Then, for the IPVS tools, a large Service's rolling updates (after
	// the peak RSS, which their Services would raise).
	if o, ok := obs.(*ipvsObserver); ok && len(s.rollSizes) > 0 {
		if err := rolls(&t, s, o, pid, name); err != nil {
			t.Error = err.Error()
			return t
		}
	}

	// Last, as it changes the node: nftables mode's hourly full sync.
	if name != result.KubeProxyNFT {
		return t
	}
	zoned = true
	if err := fullSync(&t, s, pid, name); err != nil {
		t.Error = err.Error()
		return t
	}
	if t.FullSyncSeconds > 0 {
		fmt.Printf("bench-guest: %s: one full sync at rest (its node's zone label changed): %.2f CPU-s, %.1f s wall, its own %.3f s over %d syncs (an IP family each); %.3f CPU-s a minute over an hour with it\n",
			name, t.FullSyncCPU, t.FullSyncSeconds, t.FullSyncOwn, t.FullSyncs, t.HourPerMinute())
	}
	return t
}

// quietWindow and quietCPU define "gone quiet": under 10% of one CPU over 5 s.
const (
	quietWindow = 5 * time.Second
	quietCPU    = 0.5
)

// settle waits until the tool has gone quiet, or limit after the full table.
func settle(t *result.Tool, pid int, start time.Time, limit time.Duration) error {
	at, cpu, ok, err := quiet(pid, limit)
	if err != nil {
		return err
	}
	t.SettleSeconds, t.SettleCPU = at.Sub(start).Seconds(), cpu
	if !ok {
		t.SettleSeconds = -1
	}
	return nil
}

// quiet waits until the tool has gone quiet, at most limit: when its first
// quiet window began and its CPU then; not quiet (ok false), the CPU at
// the limit.
func quiet(pid int, limit time.Duration) (at time.Time, cpu float64, ok bool, err error) {
	until := time.Now().Add(limit)
	for time.Now().Before(until) {
		w0 := time.Now()
		c0, err := cpuSeconds(pid)
		if err != nil {
			return w0, 0, false, err
		}
		time.Sleep(quietWindow)
		c1, err := cpuSeconds(pid)
		if err != nil {
			return w0, 0, false, err
		}
		if c1-c0 < quietCPU {
			return w0, c0, true, nil
		}
	}
	cpu, _ = cpuSeconds(pid)
	return time.Now(), cpu, false, nil
}

// pending is a change asked for and not seen yet.
type pending struct {
	k     int
	ch    protocol.Change
	start time.Time
}

// changes asks the host for one change every spacing, whether or not the
// ones before have been seen, and times each into the kernel. The CPU is
// taken over exactly the changes' period (k changes: k × spacing), so it
// is what that fixed rate costs; a tool that falls behind pays for its
// backlog there instead of dividing by the few changes it managed. The
// changes still unseen at the end are then waited for, up to the timeout.
func changes(t *result.Tool, s settings, obs observer, pid int, name string) error {
	ops0 := kernelOps(name)
	hist0 := scrape()
	c0, err := cpuSeconds(pid)
	if err != nil {
		return err
	}
	series := time.Now()
	var polls []float64
	var wait []pending
	k := 0
	cpuTaken := false
	for {
		now := time.Now()
		issuing := k < s.changes && (s.changeBudget <= 0 || now.Sub(series) < s.changeBudget)
		if !issuing && !cpuTaken && !now.Before(series.Add(time.Duration(k)*s.spacing)) {
			c1, err := cpuSeconds(pid)
			if err != nil {
				return err
			}
			t.ChangesCPU, t.ChangesWall, cpuTaken = c1-c0, now.Sub(series).Seconds(), true
			if k < s.changes {
				fmt.Printf("bench-guest: %s: change budget %s spent after %d changes\n", name, s.changeBudget, k)
			}
		}
		if issuing && !now.Before(series.Add(time.Duration(k)*s.spacing)) {
			var ch protocol.Change
			if err := call("POST", s.ctl+protocol.PathChange+"?"+protocol.TriggerParam+"="+now.UTC().Format(time.RFC3339Nano), nil, &ch); err != nil {
				return err
			}
			wait = append(wait, pending{k: k, ch: ch, start: now})
			k++
		}
		if !issuing && cpuTaken && len(wait) == 0 {
			break
		}
		left := wait[:0]
		for _, p := range wait {
			r0 := time.Now()
			seen, err := obs.seen(p.ch)
			if err != nil {
				return err
			}
			polls = append(polls, time.Since(r0).Seconds()*1000)
			switch {
			case seen:
				t.Latencies = append(t.Latencies, time.Since(p.start).Seconds())
			case time.Since(p.start) > s.changeTimeout:
				t.Timeouts++
				fmt.Printf("bench-guest: %s: change %d (%s: %s -> %s) not seen within %s\n", name, p.k, p.ch.VIP, p.ch.Del, p.ch.Add, s.changeTimeout)
			default:
				left = append(left, p)
			}
		}
		wait = left
		time.Sleep(10 * time.Millisecond)
	}
	if done := len(t.Latencies) + t.Timeouts; ops0 >= 0 && done > 0 {
		if ops1 := kernelOps(name); ops1 >= 0 {
			t.OpsPerChange = (ops1 - ops0) / float64(done)
		}
	}
	hist1 := scrape()
	t.SyncRules = histDelta(hist0, hist1, "kubeproxy_sync_proxy_rules_duration_seconds")
	t.NetProgram = histDelta(hist0, hist1, "kubeproxy_network_programming_duration_seconds")
	sort.Float64s(polls)
	if len(polls) > 0 {
		t.ObservePollMs = polls[len(polls)/2]
	}
	return nil
}

// burst asks the host to write s.burst changes at once and waits until the
// kernel shows them all.
func burst(t *result.Tool, s settings, obs observer, pid int, name string) error {
	if s.burst <= 0 {
		return nil
	}
	ops0 := kernelOps(name)
	c0, err := cpuSeconds(pid)
	if err != nil {
		return err
	}
	start := time.Now()
	var b protocol.Burst
	if err := call("POST", fmt.Sprintf("%s%s?count=%d&%s=%s", s.ctl, protocol.PathBurst, s.burst, protocol.TriggerParam, start.UTC().Format(time.RFC3339Nano)), nil, &b); err != nil {
		return err
	}
	if b.Errors > 0 {
		return fmt.Errorf("the API server refused %d of the burst's %d writes", b.Errors, s.burst)
	}
	t.BurstCount, t.BurstWrite, t.BurstSeconds = len(b.Changes), b.WriteSeconds, -1
	for time.Since(start) < s.burstLimit {
		r0 := time.Now()
		n, err := obs.seenAll(b.Changes)
		if err != nil {
			return err
		}
		t.BurstPollMax = max(t.BurstPollMax, time.Since(r0).Seconds())
		if n == len(b.Changes) {
			t.BurstSeconds = time.Since(start).Seconds()
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if t.BurstSeconds < 0 {
		fmt.Printf("bench-guest: %s: burst not converged within %s\n", name, s.burstLimit)
	}
	c1, err := cpuSeconds(pid)
	if err != nil {
		return err
	}
	t.BurstCPU = c1 - c0
	if ops0 >= 0 {
		if ops1 := kernelOps(name); ops1 >= 0 {
			t.BurstOps = ops1 - ops0
		}
	}
	return nil
}

// kernelOps sums kube_ipvs_operations_total on the agent's /metrics: the
// kernel operations (one netlink request each) it sent. -1 for other
// tools, or if unreadable.
func kernelOps(name string) float64 {
	if name != result.KubeIPVS {
		return -1
	}
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(kubeIPVSMetrics)
	if err != nil {
		fmt.Printf("bench-guest: read %s: %v\n", kubeIPVSMetrics, err)
		return -1
	}
	defer resp.Body.Close()
	return sumCounter(resp.Body, "kube_ipvs_operations_total")
}

// sumCounter adds up every sample of metric in a Prometheus text exposition.
func sumCounter(r io.Reader, metric string) float64 {
	sum, found := 0.0, false
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, metric+"{") && !strings.HasPrefix(l, metric+" ") {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		sum, found = sum+v, true
	}
	if !found {
		return -1
	}
	return sum
}

func stop(cmd *exec.Cmd, exited chan error) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// cleanKernel removes what any of the tools leaves: virtual servers, every
// nftables table (iptables-nft's included), ipsets, the VIP link,
// conntrack entries; then checks IPVS and nftables are empty.
func cleanKernel() error {
	for _, c := range [][]string{
		{"ipvsadm", "-C"}, {"nft", "flush", "ruleset"}, {"ipset", "destroy"},
		{"ip", "link", "del", "kube-ipvs0"}, {"conntrack", "-F"},
	} {
		_ = exec.Command(c[0], c[1:]...).Run()
	}
	t, err := readProcIPVS()
	if err != nil {
		return err
	}
	if len(t) > 0 {
		return fmt.Errorf("kernel not clean: %d virtual servers left", len(t))
	}
	if out, err := nft("list", "ruleset"); err != nil || strings.TrimSpace(out) != "" {
		return fmt.Errorf("kernel not clean: nftables ruleset %q (%v)", out, err)
	}
	return nil
}

// logSummary is the first error lines of a tool's log (klog "E1201 ...",
// or a JSON/console "error" level), then its last n lines, and how many
// error lines it has.
func logSummary(path string, n int) ([]string, int) {
	data, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}, 0
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var out []string
	errs := 0
	for _, l := range lines {
		if isErrorLine(l) {
			errs++
			if errs <= 5 {
				out = append(out, l)
			}
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return append(out, lines...), errs
}

func isErrorLine(l string) bool {
	if len(l) > 1 && l[0] == 'E' && l[1] >= '0' && l[1] <= '9' {
		return true
	}
	return strings.Contains(l, `"level":"error"`) || strings.Contains(l, "\tERROR\t") || strings.Contains(l, "\terror\t")
}

// idleSlice is how often the idle window's CPU is sampled.
const idleSlice = 10 * time.Second

// idle measures the CPU over the idle window, slice by slice.
func idle(t *result.Tool, pid int, window time.Duration) error {
	c0, err := cpuSeconds(pid)
	if err != nil {
		return err
	}
	first := c0
	for slept := time.Duration(0); slept < window; slept += idleSlice {
		time.Sleep(min(idleSlice, window-slept))
		c, err := cpuSeconds(pid)
		if err != nil {
			return err
		}
		t.IdleSlices = append(t.IdleSlices, c-c0)
		c0 = c
	}
	t.IdleCPU = c0 - first
	return nil
}

// cpuSlices renders CPU slices as "0.10 0.20 ...".
func cpuSlices(xs []float64) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(out, " ")
}
