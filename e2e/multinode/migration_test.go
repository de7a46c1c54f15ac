package multinode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

const (
	webVIP    = "-t 10.96.1.10:80"
	webUDPVIP = "-u 10.96.1.10:53"
)

// webReals is what every node's web virtual servers must hold: the three
// web pods.
var webReals = []string{"10.244.1.10", "10.244.2.10", "10.244.4.10"}

func hasWeb(_ *node, t Table) bool {
	return equalReals(t.Reals(webVIP), webReals, podTCPPort) && equalReals(t.Reals(webUDPVIP), webReals, podUDPPort)
}

func equalReals(got, addrs []string, port int) bool {
	if len(got) != len(addrs) {
		return false
	}
	for i, a := range addrs {
		if got[i] != fmt.Sprintf("%s:%d", a, port) {
			return false
		}
	}
	return true
}

// steadyLoad is the load the upgrade phases run under: TCP and UDP from the
// outside to every node's web node ports in turn, and from a pod on node 1
// and one on node 3 to web's cluster IP.
func steadyLoad() loads {
	var tcp, udp []string
	for i := 1; i <= nodeCount; i++ {
		tcp = append(tcp, fmt.Sprintf("%s:30080", nodeAddr(i)))
		udp = append(udp, fmt.Sprintf("%s:30053", nodeAddr(i)))
	}
	return loads{
		newStream("outside -> node ports", outsideNS, "tcp", 200*time.Millisecond, roundRobin(tcp...)),
		newStream("outside -> node ports", outsideNS, "udp", 400*time.Millisecond, roundRobin(udp...)),
		newStream("pod cli-1 (node-1) -> cluster IP", "cli-1", "tcp", 400*time.Millisecond, roundRobin("10.96.1.10:80")),
		newStream("pod cli-1 (node-1) -> cluster IP", "cli-1", "udp", 800*time.Millisecond, roundRobin("10.96.1.10:53")),
		newStream("pod cli-3 (node-3) -> cluster IP", "cli-3", "tcp", 400*time.Millisecond, roundRobin("10.96.1.10:80")),
		newStream("pod cli-3 (node-3) -> cluster IP", "cli-3", "udp", 800*time.Millisecond, roundRobin("10.96.1.10:53")),
	}
}

// requireNoTCPFailures fails for any failed TCP request; UDP losses are
// reported, and fail only when strictUDP.
func requireNoFailures(t *testing.T, res []result, strictUDP bool) {
	t.Helper()
	for _, r := range res {
		if r.Requests == 0 {
			t.Errorf("%s %s: no requests made", r.Name, r.Network)
		}
		if r.Failures > 0 && (r.Network == "tcp" || strictUDP) {
			t.Errorf("%s %s: %d of %d requests failed: %s", r.Name, r.Network, r.Failures, r.Requests, strings.Join(r.Errors, "; "))
		}
	}
}

// testMigration: the cluster starts on kube-proxy --proxy-mode=ipvs with
// kubeadm's KubeProxyConfiguration on nodes 1-3 (node 4 runs the agent from
// the image from the start: the node that never ran kube-proxy); then, node
// by node, under load, kube-proxy stops and kube-ipvs starts with the same
// configuration. The steps, as docs/migration.md gives them:
//
//  1. stop kube-proxy (SIGTERM: it leaves its IPVS table, kube-ipvs0, its
//     rules and sets in place, so traffic keeps flowing);
//  2. start kube-ipvs with the same --config: its first full sync adopts
//     kube-proxy's virtual servers and VIPs (same keys) and adds its shim;
//  3. `kube-ipvs cleanup --kube-proxy-only`: kube-proxy's chains and sets
//     go, nothing of kube-ipvs';
//
// and no step more: afterwards each migrated node's netfilter state, sets,
// virtual servers and VIPs equal node 4's.
func testMigration(ctx context.Context, t *testing.T, c *cluster) {
	for _, n := range c.nodes {
		kind := kubeProxy
		if n.i == 4 {
			kind = kubeIPVSImage
		}
		if err := n.start(kind); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.waitTables("web programmed", hasWeb); err != nil {
		t.Fatal(err)
	}
	// kube-proxy's state on node 1, for the way back.
	var err error
	if c.kubeProxyState, err = kubeProxySettled(c.node(1)); err != nil {
		t.Fatalf("kube-proxy's state on node-1: %v", err)
	}
	sc := &scenario{name: "migration: kube-proxy -> kube-ipvs, node by node (nodes 1-3; node-4 ran the image's agent throughout)"}
	c.rep.add(sc)
	// What kube-proxy made of the Local-policy node port, for comparison.
	for _, l := range c.nodePortTables(30081) {
		sc.tables = append(sc.tables, "before: "+l)
	}
	load := steadyLoad()
	load.start()
	time.Sleep(3 * time.Second) // traffic flowing before the first change
	for _, n := range c.nodes[:3] {
		start := time.Now()
		if err := n.stop(); err != nil {
			t.Fatal(err)
		}
		if err := n.start(kubeIPVS); err != nil {
			t.Fatal(err)
		}
		first, err := n.waitFirstSync(settle)
		if err != nil {
			t.Fatal(err)
		}
		// Its output is only noise from the netlink library (attributes of
		// kube-proxy's sets it does not decode); a failure shows in err.
		_, err = inNS(n.name, agentBin, "cleanup", "--kube-proxy-only", "--log-level", "error")
		if err != nil {
			t.Fatalf("%s: cleanup --kube-proxy-only: %v", n.name, err)
		}
		sc.notes = append(sc.notes, fmt.Sprintf("%s: %s kube-proxy stopped; kube-ipvs' first sync %v ops (%s); %s kube-proxy's leftovers removed",
			n.name, start.Format("15:04:05.0"), first["ops"], n.proc.appliedKinds(), time.Now().Format("15:04:05.0")))
		time.Sleep(2 * time.Second) // load on the migrated node before the next
	}
	sc.results = load.stop()
	requireNoFailures(t, sc.results, false)
	sc.tables = append(sc.tables, c.tablesOf(webVIP)...)
	for _, l := range c.nodePortTables(30081) {
		sc.tables = append(sc.tables, "after:  "+l)
	}

	ref, err := readState(c.node(4))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.nodes[:3] {
		st, err := readState(n)
		if err != nil {
			t.Fatal(err)
		}
		if d := diffState(n.name, st, "node-4", ref); d != "" {
			t.Errorf("%s after migration differs from node-4 (never ran kube-proxy):\n%s", n.name, d)
		}
		if left := kubeProxyLeftovers(st); len(left) > 0 {
			t.Errorf("%s: kube-proxy leftovers:\n%s", n.name, strings.Join(left, "\n"))
		}
	}
	sc.notes = append(sc.notes, "nodes 1-3 compared with node-4: iptables-save, ip6tables-save, ipset list -n, ipvsadm -Sn virtual servers, "+boundVIPs)
}
