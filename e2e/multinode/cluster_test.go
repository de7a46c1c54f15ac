package multinode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-ipvs/kube-ipvs/e2e/ipvsdump"
)

// The cluster: four nodes in two zones. Nodes 1-3 start on kube-proxy and
// are migrated; node 4 runs the agent from the image's root file system from
// the start, so it is also the node that never ran kube-proxy.
const nodeCount = 4

func nodeName(i int) string { return fmt.Sprintf("node-%d", i) }

// settle bounds every wait for a proxy or the kernel. The VM emulates its
// CPU in software, shared with other work: generous, and never a fixed
// sleep standing in for a check.
const settle = 90 * time.Second

// node is one node namespace and the proxy it runs.
type node struct {
	i      int
	name   string
	zone   string
	proc   *proc
	starts int
}

// cluster is everything the phases share.
type cluster struct {
	api   kubernetes.Interface
	nodes []*node // index 0 is node-1
	pods  map[string]*pod
	svcs  map[string]svcSpec
	rep   *report
	lb    *balancer
	// node-1's state under kube-proxy before the migration, for the way back.
	kubeProxyState nodeState
}

// The Services. web is the everyday one: a NodePort Service (TCP and UDP)
// with Cluster policies, backed by pods on three nodes.
var services = []svcSpec{
	{name: "web", clusterIP: "10.96.1.10", app: "web", typ: corev1.ServiceTypeNodePort, tcpNodePort: 30080, udpNodePort: 30053},
	{name: "local", clusterIP: "10.96.1.20", app: "local", typ: corev1.ServiceTypeLoadBalancer, etpLocal: true,
		tcpNodePort: 30081, healthCheckNodePort: 32001},
	{name: "itl", clusterIP: "10.96.1.30", app: "web", itpLocal: true},
	{name: "zone", clusterIP: "10.96.1.40", app: "web", distribution: corev1.ServiceTrafficDistributionPreferClose},
	{name: "other", clusterIP: "10.96.1.50", app: "web", proxyName: "other-proxy"},
}

// The pods at the start: web on nodes 1, 2 and 4 (none on node 3), local on
// node 1 only, and a client pod on nodes 1 and 3.
var initialPods = []struct {
	name, app string
	node      int
	addr      string
}{
	{"web-1", "web", 1, "10.244.1.10"},
	{"web-2", "web", 2, "10.244.2.10"},
	{"web-4", "web", 4, "10.244.4.10"},
	{"local-1", "local", 1, "10.244.1.11"},
	{"cli-1", "", 1, "10.244.1.20"},
	{"cli-3", "", 3, "10.244.3.20"},
}

func zoneOf(i int) string {
	if i <= 2 {
		return "zone-a"
	}
	return "zone-b"
}

// TestCluster runs the phases in order on one cluster, one VM boot and one
// API server: each phase starts from the state the one before left.
func TestCluster(t *testing.T) {
	if os.Getenv("KUBE_IPVS_VM") != "1" {
		msg := "needs the IPVS VM and an API server: run scripts/cluster-e2e.sh (make cluster-e2e)"
		if os.Getenv("KUBE_IPVS_REQUIRE_KERNEL") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	c := setupCluster(ctx, t)
	defer func() {
		c.rep.print(os.Stdout, time.Since(start))
		if t.Failed() {
			c.dumpLogs(t)
		}
	}()
	t.Logf("cluster set up in %.1f s", time.Since(start).Seconds())
	for _, ph := range []struct {
		name string
		run  func(context.Context, *testing.T, *cluster)
	}{
		{"migration from kube-proxy", testMigration},
		{"traffic policies", testPolicies},
		{"rolling upgrade", testRollingUpgrade},
		{"back to kube-proxy on one node", testBackToKubeProxy},
	} {
		phStart := time.Now()
		if !t.Run(ph.name, func(t *testing.T) { ph.run(ctx, t, c) }) {
			t.Logf("phase %q failed after %.1f s: the later phases depend on it", ph.name, time.Since(phStart).Seconds())
			return
		}
		t.Logf("phase %q: %.1f s", ph.name, time.Since(phStart).Seconds())
	}
}

func setupCluster(ctx context.Context, t *testing.T) *cluster {
	t.Helper()
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	api, err := newClient(adminKubecfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{api: api, pods: map[string]*pod{}, svcs: map[string]svcSpec{}, rep: &report{}}
	if err := setupUnderlay(); err != nil {
		t.Fatal(err)
	}
	if err := setupImage(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= nodeCount; i++ {
		if err := setupNode(i, nodeCount); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, &node{i: i, name: nodeName(i), zone: zoneOf(i)})
	}
	if err := addOnUnderlay(outsideNS, "out", outsideAddr); err != nil {
		t.Fatal(err)
	}
	if err := applyRBAC(ctx, api, manifestFile); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.nodes {
		if err := createNode(ctx, api, n); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range initialPods {
		if err := c.addPod(ctx, p.name, p.app, p.node, p.addr); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range services {
		if err := c.createService(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	c.lb = newBalancer(c, "local", 32001, 30081)
	return c
}

func (c *cluster) node(i int) *node { return c.nodes[i-1] }

// addPod starts a pod namespace behind node i; with an app it runs the echo
// tool (TCP and UDP) and becomes an endpoint of that app's Services once it
// answers.
func (c *cluster) addPod(ctx context.Context, name, app string, i int, addr string) error {
	if err := addPodNS(name, i, addr); err != nil {
		return err
	}
	p := &pod{name: name, app: app, addr: addr, node: c.node(i)}
	c.pods[name] = p
	if app == "" {
		return nil
	}
	f, err := os.Create(fmt.Sprintf("%s/pod-%s.log", logDir, name))
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command("ip", "netns", "exec", name, "echo-server", "-name", name,
		"-tcp", fmt.Sprintf(":%d", podTCPPort), "-udp", fmt.Sprintf(":%d", podUDPPort))
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return err
	}
	p.echo = &proc{cmd: cmd, done: make(chan struct{})}
	go func() { p.echo.waitErr = cmd.Wait(); close(p.echo.done) }()
	// Ready when it answers on its own address, from its node.
	if _, err := waitFor(settle, func() (bool, string) {
		a, err := ask(ctx, p.node.name, "tcp", fmt.Sprintf("%s:%d", addr, podTCPPort), 2*time.Second)
		if err != nil {
			return false, err.Error()
		}
		return a.backend == name, "answered as " + a.backend
	}); err != nil {
		return fmt.Errorf("pod %s: %w", name, err)
	}
	p.ready = true
	return c.syncSlices(ctx, app)
}

// removePod stops a pod's echo tool and deletes its namespace; its
// endpoints go from the slices first, as the kubelet and the EndpointSlice
// controller would have it.
func (c *cluster) removePod(ctx context.Context, name string) error {
	p := c.pods[name]
	delete(c.pods, name)
	if p.app != "" {
		if err := c.syncSlices(ctx, p.app); err != nil {
			return err
		}
	}
	if p.echo != nil {
		_ = p.echo.cmd.Process.Signal(syscall.SIGTERM)
		<-p.echo.done
	}
	return ip("netns", "del", name)
}

func (c *cluster) createService(ctx context.Context, s svcSpec) error {
	c.svcs[s.name] = s
	if _, err := c.api.CoreV1().Services(ns).Create(ctx, s.object(), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Service %s: %w", s.name, err)
	}
	return c.writeSlice(ctx, s)
}

// updateService writes s over the existing Service (the cluster IP and node
// ports stay).
func (c *cluster) updateService(ctx context.Context, s svcSpec) error {
	c.svcs[s.name] = s
	cur, err := c.api.CoreV1().Services(ns).Get(ctx, s.name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	next := s.object()
	next.ResourceVersion = cur.ResourceVersion
	if _, err := c.api.CoreV1().Services(ns).Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update Service %s: %w", s.name, err)
	}
	return c.writeSlice(ctx, s)
}

// syncSlices rewrites the slices of every Service selecting app.
func (c *cluster) syncSlices(ctx context.Context, app string) error {
	for _, s := range c.svcs {
		if s.app == app {
			if err := c.writeSlice(ctx, s); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *cluster) writeSlice(ctx context.Context, s svcSpec) error {
	var pods []*pod
	for _, p := range c.pods {
		if p.ready || p.terminating {
			pods = append(pods, p)
		}
	}
	sl := sliceFor(s, pods, s.object())
	cl := c.api.DiscoveryV1().EndpointSlices(ns)
	cur, err := cl.Get(ctx, sl.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = cl.Create(ctx, sl, metav1.CreateOptions{})
	case err == nil:
		sl.ResourceVersion = cur.ResourceVersion
		_, err = cl.Update(ctx, sl, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("write EndpointSlice %s: %w", sl.Name, err)
	}
	return nil
}

// table is node n's IPVS table as `ipvsadm -Sn` lists it.
func (n *node) table() (Table, error) {
	out, err := inNS(n.name, "ipvsadm", "-Sn")
	if err != nil {
		return nil, err
	}
	return ipvsdump.Parse(strings.Split(out, "\n")), nil
}

// waitTables waits until ok holds for every listed node's table.
func (c *cluster) waitTables(what string, ok func(n *node, t Table) bool, nodes ...*node) error {
	if len(nodes) == 0 {
		nodes = c.nodes
	}
	for _, n := range nodes {
		var last Table
		if _, err := waitFor(settle, func() (bool, string) {
			if err := n.exited(); err != nil {
				return false, fatalPrefix + err.Error()
			}
			t, err := n.table()
			if err != nil {
				return false, err.Error()
			}
			last = t
			return ok(n, t), ""
		}); err != nil {
			return fmt.Errorf("%s on %s: %w; table:\n%s", what, n.name, err, last)
		}
	}
	return nil
}

// tablesOf is every node's real servers of one virtual server, for the
// report: "node-1: [10.244.1.10:8080 w1]".
func (c *cluster) tablesOf(vs string) []string {
	var out []string
	for _, n := range c.nodes {
		t, err := n.table()
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", n.name, err))
			continue
		}
		reals, ok := t[vs]
		if !ok {
			out = append(out, fmt.Sprintf("%s: (no %s)", n.name, vs))
			continue
		}
		var rs []string
		for r, w := range reals {
			rs = append(rs, fmt.Sprintf("%s w%d", r, w))
		}
		sort.Strings(rs)
		out = append(out, fmt.Sprintf("%s: %s -> [%s]", n.name, vs, strings.Join(rs, ", ")))
	}
	return out
}

// fatalPrefix on what cond saw ends a waitFor at once: waiting longer
// cannot help (a proxy exited).
const fatalPrefix = "fatal: "

// waitFor polls cond every 200ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() (bool, string)) (time.Duration, error) {
	start := time.Now()
	var seen string
	for {
		ok, s := cond()
		if ok {
			return time.Since(start), nil
		}
		seen = s
		if strings.HasPrefix(s, fatalPrefix) {
			return time.Since(start), errors.New(s)
		}
		if time.Since(start) > timeout {
			return time.Since(start), fmt.Errorf("not within %s; last seen: %s", timeout, seen)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// dumpLogs prints the tail of every proxy log, for a failure.
func (c *cluster) dumpLogs(t *testing.T) {
	entries, _ := os.ReadDir(logDir)
	for _, e := range entries {
		data, _ := os.ReadFile(logDir + "/" + e.Name())
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 25 {
			lines = lines[len(lines)-25:]
		}
		t.Logf("--- %s (last %d lines)\n%s", e.Name(), len(lines), strings.Join(lines, "\n"))
	}
}

// loads runs several streams together.
type loads []*stream

func (l loads) start() {
	for _, s := range l {
		s.start()
	}
}

func (l loads) stop() []result {
	var wg sync.WaitGroup
	for _, s := range l {
		wg.Add(1)
		go func() { defer wg.Done(); s.stop() }()
	}
	wg.Wait()
	var out []result
	for _, s := range l {
		out = append(out, s.result())
	}
	return out
}

// setupImage unpacks the image's root file system and gives it what a
// runtime gives a privileged host-network pod: /proc, /dev, and the files
// the DaemonSet would mount (kubeadm's configuration, the kubeconfig).
func setupImage() error {
	if err := os.MkdirAll(imageRoot, 0o755); err != nil {
		return err
	}
	if _, err := run("tar", "-xf", "/image.tar", "-C", imageRoot); err != nil {
		return err
	}
	if err := os.Remove("/image.tar"); err != nil { // the initramfs is RAM
		return err
	}
	for _, m := range [][]string{
		{"-t", "proc", "proc", imageRoot + "/proc"},
		{"--bind", "/dev", imageRoot + "/dev"},
	} {
		if _, err := run("mount", m...); err != nil {
			return err
		}
	}
	for _, f := range []string{kubeadmConfig, agentKubecfg} {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(imageRoot+filepath.Dir(f), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(imageRoot+f, data, 0o600); err != nil {
			return err
		}
	}
	return nil
}
