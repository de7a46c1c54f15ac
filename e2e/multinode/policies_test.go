package multinode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testPolicies: what only several nodes show. Each scenario sends real
// traffic and records what every node's table held.
func testPolicies(ctx context.Context, t *testing.T, c *cluster) {
	for _, s := range []struct {
		name string
		run  func(context.Context, *testing.T, *cluster, *scenario)
	}{
		{"externalTrafficPolicy Cluster: any node forwards", testClusterPolicy},
		{"externalTrafficPolicy Local: health checks steer the load balancer, the client address survives", testLocalPolicy},
		{"externalTrafficPolicy Local from inside: pods and the node reach every endpoint, outside clients local ones", testLocalFromInside},
		{"a pod moving between nodes behind externalTrafficPolicy Local", testPodMoves},
		{"internalTrafficPolicy Local", testInternalLocal},
		{"trafficDistribution PreferClose: zone hints", testPreferClose},
		{"a Node deleted and re-added", testNodeReAdded},
		{"service.kubernetes.io/service-proxy-name leaves a Service to another proxy", testProxyName},
	} {
		sc := &scenario{name: s.name}
		c.rep.add(sc)
		if !t.Run(s.name, func(t *testing.T) { s.run(ctx, t, c, sc) }) {
			return
		}
	}
}

// burst makes n requests from a namespace to targets in turn, one after
// the other, and returns the stream's numbers.
func burst(name, from, network string, n int, targets ...string) result {
	s := newStream(name, from, network, 50*time.Millisecond, roundRobin(targets...))
	s.start()
	// n requests at 50ms, plus their answer time.
	time.Sleep(time.Duration(n) * 50 * time.Millisecond)
	s.stop()
	return s.result()
}

func testClusterPolicy(ctx context.Context, t *testing.T, c *cluster, sc *scenario) {
	for _, n := range c.nodes {
		target := fmt.Sprintf("%s:30080", nodeAddr(n.i))
		r := burst("outside -> "+n.name+":30080", outsideNS, "tcp", 12, target)
		sc.results = append(sc.results, r)
		if r.Failures > 0 || r.Requests == 0 {
			t.Errorf("%s: %d of %d failed: %v", target, r.Failures, r.Requests, r.Errors)
		}
		// Cluster policy: masqueraded to the node, so replies come back
		// through it (the client's own address is not seen).
		if r.Peers[outsideAddr] > 0 {
			t.Errorf("%s: backends saw the client's own address %s with policy Cluster: %v", target, outsideAddr, r.Peers)
		}
	}
	sc.tables = c.nodePortTables(30080)
	sc.notes = append(sc.notes, "node-3 has no web pod and forwards to the other nodes' pods; every answer came from a node address, not 172.20.0.200")
}

// nodePortTables is each node's NodePort virtual server on its own address.
func (c *cluster) nodePortTables(port int) []string {
	var out []string
	for _, n := range c.nodes {
		t := c.tablesOf(fmt.Sprintf("-t %s:%d", nodeAddr(n.i), port))
		out = append(out, t[n.i-1])
	}
	return out
}

func hcWant(c *cluster, want map[int]int) error {
	_, err := waitFor(settle, func() (bool, string) {
		c.lb.checkAll(context.Background())
		got := c.lb.statuses()
		for _, n := range c.nodes {
			if got[n.i] != want[n.i] {
				return false, fmt.Sprint(got)
			}
		}
		return true, ""
	})
	return err
}

func testLocalPolicy(ctx context.Context, t *testing.T, c *cluster, sc *scenario) {
	if err := hcWant(c, map[int]int{1: 200, 2: 503, 3: 503, 4: 503}); err != nil {
		t.Fatalf("health-check node port 32001: want 200 on node-1 only: %v", err)
	}
	body, err := c.node(1).httpGet(ctx, fmt.Sprintf("http://%s:32001/", nodeAddr(1)))
	if err != nil || !strings.Contains(body, `"localEndpoints": 1`) && !strings.Contains(body, `"localEndpoints":1`) {
		t.Errorf("node-1 health check body %q (%v): want localEndpoints 1", body, err)
	}
	c.lb.run()
	defer c.lb.stop()
	s := newStream("outside -> load balancer -> :30081", outsideNS, "tcp", 50*time.Millisecond, c.lb.pick)
	s.start()
	time.Sleep(2 * time.Second)
	s.stop()
	r := s.result()
	sc.results = append(sc.results, r)
	if r.Failures > 0 || r.Backends["local-1"] != r.Requests || r.Requests == 0 {
		t.Errorf("through the load balancer: %+v", r)
	}
	if r.Peers[outsideAddr] != r.Requests {
		t.Errorf("policy Local: the backend must see the client's address %s, saw %v", outsideAddr, r.Peers)
	}
	// A node without a local endpoint refuses the node port outright.
	if a, err := ask(ctx, outsideNS, "tcp", nodeAddr(2)+":30081", 2*time.Second); err == nil {
		t.Errorf("node-2:30081 without a local endpoint answered: %+v", a)
	}
	sc.tables = c.nodePortTables(30081)
	sc.notes = append(sc.notes, "health checks: "+strings.Join(c.lb.takeTransitions(), ", "),
		fmt.Sprintf("backends saw %s: the client address survives", counts(r.Peers)))
}

// testPodMoves moves local's pod from node-1 to node-3 as a rollout
// would: the new pod becomes ready, the old one terminates (its node's
// health check turns 503 so the balancer drains it, while it still serves)
// and then goes. No request through the balancer may fail.
func testPodMoves(ctx context.Context, t *testing.T, c *cluster, sc *scenario) {
	c.lb.run()
	defer c.lb.stop()
	s := newStream("outside -> load balancer -> :30081", outsideNS, "tcp", 50*time.Millisecond, c.lb.pick)
	s.start()
	time.Sleep(time.Second)
	if err := c.addPod(ctx, "local-3", "local", 3, "10.244.3.11"); err != nil {
		t.Fatal(err)
	}
	if err := hcWant(c, map[int]int{1: 200, 2: 503, 3: 200, 4: 503}); err != nil {
		t.Fatalf("after local-3 started: %v", err)
	}
	c.pods["local-1"].terminating = true
	c.pods["local-1"].ready = false
	if err := c.syncSlices(ctx, "local"); err != nil {
		t.Fatal(err)
	}
	if err := hcWant(c, map[int]int{1: 503, 2: 503, 3: 200, 4: 503}); err != nil {
		t.Fatalf("after local-1 began terminating: %v", err)
	}
	time.Sleep(time.Second) // the balancer has polled since
	if err := c.removePod(ctx, "local-1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	s.stop()
	r := s.result()
	sc.results = append(sc.results, r)
	if r.Failures > 0 {
		t.Errorf("through the load balancer while the pod moved: %d of %d failed: %v", r.Failures, r.Requests, r.Errors)
	}
	if r.Backends["local-3"] == 0 {
		t.Errorf("the new pod local-3 got no request: %v", r.Backends)
	}
	sc.tables = c.nodePortTables(30081)
	sc.notes = append(sc.notes, "health checks: "+strings.Join(c.lb.takeTransitions(), ", "))
}

func testInternalLocal(ctx context.Context, t *testing.T, c *cluster, sc *scenario) {
	want := map[int][]string{1: {"10.244.1.10"}, 2: {"10.244.2.10"}, 3: nil, 4: {"10.244.4.10"}}
	if err := c.waitTables("itl: own node's endpoints only", func(n *node, tb Table) bool {
		return equalReals(tb.Reals("-t 10.96.1.30:80"), want[n.i], podTCPPort)
	}); err != nil {
		t.Fatal(err)
	}
	r := burst("pod cli-1 (node-1) -> itl", "cli-1", "tcp", 10, "10.96.1.30:80")
	sc.results = append(sc.results, r)
	if r.Failures > 0 || r.Backends["web-1"] != r.Requests {
		t.Errorf("from node-1 only the local web-1 may answer: %+v", r)
	}
	// node-3 has no local endpoint: the connection is refused there, not
	// sent to another node.
	r3 := burst("pod cli-3 (node-3) -> itl (none local)", "cli-3", "tcp", 4, "10.96.1.30:80")
	sc.results = append(sc.results, r3)
	if r3.Failures != r3.Requests || r3.Requests == 0 {
		t.Errorf("from node-3 (no local endpoint) every request must fail: %+v", r3)
	}
	sc.tables = c.tablesOf("-t 10.96.1.30:80")
}

func testPreferClose(ctx context.Context, t *testing.T, c *cluster, sc *scenario) {
	if err := c.waitTables("zone: own zone's endpoints", zoneTable(map[string][]string{})); err != nil {
		t.Fatal(err)
	}
	for _, from := range []string{"cli-1", "cli-3"} {
		r := burst(fmt.Sprintf("pod %s (%s) -> zone", from, c.pods[from].node.zone), from, "tcp", 12, "10.96.1.40:80")
		sc.results = append(sc.results, r)
		want := map[string]bool{"web-1": true, "web-2": true}
		if from == "cli-3" {
			want = map[string]bool{"web-4": true}
		}
		for b := range r.Backends {
			if !want[b] {
				t.Errorf("%s in %s reached %s of another zone: %v", from, c.pods[from].node.zone, b, r.Backends)
			}
		}
		if r.Failures > 0 {
			t.Errorf("%s: %+v", from, r)
		}
	}
	sc.tables = c.tablesOf("-t 10.96.1.40:80")
}

// zoneTable checks the zone Service's real servers: each zone's own, or all
// of them on the nodes named in override.
func zoneTable(override map[string][]string) func(*node, Table) bool {
	return func(n *node, tb Table) bool {
		want := []string{"10.244.1.10", "10.244.2.10"}
		if n.zone == "zone-b" {
			want = []string{"10.244.4.10"}
		}
		if o, ok := override[n.name]; ok {
			want = o
		}
		return equalReals(tb.Reals("-t 10.96.1.40:80"), want, podTCPPort)
	}
}

// testNodeReAdded deletes node-3's Node object under traffic through it and
// adds it back. Its agent keeps serving; without its Node it knows no zone,
// so zone hints no longer apply there (all endpoints) until it returns.
func testNodeReAdded(ctx context.Context, t *testing.T, c *cluster, sc *scenario) {
	n3 := c.node(3)
	load := loads{
		newStream("outside -> node-3:30080", outsideNS, "tcp", 100*time.Millisecond, roundRobin(nodeAddr(3)+":30080")),
		newStream("pod cli-3 (node-3) -> zone", "cli-3", "tcp", 100*time.Millisecond, roundRobin("10.96.1.40:80")),
	}
	load.start()
	if err := c.api.CoreV1().Nodes().Delete(ctx, n3.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	all := []string{"10.244.1.10", "10.244.2.10", "10.244.4.10"}
	errDel := c.waitTables("zone on node-3 without its Node", zoneTable(map[string][]string{"node-3": all}), n3)
	time.Sleep(time.Second)
	if err := createNode(ctx, c.api, n3); err != nil {
		t.Fatal(err)
	}
	errAdd := c.waitTables("zone on node-3 with its Node back", zoneTable(nil), n3)
	time.Sleep(time.Second)
	sc.results = load.stop()
	if errDel != nil {
		t.Error(errDel)
	}
	if errAdd != nil {
		t.Error(errAdd)
	}
	requireNoFailures(t, sc.results, true)
	select {
	case <-n3.proc.done:
		t.Errorf("node-3's agent exited: %v", n3.proc.waitErr)
	default:
	}
	sc.tables = c.tablesOf("-t 10.96.1.40:80")
	sc.notes = append(sc.notes, "without its Node, node-3's zone Service used every endpoint; with it back, its zone's only")
}

func testProxyName(ctx context.Context, t *testing.T, c *cluster, sc *scenario) {
	const vs = "-t 10.96.1.50:80"
	absent := func(_ *node, tb Table) bool { _, ok := tb[vs]; return !ok }
	if err := c.waitTables("other (labelled for another proxy) absent", absent); err != nil {
		t.Fatal(err)
	}
	s := c.svcs["other"]
	s.proxyName = ""
	if err := c.updateService(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := c.waitTables("other served once unlabelled", func(_ *node, tb Table) bool {
		return equalReals(tb.Reals(vs), webReals, podTCPPort)
	}); err != nil {
		t.Fatal(err)
	}
	r := burst("pod cli-1 -> other (unlabelled)", "cli-1", "tcp", 6, "10.96.1.50:80")
	sc.results = append(sc.results, r)
	if r.Failures > 0 {
		t.Errorf("unlabelled: %+v", r)
	}
	sc.tables = c.tablesOf(vs)
	s.proxyName = "other-proxy"
	if err := c.updateService(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := c.waitTables("other left again once labelled", absent); err != nil {
		t.Fatal(err)
	}
	sc.notes = append(sc.notes, "labelled other-proxy: on no node; unlabelled: on every node (tables above); labelled again: gone from every node")
}
