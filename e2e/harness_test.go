package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binaries the suite runs, found on PATH (the VM runner installs them in
// /usr/local/bin); each can be overridden by an environment variable.
func agentBin() string { return envOr("KUBE_IPVS_BIN", "kube-ipvs") }
func echoBin() string  { return envOr("KUBE_IPVS_ECHO_BIN", "echo-server") }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// The node the manifests describe; the agent runs as this node.
const nodeName = "node-a"

// Agent timings: a short full-resync period so the tests can watch full
// syncs happen (the hand-added virtual server must survive them) and a short
// coalescing interval so edits apply quickly.
const (
	syncPeriod    = "5s"
	minSyncPeriod = "100ms"
)

// settle bounds every wait for the agent or the kernel. The VM emulates its
// CPU in software: generous, and never a fixed sleep standing in for a check.
const settle = 30 * time.Second

// requireKernel skips outside the VM, or fails when the caller demanded a
// kernel (KUBE_IPVS_REQUIRE_KERNEL=1): a run that cannot reach IPVS must not
// pass by skipping.
func requireKernel(t *testing.T) {
	t.Helper()
	if os.Getenv("KUBE_IPVS_VM") != "1" {
		msg := "end-to-end suite: needs a real IPVS kernel; run `make e2e` (boots a throwaway VM)"
		if os.Getenv("KUBE_IPVS_REQUIRE_KERNEL") == "1" {
			t.Fatal(msg + ", and KUBE_IPVS_REQUIRE_KERNEL=1 forbids skipping")
		}
		t.Skip(msg)
	}
	if _, err := os.Stat("/proc/net/ip_vs"); err != nil {
		t.Fatalf("KUBE_IPVS_VM=1 but this kernel has no IPVS: %v", err)
	}
}

// suite is the state every scenario shares: one manifest folder, one agent
// following it, one client namespace.
type suite struct {
	dir    string // the manifest folder the agent follows
	logDir string
	agent  *agent
	client *client
	starts int // agents started so far, to name their logs
	// extraArgs are flags the next agents start with besides the suite's.
	extraArgs []string
}

var (
	sharedOnce  sync.Once
	shared      *suite
	sharedErr   error
	sharedSetup time.Duration
)

// setup returns the shared suite, building it on first use.
func setup(t *testing.T) *suite {
	t.Helper()
	requireKernel(t)
	sharedOnce.Do(func() {
		start := time.Now()
		shared, sharedErr = newSuite()
		sharedSetup = time.Since(start)
		if sharedErr == nil {
			fmt.Printf("e2e: suite ready in %s (client namespace, agent synced)\n", sharedSetup.Round(time.Millisecond))
		}
	})
	if sharedErr != nil {
		t.Fatalf("setting up the suite: %v", sharedErr)
	}
	// A failure under a shared, loaded machine is easier to tell from a
	// bug with what the agent did just before it.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log, last 40 lines:\n%s", shared.agent.tail(40))
		}
	})
	return shared
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		if err := shared.close(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: teardown:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

func newSuite() (*suite, error) {
	dir, err := os.MkdirTemp("", "e2e-manifests-")
	if err != nil {
		return nil, fmt.Errorf("making the manifest folder: %w", err)
	}
	logDir, err := os.MkdirTemp("", "e2e-logs-")
	if err != nil {
		return nil, fmt.Errorf("making the log folder: %w", err)
	}
	s := &suite{dir: dir, logDir: logDir}
	if _, err := run("iptables", append([]string{"-w", "-A"}, conntrackRule...)...); err != nil {
		return nil, fmt.Errorf("turning connection tracking on: %w", err)
	}
	if err := writeAtomic(filepath.Join(dir, "node.yaml"), nodeYAML()); err != nil {
		return nil, err
	}
	if s.client, err = newClient(); err != nil {
		return nil, err
	}
	if err := s.startAgent(); err != nil {
		return nil, err
	}
	return s, nil
}

// conntrackRule is a FORWARD rule that matches on connection state. A real
// node always has such rules (CNI, kube-proxy, firewalls), and the kernel
// only tracks connections in a namespace once some rule needs it; without
// one the agent's deletion of stale UDP entries could not be observed.
var conntrackRule = []string{"FORWARD", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"}

func (s *suite) close() error {
	var errs []error
	if _, err := run("iptables", append([]string{"-w", "-D"}, conntrackRule...)...); err != nil {
		errs = append(errs, err)
	}
	if s.agent != nil {
		errs = append(errs, s.agent.stop())
	}
	errs = append(errs, delNS(clientNS))
	return errors.Join(errs...)
}

// startAgent starts an agent on the folder, with the suite's flags and
// extra, and waits for its first full sync, so a test starts from a
// programmed table.
func (s *suite) startAgent(extra ...string) error {
	s.starts++
	a, err := startAgent(s.dir, filepath.Join(s.logDir, fmt.Sprintf("agent-%d.log", s.starts)), append(slices.Clone(s.extraArgs), extra...)...)
	if err != nil {
		return err
	}
	s.agent = a
	if _, err := a.waitLog(0, settle, isFullSync); err != nil {
		return fmt.Errorf("the agent's first full sync: %w", err)
	}
	return nil
}

// agent is a running `kube-ipvs agent` following the manifest folder, its
// JSON log in a file.
type agent struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
}

func startAgent(dir, logPath string, extra ...string) (*agent, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating the agent log: %w", err)
	}
	defer f.Close()
	cmd := exec.Command(agentBin(), append([]string{"agent",
		"--manifests", dir, "--hostname-override", nodeName,
		"--logging-format", "json", "--log-level", "debug",
		"--ipvs-sync-period", syncPeriod, "--ipvs-min-sync-period", minSyncPeriod}, extra...)...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the agent: %w", err)
	}
	a := &agent{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() { a.waitErr = cmd.Wait(); close(a.done) }()
	return a, nil
}

// stop sends SIGTERM and requires a prompt, clean exit.
func (a *agent) stop() error {
	select {
	case <-a.done:
		return fmt.Errorf("the agent had already exited: %v; log tail:\n%s", a.waitErr, a.tail(20))
	default:
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("signalling the agent: %w", err)
	}
	select {
	case <-a.done:
		if a.waitErr != nil {
			return fmt.Errorf("the agent exited with %v; log tail:\n%s", a.waitErr, a.tail(20))
		}
		return nil
	case <-time.After(15 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
		return errors.New("the agent did not exit within 15s of SIGTERM")
	}
}

// logEntry is one line of the agent's JSON log.
type logEntry map[string]any

func (e logEntry) msg() string { s, _ := e["msg"].(string); return s }
func (e logEntry) str(k string) string {
	s, _ := e[k].(string)
	return s
}
func (e logEntry) int(k string) int {
	f, _ := e[k].(float64)
	return int(f)
}
func (e logEntry) bool(k string) bool { b, _ := e[k].(bool); return b }

// String prints the entry compactly for test logs.
func (e logEntry) String() string {
	b, _ := json.Marshal(map[string]any(e))
	return string(b)
}

func isFullSync(e logEntry) bool { return e.msg() == "synced" && e.bool("full") }
func isSync(e logEntry) bool     { return e.msg() == "synced" }

// isCheck: a sync that compared the whole kernel with the agent's cache,
// the start's full sync or one folding a rescan's read (the sync loop
// reads the kernel whole only at start and after a failure).
func isCheck(e logEntry) bool { return isSync(e) && (e.bool("full") || e.bool("checked")) }

// entries parses the log written so far. Lines that are not JSON (a panic,
// say) are kept as {"msg": "<raw line>"} so they show up in failures.
func (a *agent) entries() []logEntry {
	data, err := os.ReadFile(a.logPath)
	if err != nil {
		return nil
	}
	// A last line without its newline may be half written: leave it for
	// the next read.
	data = data[:bytes.LastIndexByte(data, '\n')+1]
	var out []logEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e logEntry
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			e = logEntry{"msg": sc.Text()}
		}
		out = append(out, e)
	}
	return out
}

// mark is the number of log entries so far: waits "since the mark" look
// only at what the agent logged after it.
func (a *agent) mark() int { return len(a.entries()) }

// waitLog waits for an entry at or after index since that matches, and
// returns it with the index after it.
func (a *agent) waitLog(since int, timeout time.Duration, match func(logEntry) bool) (logEntry, error) {
	e, _, err := a.waitLogAt(since, timeout, match)
	return e, err
}

func (a *agent) waitLogAt(since int, timeout time.Duration, match func(logEntry) bool) (logEntry, int, error) {
	deadline := time.Now().Add(timeout)
	for {
		es := a.entries()
		for i := since; i < len(es); i++ {
			if match(es[i]) {
				return es[i], i + 1, nil
			}
		}
		select {
		case <-a.done:
			return nil, 0, fmt.Errorf("the agent exited (%v); log tail:\n%s", a.waitErr, a.tail(20))
		default:
		}
		if time.Now().After(deadline) {
			return nil, 0, fmt.Errorf("no matching agent log entry within %s; log tail:\n%s", timeout, a.tail(20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// since returns the entries logged at or after index i.
func (a *agent) since(i int) []logEntry {
	es := a.entries()
	if i >= len(es) {
		return nil
	}
	return es[i:]
}

func (a *agent) tail(n int) string {
	all := a.entries()
	es := all
	if len(es) > n {
		es = es[len(es)-n:]
	}
	var b strings.Builder
	// A crash's last lines are goroutine stacks: its cause is where the
	// dump begins, so that line and the few after it come first.
	for i, e := range all[:len(all)-len(es)] {
		if m := e.String(); strings.Contains(m, "panic:") || strings.Contains(m, "fatal error:") {
			for _, c := range all[i:min(i+8, len(all)-len(es))] {
				b.WriteString("    " + c.String() + "\n")
			}
			b.WriteString("    ...\n")
			break
		}
	}
	for _, e := range es {
		b.WriteString("    " + e.String() + "\n")
	}
	return b.String()
}

// run executes a command and returns its combined output; the error names
// the command and carries its output.
func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// waitFor polls cond every 100ms until it holds or timeout passes; cond
// returns what it saw, for the failure message.
func waitFor(timeout time.Duration, cond func() (bool, string)) (time.Duration, error) {
	start := time.Now()
	var seen string
	for {
		ok, s := cond()
		if ok {
			return time.Since(start), nil
		}
		seen = s
		if time.Since(start) > timeout {
			return time.Since(start), fmt.Errorf("not within %s; last seen: %s", timeout, seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
