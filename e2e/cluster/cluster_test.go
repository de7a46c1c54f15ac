package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	nodeName      = "kube-ipvs-vm"
	nodeIP        = "10.0.2.15"  // the guest's eth0 (scripts/vm)
	apiServerHost = "10.0.2.100" // the API server, seen from the guest at apiServerHost:guestPort
	guestPort     = 6443
	stopVIP       = "10.96.99.99"
	// The guest stops when this virtual server appears: the stop signal
	// travels API server -> agent -> kernel like everything else.
	stopVS = "-t " + stopVIP + ":9"
)

// env is what scripts/apiserver/run.sh and scripts/cluster-vm.sh provide.
type env struct {
	adminKubeconfig, agentKubeconfig, agentHostKubeconfig string
	agentBin, root                                        string
}

func loadEnv(t *testing.T) env {
	e := env{
		adminKubeconfig:     os.Getenv("KUBE_IPVS_ADMIN_KUBECONFIG"),
		agentKubeconfig:     os.Getenv("KUBE_IPVS_AGENT_KUBECONFIG"),
		agentHostKubeconfig: os.Getenv("KUBE_IPVS_AGENT_HOST_KUBECONFIG"),
		agentBin:            os.Getenv("KUBE_IPVS_CLUSTER_AGENT_BIN"),
	}
	if e.adminKubeconfig == "" || e.agentBin == "" {
		t.Skip("needs a real API server and a static agent: run scripts/cluster-vm.sh (make cluster-vm)")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatalf("find the repository root: %v", err)
	}
	e.root = root
	return e
}

func client(t *testing.T, kubeconfig string) *kubernetes.Clientset {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("load kubeconfig %s: %v", kubeconfig, err)
	}
	cfg.Timeout = 15 * time.Second
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client for %s: %v", kubeconfig, err)
	}
	return c
}

// healthzLoop prints the agent's /healthz on kube-proxy's port (code,
// nodeEligible, healthy) whenever it changes, prefixed "healthz-state: ".
const healthzLoop = `( prev=
  while :; do
    r=$(printf 'GET /healthz HTTP/1.0\r\n\r\n' | nc -w 2 127.0.0.1 10256 2>/dev/null | tr -d '\r')
    cur="$(echo "$r" | head -1 | cut -d' ' -f2) $(echo "$r" | tail -1 | sed -n 's/.*"nodeEligible":\([a-z]*\),"healthy":\([a-z]*\).*/eligible=\1 healthy=\2/p')"
    if [ "$cur" != "$prev" ]; then echo "healthz-state: $cur"; prev=$cur; fi
    sleep 0.3
  done ) &
`

// metricsDump prints the agent's kube-proxy change and programming series
// once the scenario is over, each line prefixed "metrics| ", from
// kube-proxy's metrics port. Busybox wget crashes in this guest: a raw GET
// through nc.
const metricsDump = `printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' | nc -w 2 127.0.0.1 10249 2>/dev/null | tr -d '\r' >/tmp/metrics.txt
grep -E '^kubeproxy_(network_programming_duration_seconds_(count|sum)|sync_proxy_rules_(endpoint|service)_changes_(total|pending))' /tmp/metrics.txt |
  while IFS= read -r l; do echo "metrics| $l"; done
`

// snapshotLoop ends every guest script: it prints the kernel table whenever
// it changes until the stop virtual server appears.
const snapshotLoop = `prev=
while :; do
  cur=$(ipvsadm -Sn 2>&1 | sort | tr '\n' ';')
  if [ "$cur" != "$prev" ]; then
    echo "ipvs-snapshot: $cur"
    prev=$cur
  fi
  case "$cur" in *"-A ` + stopVS + ` "*) break ;; esac
  sleep 0.2
done
echo "cluster-vm: stop virtual server seen"
`

// TestAgentAgainstAPIServer is the whole scenario, in order: each step
// depends on the state the previous one left.
func TestAgentAgainstAPIServer(t *testing.T) {
	e := loadEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	admin := client(t, e.adminKubeconfig)
	agentID := client(t, e.agentHostKubeconfig)

	// Before the RBAC objects exist the agent's identity can do nothing:
	// whatever it can do later, the ClusterRole granted.
	if _, err := agentID.CoreV1().Services("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("agent identity listing Services before RBAC: want Forbidden, got %v", err)
	}
	applyRBAC(ctx, t, admin, filepath.Join(e.root, "manifests", "kube-ipvs.yaml"))
	createNode(ctx, t, admin)
	checkNarrow(ctx, t, agentID)

	// web exists before the agent starts: it arrives with the initial list.
	// So does the kubernetes Service's EndpointSlice, as in any cluster.
	createService(ctx, t, admin, "web", "10.96.10.10", 80, nil)
	createSlice(ctx, t, admin, "web", "web-1", 8080, "10.244.1.2", "10.244.1.3")
	kubernetesSlice(ctx, t, admin, apiServerHost, guestPort)

	// The agent starts as the DaemonSet starts it (daemonset_test.go).
	p := daemonSetPod(ctx, t, e, admin, t.TempDir(), fmt.Sprintf("https://%s:%d", apiServerHost, guestPort))
	t.Logf("the DaemonSet's process: %s", strings.Join(p.args, " "))
	con, wait := bootVMWith(ctx, t, e, daemonSetGuest(p), append(p.adds, tunedFiles(e)...)...)
	defer func() {
		if t.Failed() {
			if crash := con.Crash(60); crash != nil {
				t.Logf("the agent crashed:\n%s", strings.Join(crash, "\n"))
			}
			t.Logf("last console lines:\n%s", strings.Join(con.Tail(150), "\n"))
		}
	}()
	boot := time.Now()
	if before, err := con.WaitLine(ctx, "ipvs-before: "); err != nil || strings.Trim(before, "; ") != "" {
		t.Fatalf("IPVS table before the agent: %q (%v), want it empty", before, err)
	}
	step := func(name string, ok func(Table) bool) time.Duration {
		t.Helper()
		start := time.Now()
		sctx, scancel := context.WithTimeout(ctx, 3*time.Minute)
		defer scancel()
		tab, err := con.WaitTable(sctx, ok)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		d := time.Since(start)
		t.Logf("%s: %.2f s; table now:\n%s", name, d.Seconds(), tab)
		return d
	}

	kubernetesVIP := p.env["KUBERNETES_SERVICE_HOST"] + ":" + p.env["KUBERNETES_SERVICE_PORT"]
	checkInClusterBefore(ctx, t, con)
	kubernetesVS := "-t " + kubernetesVIP
	step("initial list programmed, the kubernetes Service included (from VM start: boot + agent start + first sync)", func(tab Table) bool {
		return hasReals(tab, "-t 10.96.10.10:80", map[string]int{"10.244.1.2:8080": 1, "10.244.1.3:8080": 1}) &&
			hasReals(tab, kubernetesVS, map[string]int{fmt.Sprintf("%s:%d", apiServerHost, guestPort): 1})
	})
	t.Logf("VM start to web programmed: %.1f s", time.Since(boot).Seconds())
	checkNodeEligibility(ctx, t, admin, con)
	checkInCluster(ctx, t, con)

	createService(ctx, t, admin, "api", "10.96.10.20", 8080, nil)
	// Stamped as the EndpointSlice controller stamps it: the agent measures
	// kube-proxy's network programming latency from it (checked at the end).
	api := slice("api", "api-1", 9090, "10.244.2.5")
	api.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().Format(time.RFC3339Nano)}
	if _, err := admin.DiscoveryV1().EndpointSlices("default").Create(ctx, api, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create EndpointSlice api-1: %v", err)
	}
	step("API create to ipvsadm showing api", func(tab Table) bool {
		return hasReals(tab, "-t 10.96.10.20:8080", map[string]int{"10.244.2.5:9090": 1})
	})

	// An endpoint replaced: the old one drains at weight 0 until the agent
	// sees it has no connections (read at each drain recheck), then goes.
	updateSlice(ctx, t, admin, "web-1", "10.244.1.2", "10.244.1.4")
	step("EndpointSlice update to ipvsadm showing it", func(tab Table) bool {
		return hasReals(tab, "-t 10.96.10.10:80", map[string]int{"10.244.1.2:8080": 1, "10.244.1.4:8080": 1}) ||
			hasReals(tab, "-t 10.96.10.10:80", map[string]int{"10.244.1.2:8080": 1, "10.244.1.3:8080": 0, "10.244.1.4:8080": 1})
	})

	if err := admin.CoreV1().Services("default").Delete(ctx, "api", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete Service api: %v", err)
	}
	step("Service delete to ipvsadm dropping it", func(tab Table) bool {
		_, ok := tab["-t 10.96.10.20:8080"]
		return !ok
	})

	createService(ctx, t, admin, "fastest", "10.96.10.30", 80, map[string]string{"kube-ipvs.io/scheduler": "fastest"})
	waitWarningEvent(ctx, t, admin, "fastest")

	createService(ctx, t, admin, "stop", stopVIP, 9, nil)
	step("stop Service programmed", func(tab Table) bool { _, ok := tab[stopVS]; return ok })
	if err := wait(); err != nil {
		t.Fatalf("VM run: %v", err)
	}
	t.Logf("whole VM run: %.1f s", time.Since(boot).Seconds())
	checkAgentLog(t, con.AgentLog())
	checkProgrammed(t, con.Tail(1000))
	checkKubeadmCompare(ctx, t, con)
}

// checkProgrammed reads the metrics the guest printed last: the stamped
// api slice's change must have been measured (the other slices carry no
// trigger time), and endpoint changes counted.
func checkProgrammed(t *testing.T, lines []string) {
	t.Helper()
	var got []string
	count := -1.0
	for _, l := range lines {
		i := strings.Index(l, "metrics| ")
		if i < 0 {
			continue
		}
		m := l[i+len("metrics| "):]
		got = append(got, m)
		if v, ok := strings.CutPrefix(m, `kubeproxy_network_programming_duration_seconds_count{ip_family="IPv4"} `); ok {
			if _, err := fmt.Sscan(v, &count); err != nil {
				t.Errorf("parse %q: %v", m, err)
			}
		}
	}
	t.Logf("agent metrics:\n%s", strings.Join(got, "\n"))
	if count < 1 {
		t.Errorf("kubeproxy_network_programming_duration_seconds_count: %v, want the stamped slice measured", count)
	}
}

// checkNodeEligibility: /healthz on kube-proxy's port answers 200 for the
// Node, 503 (nodeEligible false, the agent itself healthy) once the
// cluster autoscaler's taint is on it, and 200 again when it is off.
func checkNodeEligibility(ctx context.Context, t *testing.T, c kubernetes.Interface, con *Console) {
	t.Helper()
	const ok, drained = "200 eligible=true healthy=true", "503 eligible=false healthy=true"
	wait := func(what, want string) {
		t.Helper()
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := con.WaitHealthz(wctx, want); err != nil {
			t.Fatalf("%s: want /healthz %q: %v", what, want, err)
		}
		t.Logf("%s: /healthz %q after %.2f s", what, want, time.Since(start).Seconds())
	}
	taint := func(on bool) {
		t.Helper()
		n, err := c.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get Node: %v", err)
		}
		n.Spec.Taints = nil
		if on {
			n.Spec.Taints = []corev1.Taint{{Key: "ToBeDeletedByClusterAutoscaler", Value: "1700000000", Effect: corev1.TaintEffectNoSchedule}}
		}
		if _, err := c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("taint Node (%v): %v", on, err)
		}
	}
	wait("Node ready", ok)
	taint(true)
	wait("Node tainted ToBeDeletedByClusterAutoscaler", drained)
	taint(false)
	wait("taint removed", ok)
}

func hasReals(tab Table, vs string, want map[string]int) bool {
	got, ok := tab[vs]
	if !ok || len(got) != len(want) {
		return false
	}
	for r, w := range want {
		if gw, ok := got[r]; !ok || gw != w {
			return false
		}
	}
	return true
}

// applyRBAC creates the ServiceAccount, ClusterRole and ClusterRoleBinding
// of the shipped manifest (not the DaemonSet: the agent runs in the VM).
func applyRBAC(ctx context.Context, t *testing.T, c kubernetes.Interface, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	var applied []string
	for i, doc := range bytes.Split(data, []byte("\n---")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s document %d: %v", path, i+1, err)
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = c.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		default:
			continue
		}
		if err != nil {
			t.Fatalf("create %T from %s: %v", obj, path, err)
		}
		applied = append(applied, fmt.Sprintf("%T", obj))
	}
	if len(applied) != 3 {
		t.Fatalf("%s: want a ServiceAccount, a ClusterRole and a ClusterRoleBinding, applied %v", path, applied)
	}
}

func createNode(ctx context.Context, t *testing.T, c kubernetes.Interface) {
	t.Helper()
	n, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Node: %v", err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP}}
	if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("set Node addresses: %v", err)
	}
}

// checkNarrow: the agent's identity reads what it needs and nothing else.
func checkNarrow(ctx context.Context, t *testing.T, c kubernetes.Interface) {
	t.Helper()
	for _, tc := range []struct {
		what      string
		call      func() error
		forbidden bool
	}{
		{"list Services", func() error { _, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{}); return err }, false},
		{"list EndpointSlices", func() error {
			_, err := c.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
			return err
		}, false},
		{"list Nodes", func() error { _, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err }, false},
		{"list Secrets", func() error { _, err := c.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); return err }, true},
		{"list Secrets in kube-system", func() error {
			_, err := c.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
			return err
		}, true},
		{"list ConfigMaps", func() error { _, err := c.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{}); return err }, true},
		{"get a Node", func() error { _, err := c.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{}); return err }, true},
		{"create a Service", func() error {
			_, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "intruder"},
				Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 1}}},
			}, metav1.CreateOptions{})
			return err
		}, true},
		{"delete a Node", func() error { return c.CoreV1().Nodes().Delete(ctx, nodeName, metav1.DeleteOptions{}) }, true},
	} {
		err := tc.call()
		switch {
		case tc.forbidden && !apierrors.IsForbidden(err):
			t.Errorf("agent identity: %s: want Forbidden, got %v", tc.what, err)
		case !tc.forbidden && err != nil:
			t.Errorf("agent identity: %s: want allowed, got %v", tc.what, err)
		}
	}
}

func createService(ctx context.Context, t *testing.T, c kubernetes.Interface, name, ip string, port int32, ann map[string]string) {
	t.Helper()
	_, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
		Spec: corev1.ServiceSpec{
			ClusterIP: ip,
			Ports:     []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(port)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Service %s: %v", name, err)
	}
}

func slice(svc, name string, port int32, addrs ...string) *discoveryv1.EndpointSlice {
	ready, proto, node := true, corev1.ProtocolTCP, nodeName
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new(string), Protocol: &proto, Port: &port}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}, NodeName: &node,
		})
	}
	return s
}

func createSlice(ctx context.Context, t *testing.T, c kubernetes.Interface, svc, name string, port int32, addrs ...string) {
	t.Helper()
	if _, err := c.DiscoveryV1().EndpointSlices("default").Create(ctx, slice(svc, name, port, addrs...), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create EndpointSlice %s: %v", name, err)
	}
}

func updateSlice(ctx context.Context, t *testing.T, c kubernetes.Interface, name string, addrs ...string) {
	t.Helper()
	cur, err := c.DiscoveryV1().EndpointSlices("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get EndpointSlice %s: %v", name, err)
	}
	next := slice(cur.Labels[discoveryv1.LabelServiceName], name, *cur.Ports[0].Port, addrs...)
	next.ResourceVersion = cur.ResourceVersion
	if _, err := c.DiscoveryV1().EndpointSlices("default").Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update EndpointSlice %s: %v", name, err)
	}
}

// waitWarningEvent waits for a Warning Event about Service name posted by
// the agent (source component kube-ipvs, host our node).
func waitWarningEvent(ctx context.Context, t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(2 * time.Minute)
	for {
		evs, err := c.CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Service,involvedObject.name=" + name,
		})
		if err != nil {
			t.Fatalf("list Events for Service %s: %v", name, err)
		}
		for _, ev := range evs.Items {
			if ev.Type == corev1.EventTypeWarning && ev.Source.Component == "kube-ipvs" {
				if ev.Source.Host != nodeName {
					t.Errorf("Event %s: source host %q, want %q", ev.Name, ev.Source.Host, nodeName)
				}
				if ev.InvolvedObject.UID == "" {
					t.Errorf("Event %s: involvedObject has no UID (kubectl describe service will not show it)", ev.Name)
				}
				t.Logf("Service create to Warning Event: %.2f s: %s %s: %s", time.Since(start).Seconds(), ev.Type, ev.Reason, ev.Message)
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Warning Event from kube-ipvs about Service %s within 2m (events: %d)", name, len(evs.Items))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for the Event: %v", ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// klogHeader starts a line in klog's own format ("I1201 06:12:01.123456"):
// client-go's lines, had they not gone through the agent's zap logger.
var klogHeader = regexp.MustCompile(`^[IWEF]\d{4} \d\d:\d\d:\d\d`)

// checkAgentLog: the agent ran its whole life under the narrow identity
// without being refused anything, synced its sources, and wrote one format.
func checkAgentLog(t *testing.T, lines []string) {
	t.Helper()
	synced := 0
	for _, l := range lines {
		low := strings.ToLower(l)
		if strings.Contains(low, "forbidden") || strings.Contains(low, "unauthorized") {
			t.Errorf("agent log: %s", l)
		}
		if klogHeader.MatchString(l) {
			t.Errorf("agent log: a line in klog's format, not the agent's: %s", l)
		}
		if strings.Contains(l, "source synced") {
			synced++
		}
	}
	if synced < 3 {
		t.Errorf("agent log: %d 'source synced' lines, want 3 (services, endpointslices, node)", synced)
	}
	t.Logf("agent log: %d lines, none forbidden:\n%s", len(lines), strings.Join(lines, "\n"))
}

// bootVMWith starts the VM running the guest script, with the agent, its
// kubeconfig and the files adds names (HOST:GUEST) in it and the API server
// forwarded in; the returned func waits for it to end.
func bootVMWith(ctx context.Context, t *testing.T, e env, guest string, adds ...string) (*Console, func() error) {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "guest.sh")
	if err := os.WriteFile(script, []byte(guest), 0o755); err != nil {
		t.Fatalf("write guest script: %v", err)
	}
	port := os.Getenv("KUBE_IPVS_APISERVER_PORT")
	args := []string{"--timeout", "400", "--fwd", fmt.Sprintf("%d:%s", guestPort, port),
		"--add", e.agentBin + ":/usr/local/bin/kube-ipvs",
		"--add", e.agentKubeconfig + ":/etc/kube-ipvs/agent.kubeconfig",
		"--add", script + ":/guest.sh"}
	for _, a := range adds {
		args = append(args, "--add", a)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(e.root, "scripts", "vm", "run.sh"), append(args, "--", "sh", "/guest.sh")...)
	cmd.Stderr = os.Stderr
	// run.sh starts qemu under timeout(1): stop the whole group we started,
	// not only the script, or qemu outlives the test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("console pipe: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the VM: %v", err)
	}
	con := newConsole()
	go con.follow(out, nil)
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Cancel()
			_ = cmd.Wait()
		}
	})
	return con, func() error {
		select {
		case <-con.done:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the VM to end: %w", ctx.Err())
		}
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("scripts/vm/run.sh: %w", err)
		}
		return nil
	}
}
