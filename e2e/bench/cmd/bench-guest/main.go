// Command bench-guest is the guest side of `make bench`: in the IPVS VM it
// runs each tool in turn on a clean kernel against the API server the host
// filled, and measures, on its own clock, the cold start to the full table,
// idle CPU, single endpoint changes (asked of the host, seen in the
// kernel), a concurrent burst, CPU and peak RSS from /proc, and for
// kube-proxy's nftables mode one full sync at rest. Each tool's result
// goes back to the host (bench-host) as JSON.
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/protocol"
	"github.com/kube-ipvs/kube-ipvs/e2e/bench/result"
)

const kubeconfig = "/etc/bench/kubeconfig"

type settings struct {
	ctl                                    string
	tools                                  []string
	changes, burst                         int
	runs, sample                           int           // runs of every tool; Services asked from the pod
	idleMax                                time.Duration // the idle window's bound
	spacing, idle                          time.Duration
	changeTimeout, coldTimeout, burstLimit time.Duration
	changeBudget, settleLimit              time.Duration // 0 budget: no limit
	node                                   string
	extra                                  []string      // BENCH_EXTRA_FLAGS: for looking into a tool, not for measuring
	logLines                               int           // of each tool's log, kept and printed
	godebug                                string        // BENCH_GODEBUG: the tools' GODEBUG (gctrace=1 logs every collection), likewise
	rollSizes                              []int         // BENCH_ROLL: the rolled Services' sizes, in order
	rollFor                                time.Duration // each rolling update's length
	rollRest                               float64       // BENCH_ROLL_REST: the observer's rest after a read, in reads
}

func main() {
	s, err := load()
	if err != nil {
		fmt.Println("bench-guest:", err)
		os.Exit(2)
	}
	if err := run(s); err != nil {
		fmt.Println("bench-guest:", err)
		os.Exit(1)
	}
}

func load() (settings, error) {
	var s settings
	var errs []string
	dur := func(k string) time.Duration {
		d, err := time.ParseDuration(os.Getenv(k))
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", k, err))
		}
		return d
	}
	num := func(k string) int {
		n, err := strconv.Atoi(os.Getenv(k))
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", k, err))
		}
		return n
	}
	share := func(k string) float64 {
		f, err := strconv.ParseFloat(os.Getenv(k), 64)
		if err != nil || f < 0 {
			errs = append(errs, fmt.Sprintf("%s: want a number of at least 0, got %q", k, os.Getenv(k)))
		}
		return f
	}
	s.ctl = os.Getenv("BENCH_CTL")
	s.tools = strings.Split(os.Getenv("BENCH_TOOLS"), ",")
	s.node = os.Getenv("BENCH_NODE")
	s.extra = strings.Fields(os.Getenv("BENCH_EXTRA_FLAGS"))
	s.godebug = os.Getenv("BENCH_GODEBUG")
	s.logLines = 15
	if len(s.extra) > 0 {
		s.logLines = 60
	}
	if n, err := strconv.Atoi(os.Getenv("BENCH_LOG_LINES")); err == nil && n > 0 { // to read a whole start
		s.logLines = n
	}
	s.changes, s.burst = num("BENCH_CHANGES"), num("BENCH_BURST")
	s.runs, s.sample, s.idleMax = num("BENCH_RUNS"), num("BENCH_SAMPLE"), dur("BENCH_IDLE_MAX")
	s.spacing, s.idle = dur("BENCH_SPACING"), dur("BENCH_IDLE")
	s.changeTimeout, s.coldTimeout, s.burstLimit = dur("BENCH_CHANGE_TIMEOUT"), dur("BENCH_COLD_TIMEOUT"), dur("BENCH_BURST_TIMEOUT")
	s.changeBudget, s.settleLimit = dur("BENCH_CHANGE_BUDGET"), dur("BENCH_SETTLE_LIMIT")
	for _, f := range strings.FieldsFunc(os.Getenv("BENCH_ROLL"), func(r rune) bool { return r == ',' }) {
		n, err := strconv.Atoi(f)
		if err != nil {
			errs = append(errs, fmt.Sprintf("BENCH_ROLL: %v", err))
		}
		s.rollSizes = append(s.rollSizes, n)
	}
	if len(s.rollSizes) > 0 {
		s.rollFor, s.rollRest = dur("BENCH_ROLL_FOR"), share("BENCH_ROLL_REST")
	}
	if len(errs) > 0 {
		return s, fmt.Errorf("settings from bench-host: %s", strings.Join(errs, "; "))
	}
	return s, nil
}

func run(s settings) error {
	loadModules()
	var plan protocol.Plan
	if err := call("GET", s.ctl+protocol.PathPlan, nil, &plan); err != nil {
		return err
	}
	if err := call("POST", s.ctl+protocol.PathGuest, aboutGuest(), nil); err != nil {
		return err
	}
	fmt.Printf("bench-guest: N=%d x %d endpoints, %d on the node; tools %s, %d runs\n", plan.N, plan.Endpoints, len(plan.Local), strings.Join(s.tools, ", "), s.runs)
	pn, err := setupPodNet()
	if err != nil {
		return err
	}
	for r := 1; r <= s.runs; r++ {
		for k, name := range runOrder(s.tools, r) {
			// The plan as the Services stand now: earlier runs' changes
			// moved endpoints (each keeps its nodeName).
			if err := call("GET", s.ctl+protocol.PathPlan, nil, &plan); err != nil {
				return err
			}
			fmt.Printf("bench-guest: run %d of %d: %s\n", r, s.runs, name)
			t := measure(s, plan, name, pn)
			t.Run, t.Order = r, k+1
			if err := report(s, t); err != nil {
				return err
			}
		}
	}
	printProfiles()
	return nil
}

// runOrder is the tools' order in run r (from 1): rotated by one each run,
// so that over as many runs as tools each is measured once in each place
// (first on a fresh boot, last after the others' churn).
func runOrder(tools []string, r int) []string {
	n := len(tools)
	out := make([]string, n)
	for i := range tools {
		out[i] = tools[(i+r-1)%n]
	}
	return out
}

// report prints a tool's log summary and sends its result to the host.
func report(s settings, t result.Tool) error {
	if t.Error != "" {
		fmt.Printf("bench-guest: %s: %s\n", t.Name, t.Error)
	}
	fmt.Printf("bench-guest: %s: %d error lines in its log, which ends:\n", t.Name, t.LogErrors)
	for _, l := range t.Log {
		fmt.Printf("bench-guest: %s| %s\n", t.Name, l)
	}
	return call("POST", s.ctl+protocol.PathResult, t, nil)
}

// printProfiles puts every /tmp/*.pprof a tool wrote (BENCH_EXTRA_FLAGS
// such as kube-ipvs' hidden --cpu-profile) onto the console in base64,
// between "bench-profile-begin NAME" and "bench-profile-end NAME" lines,
// for scripts/bench.sh to take out of the VM.
func printProfiles() {
	files, _ := filepath.Glob("/tmp/*.pprof")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		name := filepath.Base(f)
		fmt.Printf("bench-profile-begin %s\n", name)
		enc := base64.StdEncoding.EncodeToString(data)
		for len(enc) > 76 {
			fmt.Println(enc[:76])
			enc = enc[76:]
		}
		fmt.Printf("%s\nbench-profile-end %s\n", enc, name)
	}
}

// loadModules loads what kube-proxy's nftables mode needs beyond the VM's
// set (the kernel would ask for most of them itself; this keeps the first
// sync from paying for it).
func loadModules() {
	for _, m := range []string{"nft_numgen", "nft_fib", "nft_fib_ipv4", "nft_fib_inet", "nft_limit",
		"nft_redir", "nft_objref", "nft_hash", "nft_ct", "nft_nat", "nft_masq", "nft_chain_nat", "nft_reject_ipv4"} {
		_ = exec.Command("modprobe", "-q", m).Run()
	}
}

func aboutGuest() protocol.Guest {
	g := protocol.Guest{CPUs: runtime.NumCPU()}
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		var b []byte
		for _, c := range u.Release {
			if c == 0 {
				break
			}
			b = append(b, byte(c))
		}
		g.Kernel = string(b)
	}
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		g.MemMB = int(uint64(si.Totalram) * uint64(si.Unit) >> 20)
	}
	return g
}

// call sends in (if any) as JSON and decodes the answer into out (if any).
func call(method, url string, in, out any) error {
	var body bytes.Buffer
	if in != nil {
		if err := json.NewEncoder(&body).Encode(in); err != nil {
			return err
		}
	}
	req, err := http.NewRequest(method, url, &body)
	if err != nil {
		return err
	}
	c := http.Client{Timeout: 10 * time.Minute}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var msg bytes.Buffer
		msg.ReadFrom(resp.Body)
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, strings.TrimSpace(msg.String()))
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}
