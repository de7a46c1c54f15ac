package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// The API-server part of the fault suite: the agent must never
// prune from a partial view. Stable Services exist before the agent starts
// and never change; other Services churn all along while the API server is
// restarted twice; while it is down the second time etcd's revision is
// moved on and compacted, so the resource version the agent's watches
// would resume from is gone and its view must be rebuilt from a fresh list:
// the API server's audit log must show the agent listing again (a list, or
// client-go's streaming list: a watch with sendInitialEvents). Seen here:
// after a restart the agent's first request is either a watch refused with
// 403 (the new API server's RBAC cache not yet synced), after which it
// relists at once, or directly the streaming list (its broken watch already
// made it relist); either way a 410 itself is not reached, the relist and
// the compacted store are. The guest prints its table every time it changes; no
// snapshot may lack a stable virtual server or one of its real servers, and
// the agent (debug log, filtered to removals) must never remove one.

const (
	faultStable = 40 // Services that never change
	faultChurn  = 20 // Services created, changed and deleted all along
)

// faultGuestScript runs the agent with its debug log reduced to its
// removals (every applied "-D", "-d", "ip route del", "ipset del"), so the
// console carries them without the flood of additions.
const faultGuestScript = `set -u
echo "cluster-vm: guest up"
( kube-ipvs agent --kubeconfig /etc/kube-ipvs/agent.kubeconfig --hostname-override ` + nodeName + ` \
    --drain-timeout 0s --ipvs-min-sync-period 200ms --log-level debug 2>&1; echo "agent exited: $?" ) |
  while IFS= read -r l; do
    case "$l" in
    *DEBUG*'"op": "-'[aAeE]' '* | *DEBUG*'"op": "ip route add'* | *DEBUG*'"op": "ip addr add'* | *DEBUG*'"op": "ipset add'*) ;;
    *) echo "agent| $l" ;;
    esac
  done &
` + snapshotLoop

func stableVS(i int) string { return fmt.Sprintf("-t 10.96.20.%d:80", i+1) }

func stableReals(i int) map[string]int {
	return map[string]int{fmt.Sprintf("10.244.20.%d:8080", i+1): 1, fmt.Sprintf("10.245.20.%d:8080", i+1): 1}
}

func TestAgentSurvivesAPIServerFaults(t *testing.T) {
	e := loadEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	api := findAPIServer(t)
	admin := client(t, e.adminKubeconfig)
	applyRBAC(ctx, t, admin, filepath.Join(e.root, "manifests", "kube-ipvs.yaml"))
	createNode(ctx, t, admin)
	for i := range faultStable {
		name := fmt.Sprintf("stable-%d", i)
		createService(ctx, t, admin, name, fmt.Sprintf("10.96.20.%d", i+1), 80, nil)
		createSlice(ctx, t, admin, name, name+"-1", 8080, fmt.Sprintf("10.244.20.%d", i+1), fmt.Sprintf("10.245.20.%d", i+1))
	}
	con, wait := bootVMWith(ctx, t, e, faultGuestScript)
	defer func() {
		if t.Failed() {
			t.Logf("last console lines:\n%s", strings.Join(con.Tail(80), "\n"))
		}
	}()
	boot := time.Now()
	allStable := func(tab Table) bool {
		for i := range faultStable {
			if !hasReals(tab, stableVS(i), stableReals(i)) {
				return false
			}
		}
		return true
	}
	wctx, wcancel := context.WithTimeout(ctx, 4*time.Minute)
	if _, err := con.WaitTable(wctx, allStable); err != nil {
		wcancel()
		t.Fatalf("the stable Services were never programmed: %v", err)
	}
	wcancel()
	t.Logf("VM start to %d stable Services programmed: %.1f s", faultStable, time.Since(boot).Seconds())

	// From now on every snapshot must hold every stable Service whole.
	var gaps []string
	snapshots := 0
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		_, _ = con.WaitTable(watchCtx, func(tab Table) bool {
			snapshots++
			for i := range faultStable {
				if !hasReals(tab, stableVS(i), stableReals(i)) {
					gaps = append(gaps, fmt.Sprintf("%s after %.1f s: %v", stableVS(i), time.Since(boot).Seconds(), tab[stableVS(i)]))
				}
			}
			return false
		})
	}()

	ch := startChurn(ctx, t, admin)
	time.Sleep(10 * time.Second)
	audit1 := api.auditArgs(t, "restart1")
	down := api.restart(ctx, t, audit1.args, nil)
	t.Logf("API server restart 1 (churn on): down %.1f s", down.Seconds())
	time.Sleep(10 * time.Second)

	// While the API server is down the agent's watches cannot advance:
	// etcd's revision is moved past them and compacted, so the resource
	// version they would resume from is gone. The watch cache is off from
	// now on, so that no cache can serve that version from memory.
	audit2 := api.auditArgs(t, "restart2")
	var rev int64
	down = api.restart(ctx, t, append(audit2.args, "--watch-cache=false"), func() { rev = api.compactPast(ctx, t) })
	t.Logf("API server restart 2, etcd compacted at revision %d while it was down: down %.1f s", rev, down.Seconds())
	time.Sleep(10 * time.Second)
	ch.stop()
	t.Logf("churn: %d writes, %d refused while the API server was down or starting", ch.writes.Load(), ch.failed.Load())

	// Convergence: the table equals what the API holds.
	want := wantTable(ctx, t, admin)
	start := time.Now()
	cctx, ccancel := context.WithTimeout(ctx, 2*time.Minute)
	got, err := con.WaitTable(cctx, func(tab Table) bool { return tab.String() == want.String() })
	ccancel()
	if err != nil {
		t.Fatalf("no convergence after the churn stopped: %v\nwant:\n%s", err, want)
	}
	t.Logf("converged %.1f s after the churn stopped: %d virtual servers", time.Since(start).Seconds(), len(got))

	// The agent relists after its reflectors' backoff: give it time.
	relists := 0
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		if relists = audit2.count(t, "list", "services") + audit2.count(t, "watch-list", "services"); relists > 0 {
			break
		}
	}
	t.Logf("the agent's requests after restart 1 (plain): %s", audit1.summary(t))
	t.Logf("the agent's requests after restart 2 (etcd compacted while down): %s", audit2.summary(t))

	stopWatch()
	<-watched
	t.Logf("%d snapshots checked while churning and restarting", snapshots)
	if len(gaps) > 0 {
		t.Errorf("%d snapshots lacked part of a stable Service (pruned from a partial view?):\n%s", len(gaps), strings.Join(gaps, "\n"))
	}
	createService(ctx, t, admin, "stop", stopVIP, 9, nil)
	if err := wait(); err != nil {
		t.Fatalf("VM run: %v", err)
	}
	checkNoStableRemoval(t, con.AgentLog())
	if relists == 0 {
		t.Errorf("the agent never listed Services again after etcd was compacted and the API server restarted: its view was not rebuilt")
	}
}

// checkNoStableRemoval: the agent's log of applied removals names no stable
// virtual server, real server or VIP.
func checkNoStableRemoval(t *testing.T, lines []string) {
	t.Helper()
	stable := regexp.MustCompile(`"op": "(-D|-d|ip route del local|ip addr del|ipset del)[^"]*10\.96\.20\.`)
	removals := 0
	for _, l := range lines {
		if strings.Contains(l, "DEBUG") && strings.Contains(l, `"op": "`) {
			removals++
		}
		if stable.MatchString(l) {
			t.Errorf("the agent removed part of a stable Service: %s", l)
		}
	}
	t.Logf("agent log: %d applied removals, none of a stable Service's", removals)
}

// wantTable is what the agent must program for the Services the API holds
// (the API server's own "kubernetes" one included, with no endpoints here):
// one virtual server per ClusterIP:port, one real server per endpoint.
func wantTable(ctx context.Context, t *testing.T, c kubernetes.Interface) Table {
	t.Helper()
	svcs, err := c.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list Services: %v", err)
	}
	esl, err := c.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list EndpointSlices: %v", err)
	}
	tab := Table{}
	for _, s := range svcs.Items {
		if s.Spec.ClusterIP == "" || s.Spec.ClusterIP == "None" {
			continue
		}
		vs := fmt.Sprintf("-t %s:%d", s.Spec.ClusterIP, s.Spec.Ports[0].Port)
		tab[vs] = map[string]int{}
		for _, sl := range esl.Items {
			if sl.Labels["kubernetes.io/service-name"] != s.Name {
				continue
			}
			for _, ep := range sl.Endpoints {
				tab[vs][fmt.Sprintf("%s:%d", ep.Addresses[0], *sl.Ports[0].Port)] = 1
			}
		}
	}
	return tab
}

// churner writes Services and EndpointSlices until stopped.
type churner struct {
	writes, failed atomic.Int64
	stop           func()
}

// startChurn changes a churn Service (create, delete, endpoints) every
// 150 ms. Writes refused while the API server is down are counted, not fatal.
func startChurn(ctx context.Context, t *testing.T, c kubernetes.Interface) *churner {
	ch := &churner{}
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	ch.stop = func() { cancel(); wg.Wait() }
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	go func() {
		defer wg.Done()
		for n := 0; cctx.Err() == nil; n++ {
			i := rng.IntN(faultChurn)
			err := churnOne(cctx, c, i, n, rng)
			ch.writes.Add(1)
			if err != nil {
				ch.failed.Add(1)
			}
			select {
			case <-cctx.Done():
			case <-time.After(150 * time.Millisecond):
			}
		}
	}()
	return ch
}

// churnOne makes one change to churn Service i: its endpoints change, or
// it is deleted (one time in four), or created when it does not exist.
func churnOne(ctx context.Context, c kubernetes.Interface, i, n int, rng *rand.Rand) error {
	name := fmt.Sprintf("churn-%d", i)
	eps := []string{fmt.Sprintf("10.244.30.%d", 1+n%200)}
	if rng.IntN(2) == 0 {
		eps = append(eps, fmt.Sprintf("10.245.30.%d", 1+i))
	}
	sl, err := c.DiscoveryV1().EndpointSlices("default").Get(ctx, name+"-1", metav1.GetOptions{})
	switch {
	case err == nil && rng.IntN(4) != 0:
		next := slice(name, name+"-1", 8080, eps...)
		next.ResourceVersion = sl.ResourceVersion
		_, err = c.DiscoveryV1().EndpointSlices("default").Update(ctx, next, metav1.UpdateOptions{})
		return err
	case err == nil:
		if err := c.DiscoveryV1().EndpointSlices("default").Delete(ctx, name+"-1", metav1.DeleteOptions{}); err != nil {
			return err
		}
		return c.CoreV1().Services("default").Delete(ctx, name, metav1.DeleteOptions{})
	case apierrors.IsNotFound(err):
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: fmt.Sprintf("10.96.30.%d", 1+i),
				Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		}
		if _, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		_, err = c.DiscoveryV1().EndpointSlices("default").Create(ctx, slice(name, name+"-1", 8080, eps...), metav1.CreateOptions{})
		return err
	}
	return err
}

// apiServer is the running kube-apiserver, found by its port, so that the
// test can stop it and start it again with the same command line.
type apiServer struct {
	port, etcd string
	argv       []string
	proc       *os.Process
	log        string
}

// findAPIServer reads the command line of the process that scripts/apiserver/run.sh started.
func findAPIServer(t *testing.T) *apiServer {
	t.Helper()
	port := os.Getenv("KUBE_IPVS_APISERVER_PORT")
	out, err := exec.Command("ss", "-Hltnp", "sport = :"+port).Output()
	if err != nil {
		t.Fatalf("find the API server's process (ss): %v", err)
	}
	m := regexp.MustCompile(`pid=(\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no process listens on %s: %s", port, out)
	}
	pid, _ := strconv.Atoi(string(m[1]))
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatalf("read the API server's command line: %v", err)
	}
	argv := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	a := &apiServer{port: port, argv: argv}
	for i, arg := range argv {
		switch {
		case arg == "--etcd-servers" && i+1 < len(argv):
			a.etcd = argv[i+1]
		case arg == "--cert-dir" && i+1 < len(argv):
			a.log = filepath.Join(filepath.Dir(argv[i+1]), "kube-apiserver.log")
		}
	}
	if a.etcd == "" || a.log == "" {
		t.Fatalf("API server command line lacks --etcd-servers or --cert-dir: %q", argv)
	}
	a.proc, _ = os.FindProcess(pid)
	t.Cleanup(func() { a.stop() })
	return a
}

// stop ends the current API server and waits for its port to close.
func (a *apiServer) stop() {
	if a.proc == nil {
		return
	}
	_ = a.proc.Signal(syscall.SIGTERM)
	for range 100 {
		if a.proc.Signal(syscall.Signal(0)) != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = a.proc.Kill()
	_, _ = a.proc.Wait() // reaps it when it is ours (a restarted one)
	a.proc = nil
}

// restart stops the API server, runs whileDown (if set) and starts it again
// with the same command line plus extra arguments; it returns how long the
// API server was not live.
func (a *apiServer) restart(ctx context.Context, t *testing.T, extra []string, whileDown func()) time.Duration {
	t.Helper()
	start := time.Now()
	a.stop()
	if whileDown != nil {
		whileDown()
	}
	logf, err := os.OpenFile(a.log, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatalf("open the API server's log: %v", err)
	}
	defer logf.Close()
	cmd := exec.Command(a.argv[0], append(append([]string(nil), a.argv[1:]...), extra...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the API server again: %v", err)
	}
	a.proc = cmd.Process
	// The serving certificate is self-signed; only liveness is asked.
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for {
		resp, err := hc.Get("https://127.0.0.1:" + a.port + "/livez")
		if err == nil {
			resp.Body.Close()
			// /livez needs no token; /readyz would answer 401 without one.
			if resp.StatusCode == http.StatusOK {
				return time.Since(start)
			}
		}
		if time.Since(start) > time.Minute || ctx.Err() != nil {
			t.Fatalf("the API server did not come back within a minute (see %s)", a.log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// compactPast writes a key outside the API server's prefix a few times
// (through etcd's JSON gateway), so that etcd's revision moves past every
// resource version a client has seen, and compacts there: every one of
// them is gone.
func (a *apiServer) compactPast(ctx context.Context, t *testing.T) int64 {
	t.Helper()
	post := func(path, body string) map[string]any {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.etcd+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("etcd %s: %v", path, err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("etcd %s: %s: %s", path, resp.Status, data)
		}
		var out map[string]any
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("etcd %s: %v: %s", path, err, data)
		}
		return out
	}
	for range 3 {
		post("/v3/kv/put", `{"key":"L2ZhdWx0LXN1aXRl","value":"YnVtcA=="}`) // "/fault-suite" = "bump"
	}
	hdr, _ := post("/v3/kv/range", `{"key":"AA=="}`)["header"].(map[string]any)
	rev, err := strconv.ParseInt(fmt.Sprint(hdr["revision"]), 10, 64)
	if err != nil {
		t.Fatalf("etcd revision from %v: %v", hdr, err)
	}
	post("/v3/kv/compaction", fmt.Sprintf(`{"revision":"%d","physical":true}`, rev))
	return rev
}

// audit is an audit log of the agent's list and watch requests, kept by a
// restarted API server.
type audit struct {
	path string
	args []string
}

// auditArgs writes an audit policy that records the agent's list and watch
// requests and returns the flags that make the API server log them.
func (a *apiServer) auditArgs(t *testing.T, name string) audit {
	t.Helper()
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	err := os.WriteFile(policy, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: ["system:serviceaccount:kube-system:kube-ipvs"]
  verbs: [list, watch]
- level: None
`), 0o644)
	if err != nil {
		t.Fatalf("write audit policy: %v", err)
	}
	log := filepath.Join(dir, name+".audit.log")
	return audit{path: log, args: []string{"--audit-policy-file", policy, "--audit-log-path", log}}
}

// events reads the audit log: one verb and resource per request. A watch
// that asks for the initial events (client-go's streaming list) is a
// relist, as a list is: its verb here is "watch-list".
func (au audit) events(t *testing.T) [][3]string {
	t.Helper()
	data, err := os.ReadFile(au.path)
	if err != nil {
		t.Fatalf("read the audit log: %v", err)
	}
	var out [][3]string
	seen := map[string]bool{}
	for _, l := range bytes.Split(data, []byte("\n")) {
		var ev struct {
			AuditID        string
			Verb           string
			Stage          string
			RequestURI     string
			ObjectRef      struct{ Resource string }
			ResponseStatus struct{ Code int }
		}
		// A request logs one or two stages (a watch that got through logs
		// ResponseStarted, and ResponseComplete only when it ends): the
		// first one stands for the request.
		if len(l) == 0 || json.Unmarshal(l, &ev) != nil || seen[ev.AuditID] {
			continue
		}
		seen[ev.AuditID] = true
		if ev.Verb == "watch" && strings.Contains(ev.RequestURI, "sendInitialEvents=true") {
			ev.Verb = "watch-list"
		}
		out = append(out, [3]string{ev.Verb, ev.ObjectRef.Resource, fmt.Sprintf("%s (%s %d)", ev.RequestURI, ev.Stage, ev.ResponseStatus.Code)})
	}
	return out
}

// count is how many requests of verb on resource the agent made.
func (au audit) count(t *testing.T, verb, resource string) int {
	n := 0
	for _, ev := range au.events(t) {
		if ev[0] == verb && ev[1] == resource {
			n++
		}
	}
	return n
}

// summary counts the agent's requests by verb and resource, and shows the
// Service requests' URIs.
func (au audit) summary(t *testing.T) string {
	counts := map[[2]string]int{}
	var uris []string
	for _, ev := range au.events(t) {
		counts[[2]string{ev[0], ev[1]}]++
		if ev[1] == "services" {
			uris = append(uris, ev[2])
		}
	}
	var parts []string
	for ev, n := range counts {
		parts = append(parts, fmt.Sprintf("%s %s: %d", ev[0], ev[1], n))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ") + "; Service requests: " + strings.Join(uris, " ")
}
