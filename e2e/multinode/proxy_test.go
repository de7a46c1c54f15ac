package multinode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Files the host script (scripts/cluster-e2e.sh) puts into the VM.
const (
	agentBin       = "/usr/local/bin/kube-ipvs"      // the agent of this commit
	agentNextBin   = "/usr/local/bin/kube-ipvs-next" // the same source with another version: the "new binary"
	kubeProxyBin   = "/usr/local/bin/kube-proxy"     // v1.37, --proxy-mode=ipvs
	imageRoot      = "/image"                        // the image's root file system, unpacked
	imageArgsFile  = "/etc/cluster-e2e/image-args"   // its ENTRYPOINT + CMD, one a line
	imageEnvFile   = "/etc/cluster-e2e/image-env"    // its environment, NAME=VALUE a line
	agentKubecfg   = "/etc/kube-ipvs/agent.kubeconfig"
	proxyKubecfg   = "/var/lib/kube-proxy/kubeconfig.conf" // where kubeadm's config points kube-proxy
	kubeadmConfig  = "/etc/kube-proxy/config.conf"         // kubeadm's KubeProxyConfiguration (internal/config/testdata)
	adminKubecfg   = "/etc/cluster-e2e/admin.kubeconfig"
	manifestFile   = "/etc/cluster-e2e/kube-ipvs.yaml"
	logDir         = "/tmp/cluster-e2e-logs"
	metricsAddress = "127.0.0.1:10249" // passed explicitly to every agent (--metrics-bind-address)
	debugAddress   = "127.0.0.1:10247" // passed explicitly to every agent (--debug-address)
)

// Which proxy a node runs.
type proxyKind int

const (
	kubeIPVS      proxyKind = iota // the agent binary of this commit
	kubeIPVSNext                   // the "new binary" of the rolling upgrade
	kubeIPVSImage                  // the agent from the image's root file system
	kubeProxy                      // kube-proxy --proxy-mode=ipvs
)

func (k proxyKind) String() string {
	return [...]string{"kube-ipvs", "kube-ipvs (new binary)", "kube-ipvs (image)", "kube-proxy"}[k]
}

// proc is one proxy process on a node, its log in a file.
type proc struct {
	kind    proxyKind
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
}

// command is the node's proxy command line. Every proxy gets kubeadm's
// KubeProxyConfiguration and the node's name as kubeadm's DaemonSet passes
// it. kube-proxy reads its kubeconfig from the file's
// clientConnection.kubeconfig (with --config it ignores --kubeconfig); the
// agent is given its own identity explicitly, which overrides the file, as
// a DaemonSet's mounted ServiceAccount token would.
func (n *node) command(kind proxyKind) []string {
	if kind == kubeProxy {
		return []string{kubeProxyBin, "--config", kubeadmConfig, "--hostname-override", n.name, "--v=2"}
	}
	flags := []string{"--config", kubeadmConfig, "--hostname-override", n.name,
		"--kubeconfig", agentKubecfg, "--logging-format", "json", "--log-level", "debug",
		"--metrics-bind-address", metricsAddress, "--debug-address", debugAddress,
		"--drain-timeout", "20s"}
	switch kind {
	case kubeIPVSNext:
		return append([]string{agentNextBin, "agent"}, flags...)
	case kubeIPVSImage:
		return append(imageEntrypoint(), flags...)
	}
	return append([]string{agentBin, "agent"}, flags...)
}

// imageEntrypoint is the image's ENTRYPOINT + CMD as the host script read
// them from the image's config.
func imageEntrypoint() []string {
	data, err := os.ReadFile(imageArgsFile)
	if err != nil {
		return []string{"missing-" + imageArgsFile}
	}
	return strings.Fields(string(data))
}

// start starts kind on node n. The image's agent runs chrooted into the
// image's root file system, with the image's environment only, a sysfs of
// the node's namespace and the VM's xtables lock, as a runtime gives a
// privileged host-network pod.
func (n *node) start(kind proxyKind) error {
	n.starts++
	logPath := filepath.Join(logDir, fmt.Sprintf("%s-%d-%s.log", n.name, n.starts, strings.Fields(kind.String())[0]))
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer f.Close()
	argv := n.command(kind)
	var cmd *exec.Cmd
	if kind == kubeIPVSImage {
		env, err := os.ReadFile(imageEnvFile)
		if err != nil {
			return err
		}
		script := `set -e
mount -t sysfs sysfs "$R/sys"
touch /run/xtables.lock "$R/run/xtables.lock"
mount --bind /run/xtables.lock "$R/run/xtables.lock"
exec env -i $ENV chroot "$R" "$@"`
		cmd = exec.Command("ip", append([]string{"netns", "exec", n.name, "sh", "-c", script, "sh"}, argv...)...)
		cmd.Env = append(os.Environ(), "R="+imageRoot, "ENV="+strings.Join(strings.Fields(string(env)), " "))
	} else {
		cmd = exec.Command("ip", append([]string{"netns", "exec", n.name}, argv...)...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s on %s: %w", kind, n.name, err)
	}
	p := &proc{kind: kind, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() { p.waitErr = cmd.Wait(); close(p.done) }()
	n.proc = p
	return nil
}

// stop sends SIGTERM and waits for a clean exit.
func (n *node) stop() error {
	p := n.proc
	if p == nil {
		return nil
	}
	n.proc = nil
	select {
	case <-p.done:
		return fmt.Errorf("%s on %s had exited already: %v; log tail:\n%s", p.kind, n.name, p.waitErr, p.tail(15))
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-p.done:
		// kube-proxy exits 1 on SIGTERM... accept a signal-ended or clean exit.
		return nil
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s on %s did not exit within 30s of SIGTERM", p.kind, n.name)
	}
}

func (p *proc) lines() []string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return nil
	}
	data = data[:bytes.LastIndexByte(data, '\n')+1]
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func (p *proc) tail(n int) string {
	l := p.lines()
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return "    " + strings.Join(l, "\n    ")
}

// entry is one line of the agent's JSON log.
type entry map[string]any

func (p *proc) entries() []entry {
	var out []entry
	for _, l := range p.lines() {
		var e entry
		if json.Unmarshal([]byte(l), &e) != nil {
			e = entry{"msg": l}
		}
		out = append(out, e)
	}
	return out
}

func (e entry) msg() string { s, _ := e["msg"].(string); return s }

// waitFirstSync waits for the agent's first full sync (it logs "synced"
// with full=true at debug level even when it changed nothing).
func (n *node) waitFirstSync(timeout time.Duration) (entry, error) {
	p := n.proc
	deadline := time.Now().Add(timeout)
	for {
		for _, e := range p.entries() {
			if full, _ := e["full"].(bool); e.msg() == "synced" && full {
				return e, nil
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s on %s exited (%v); log tail:\n%s", p.kind, n.name, p.waitErr, p.tail(20))
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s on %s: no full sync within %s; log tail:\n%s", p.kind, n.name, timeout, p.tail(20))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// metrics scrapes the agent's Prometheus text from inside the node: the
// metrics address given with --metrics-bind-address, else the debug
// address (which served /metrics before the metrics listener existed).
func (n *node) metrics(ctx context.Context) (map[string]float64, error) {
	var errs []error
	for _, addr := range []string{metricsAddress, debugAddress} {
		body, err := n.httpGet(ctx, "http://"+addr+"/metrics")
		if err == nil && strings.Contains(body, "kube_ipvs_") {
			return parseMetrics(body), nil
		}
		errs = append(errs, fmt.Errorf("%s: %v", addr, err))
	}
	return nil, fmt.Errorf("%s: no kube-ipvs metrics: %w", n.name, errors.Join(errs...))
}

// httpGet fetches url from inside the node's namespace.
func (n *node) httpGet(ctx context.Context, url string) (string, error) {
	code, body, err := httpIn(ctx, n.name, url)
	if err != nil {
		return "", err
	}
	if code != 200 {
		return body, fmt.Errorf("GET %s: %d", url, code)
	}
	return body, nil
}

// httpIn does one GET from namespace ns, on a connection of its own.
func httpIn(ctx context.Context, ns, url string) (int, string, error) {
	tr := &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialIn(ctx, ns, network, addr, 2*time.Second)
		},
	}
	c := &http.Client{Transport: tr, Timeout: 3 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// parseMetrics reads Prometheus text: series (name with labels) to value.
func parseMetrics(text string) map[string]float64 {
	m := map[string]float64{}
	for _, l := range strings.Split(text, "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err == nil {
			m[l[:i]] = v
		}
	}
	return m
}

// sumPrefix adds every series whose name starts with prefix.
func sumPrefix(m map[string]float64, prefix string) float64 {
	s := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			s += v
		}
	}
	return s
}

// exited reports a proxy that has ended on its own.
func (n *node) exited() error {
	if n.proc == nil {
		return nil
	}
	select {
	case <-n.proc.done:
		return fmt.Errorf("%s on %s exited: %v; log tail:\n%s", n.proc.kind, n.name, n.proc.waitErr, n.proc.tail(10))
	default:
		return nil
	}
}

// appliedKinds summarizes the operations the agent applied up to its first
// full sync, by kind: "ipset add=20 -a=3".
func (p *proc) appliedKinds() string {
	kinds := map[string]int{}
	for _, e := range p.entries() {
		if full, _ := e["full"].(bool); e.msg() == "synced" && full {
			break
		}
		if op, ok := e["op"].(string); ok && e.msg() == "applied" {
			f := strings.Fields(op)
			k := f[0]
			if len(f) > 1 && (k == "ipset" || k == "ip" || k == "iptables-restore") {
				k += " " + f[1]
			}
			kinds[k]++
		}
	}
	return counts(kinds)
}
