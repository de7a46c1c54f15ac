// Command bench-host is the host side of `make bench` at one N: it fills the
// API server (N Services × E endpoints), boots the IPVS VM with the tools and
// bench-guest, makes the endpoint changes bench-guest asks for (so every
// write comes from the host, and every time is taken on the guest's clock),
// and writes what the guest measured, with the run's context, as JSON.
//
// It runs under scripts/apiserver/run.sh, which provides the API server.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/protocol"
	"github.com/kube-ipvs/kube-ipvs/e2e/bench/result"
)

// What the guest sees of the host (scripts/vm guest forwards).
const (
	guestAPIPort = 6443
	guestCtlPort = 7000
	nodeName     = "kube-ipvs-vm" // the guest's hostname (scripts/vm/init.sh)
	nodeIP       = "10.0.2.15"    // the guest's eth0
)

type options struct {
	n, endpoints, changes, burst, memMB int
	localEvery, runs, sample            int
	idleMax                             time.Duration
	spacing, idle                       time.Duration
	changeTimeout, coldTimeout          time.Duration
	burstTimeout, vmTimeout             time.Duration
	changeBudget, settleLimit           time.Duration
	rollFor                             time.Duration
	rollRest                            float64
	roll, tools, out, root, binDir      string
	adds                                multiFlag
	versions                            result.Versions
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

func main() {
	var o options
	flag.IntVar(&o.n, "n", 1000, "Services")
	flag.IntVar(&o.endpoints, "endpoints", 10, "endpoints per Service")
	flag.IntVar(&o.changes, "changes", 100, "single endpoint changes per tool")
	flag.DurationVar(&o.spacing, "spacing", 2*time.Second, "the single changes' fixed rate: one every spacing, seen or not")
	flag.IntVar(&o.localEvery, "local-every", 0, "one endpoint in this many names the VM's node (0: none, 1: all)")
	flag.IntVar(&o.runs, "runs", 3, "runs of every tool in this boot, the order alternating")
	flag.IntVar(&o.sample, "sample", 100, "Services asked through their ClusterIP from a pod before a tool counts as serving")
	flag.DurationVar(&o.idleMax, "idle-max", 45*time.Minute, "the idle window's bound when two drift periods are longer")
	flag.StringVar(&o.roll, "roll", "", "sizes of the Services rolled, one after the other, comma-separated (\"\": none)")
	flag.DurationVar(&o.rollFor, "roll-for", time.Minute, "how long each rolling update goes on, at 100 pods a second")
	flag.Float64Var(&o.rollRest, "roll-rest", 0, "after each read of the rolled Service the observer waits this many times the read's own time (0: reads back to back)")
	flag.IntVar(&o.burst, "burst", 1000, "changes in the concurrent burst (at most N)")
	flag.DurationVar(&o.idle, "idle", 60*time.Second, "idle CPU window")
	flag.DurationVar(&o.changeTimeout, "change-timeout", 60*time.Second, "a single change not seen by then counts as a timeout")
	flag.DurationVar(&o.coldTimeout, "cold-timeout", 15*time.Minute, "cold start bound")
	flag.DurationVar(&o.burstTimeout, "burst-timeout", 5*time.Minute, "burst convergence bound")
	flag.DurationVar(&o.changeBudget, "change-budget", 0, "stop a tool's change series after this long (0: never); the report says how many were measured")
	flag.DurationVar(&o.settleLimit, "settle-limit", 5*time.Minute, "after the full table, wait at most this long for the tool to go quiet before the idle window")
	flag.DurationVar(&o.vmTimeout, "vm-timeout", 12*time.Hour, "the whole VM run (every run of every tool)")
	flag.IntVar(&o.memMB, "mem", 2048, "guest RAM in MB")
	flag.StringVar(&o.tools, "tools", strings.Join([]string{result.KubeProxyIPVS, result.KubeProxyNFT, result.KubeIPVS}, ","), "tools, in order")
	flag.StringVar(&o.out, "out", "", "write the run's JSON here")
	flag.StringVar(&o.root, "root", ".", "the repository (for scripts/vm/run.sh)")
	flag.StringVar(&o.binDir, "bin", "", "folder holding kube-ipvs, kube-proxy and bench-guest (static)")
	flag.Var(&o.adds, "add", "HOSTPATH:GUESTPATH for the VM (repeatable), e.g. nft and its libraries")
	flag.StringVar(&o.versions.KubeIPVS, "version-kube-ipvs", "", "for the report")
	flag.StringVar(&o.versions.KubeProxy, "version-kube-proxy", "", "for the report")
	flag.StringVar(&o.versions.KubeAPIServer, "version-apiserver", "", "for the report")
	flag.StringVar(&o.versions.Nft, "version-nft", "", "for the report")
	flag.Parse()
	if o.out == "" || o.binDir == "" {
		fmt.Fprintln(os.Stderr, "bench-host: --out and --bin are required")
		os.Exit(2)
	}
	if o.rollRest < 0 {
		fmt.Fprintln(os.Stderr, "bench-host: --roll-rest: want at least 0")
		os.Exit(2)
	}
	if o.burst > o.n {
		o.burst = o.n
	}
	o.versions.Go = runtime.Version()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-host:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	start := time.Now()
	rec := result.Run{
		N: o.n, EndpointsPerSvc: o.endpoints, Started: start.UTC(), Machine: machine(),
		Versions: o.versions, ChangesRequested: o.changes, ChangeSpacing: o.spacing.Seconds(),
		BurstRequested: o.burst, IdleSeconds: o.idle.Seconds(), ChangeBudget: o.changeBudget.Seconds(),
		ChangeTimeout: o.changeTimeout.Seconds(), ColdTimeout: o.coldTimeout.Seconds(), LocalEvery: o.localEvery, Variant: variantName(o.localEvery),
		RunsRequested: o.runs, SampleRequested: o.sample,
	}
	sizes, err := rollSizes(o.roll)
	if err != nil {
		return err
	}
	if len(sizes) > 0 {
		rec.RollSizes, rec.RollFor, rec.RollRest = sizes, o.rollFor.Seconds(), o.rollRest
	}
	kubeconfig := os.Getenv("KUBE_IPVS_ADMIN_KUBECONFIG")
	apiPort := os.Getenv("KUBE_IPVS_APISERVER_PORT")
	if kubeconfig == "" || apiPort == "" {
		return fmt.Errorf("needs KUBE_IPVS_ADMIN_KUBECONFIG and KUBE_IPVS_APISERVER_PORT: run under scripts/apiserver/run.sh")
	}
	cs, err := adminClient(kubeconfig)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.vmTimeout+30*time.Minute)
	defer cancel()

	cl := newCluster(cs, o.n, o.endpoints, nodeName, o.localEvery)
	fillStart := time.Now()
	if err := cl.fill(ctx, nodeName, nodeIP); err != nil {
		return fmt.Errorf("fill the API server: %w", err)
	}
	rec.FillSeconds = time.Since(fillStart).Seconds()
	fmt.Printf("bench-host: N=%d: %d Services and EndpointSlices written in %.1f s\n", o.n, o.n, rec.FillSeconds)

	work, err := os.MkdirTemp("", "bench-host-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	guestKC := filepath.Join(work, "kubeconfig")
	if err := guestKubeconfig(kubeconfig, guestKC, fmt.Sprintf("https://10.0.2.100:%d", guestAPIPort)); err != nil {
		return err
	}

	ctl := &control{cl: cl, roll: newRolls(cs, nodeName), rec: &rec, save: func(r *result.Run) error { return save(r, o.out, start) }}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for the guest: %w", err)
	}
	srv := &http.Server{Handler: ctl.mux(ctx)}
	go srv.Serve(ln)
	defer srv.Close()

	if err := bootVM(ctx, o, apiPort, ln.Addr().(*net.TCPAddr).Port, guestKC); err != nil {
		rec.Notes = append(rec.Notes, "VM: "+err.Error())
		fmt.Fprintln(os.Stderr, "bench-host:", err)
	}
	ctl.mu.Lock()
	err = save(&rec, o.out, start)
	ctl.mu.Unlock()
	if err != nil {
		return err
	}
	fmt.Printf("bench-host: N=%d done in %.0f s; %d tools measured; results in %s\n", o.n, rec.WallSeconds, len(rec.Tools), o.out)
	if len(rec.Tools) == 0 {
		return fmt.Errorf("the guest reported no tool")
	}
	return nil
}

// rollSizes parses --roll: endpoint counts, each at least two batches
// (a step turns one batch terminating while the one before leaves).
func rollSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' }) {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2*protocol.RollBatch {
			return nil, fmt.Errorf("--roll %q: %q is not a size of at least %d endpoints", s, f, 2*protocol.RollBatch)
		}
		out = append(out, n)
	}
	return out, nil
}

// save writes the run so far (the wall time up to now) as JSON.
func save(r *result.Run, path string, start time.Time) error {
	r.WallSeconds = time.Since(start).Seconds()
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path+".tmp", append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(path+".tmp", path)
}

func adminClient(kubeconfig string) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", kubeconfig, err)
	}
	// The burst is written concurrently: no client-side rate limit.
	cfg.QPS, cfg.Burst = 1e6, 1e6
	cfg.Timeout = 60 * time.Second
	return kubernetes.NewForConfig(cfg)
}

// guestKubeconfig rewrites the admin kubeconfig for the guest: same
// credentials, the API server as the guest reaches it (the serving
// certificate names 127.0.0.1, so TLS is not verified).
func guestKubeconfig(src, dst, server string) error {
	cfg, err := clientcmd.LoadFromFile(src)
	if err != nil {
		return fmt.Errorf("load %s: %w", src, err)
	}
	for _, c := range cfg.Clusters {
		c.Server = server
		c.InsecureSkipTLSVerify = true
		c.CertificateAuthorityData, c.CertificateAuthority = nil, ""
	}
	return clientcmd.WriteToFile(*cfg, dst)
}

func bootVM(ctx context.Context, o options, apiPort string, ctlPort int, kubeconfig string) error {
	args := []string{
		"--timeout", fmt.Sprint(int(o.vmTimeout.Seconds())), "--mem", fmt.Sprint(o.memMB),
		"--fwd", fmt.Sprintf("%d:%s", guestAPIPort, apiPort),
		"--fwd", fmt.Sprintf("%d:%d", guestCtlPort, ctlPort),
		"--add", filepath.Join(o.binDir, "kube-ipvs") + ":/usr/local/bin/kube-ipvs",
		"--add", filepath.Join(o.binDir, "kube-proxy") + ":/usr/local/bin/kube-proxy",
		"--add", filepath.Join(o.binDir, "bench-guest") + ":/usr/local/bin/bench-guest",
		"--add", filepath.Join(o.binDir, "echo") + ":/usr/local/bin/bench-echo",
		"--add", kubeconfig + ":/etc/bench/kubeconfig",
	}
	for _, a := range o.adds {
		args = append(args, "--add", a)
	}
	for k, v := range map[string]string{
		"BENCH_CTL":            fmt.Sprintf("http://10.0.2.100:%d", guestCtlPort),
		"BENCH_TOOLS":          o.tools,
		"BENCH_CHANGES":        fmt.Sprint(o.changes),
		"BENCH_SPACING":        o.spacing.String(),
		"BENCH_BURST":          fmt.Sprint(o.burst),
		"BENCH_IDLE":           o.idle.String(),
		"BENCH_CHANGE_TIMEOUT": o.changeTimeout.String(),
		"BENCH_COLD_TIMEOUT":   o.coldTimeout.String(),
		"BENCH_BURST_TIMEOUT":  o.burstTimeout.String(),
		"BENCH_CHANGE_BUDGET":  o.changeBudget.String(),
		"BENCH_SETTLE_LIMIT":   o.settleLimit.String(),
		"BENCH_NODE":           nodeName,
		"BENCH_RUNS":           fmt.Sprint(o.runs),
		"BENCH_SAMPLE":         fmt.Sprint(o.sample),
		"BENCH_IDLE_MAX":       o.idleMax.String(),
		"BENCH_ROLL":           o.roll,
		"BENCH_ROLL_FOR":       o.rollFor.String(),
		"BENCH_ROLL_REST":      fmt.Sprint(o.rollRest),
		"BENCH_EXTRA_FLAGS":    os.Getenv("BENCH_EXTRA_FLAGS"),
		"BENCH_LOG_LINES":      os.Getenv("BENCH_LOG_LINES"),
		"BENCH_GODEBUG":        os.Getenv("BENCH_GODEBUG"),
	} {
		args = append(args, "--env", k+"="+v)
	}
	args = append(args, "--", "/usr/local/bin/bench-guest")
	cmd := exec.CommandContext(ctx, filepath.Join(o.root, "scripts", "vm", "run.sh"), args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// run.sh runs qemu under timeout(1): stop the whole group, or qemu outlives us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("scripts/vm/run.sh: %w", err)
	}
	return nil
}

// variantName names where the endpoints are, for the report.
func variantName(localEvery int) string {
	switch localEvery {
	case 0:
		return result.VariantNoNode
	case 1:
		return result.VariantAllLocal
	}
	return fmt.Sprintf("1 in %d on the node", localEvery)
}

func machine() result.Machine {
	m := result.Machine{NProc: runtime.NumCPU()}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.Load1 = strings.Join(strings.Fields(string(data))[:3], " ")
	}
	return m
}
