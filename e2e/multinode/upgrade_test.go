package multinode

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// testRollingUpgrade restarts the agents one node at a time, as a
// DaemonSet's RollingUpdate with maxUnavailable 1 does: SIGTERM, then the
// new binary (the image's agent on node 4 restarts as it is: the image is
// the one this commit builds). Under steady TCP and UDP load no request may
// fail, and a restart against an unchanged cluster writes nothing to the
// kernel: the new agent's kube_ipvs_operations_total stays at zero through
// its first full sync, which plans zero operations.
func testRollingUpgrade(ctx context.Context, t *testing.T, c *cluster) {
	sc := &scenario{name: "rolling upgrade: each agent restarted in turn (SIGTERM, new binary, start)"}
	c.rep.add(sc)
	// Start from a settled table: real servers the previous phase removed
	// drain at weight 0 for up to --drain-timeout, and their end during a
	// restart would be a change the restart did not make.
	if err := c.waitTables("web programmed, nothing draining", func(n *node, tb Table) bool {
		for _, reals := range tb {
			for _, w := range reals {
				if w == 0 {
					return false
				}
			}
		}
		return hasWeb(n, tb)
	}); err != nil {
		t.Fatal(err)
	}
	before := map[string]Table{}
	for _, n := range c.nodes {
		tb, err := n.table()
		if err != nil {
			t.Fatal(err)
		}
		before[n.name] = tb
	}
	load := steadyLoad()
	load.start()
	time.Sleep(2 * time.Second)
	for _, n := range c.nodes {
		next := kubeIPVSNext
		if n.proc.kind == kubeIPVSImage {
			next = kubeIPVSImage
		}
		start := time.Now()
		if err := n.stop(); err != nil {
			t.Fatal(err)
		}
		if err := n.start(next); err != nil {
			t.Fatal(err)
		}
		first, err := n.waitFirstSync(settle)
		if err != nil {
			t.Fatal(err)
		}
		m, err := n.metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ops := sumPrefix(m, "kube_ipvs_operations_total")
		if ops != 0 || fmt.Sprint(first["ops"]) != "0" {
			t.Errorf("%s: restart against an unchanged cluster: first sync planned %v ops, kube_ipvs_operations_total %v (want 0)",
				n.name, first["ops"], ops)
		}
		tb, err := n.table()
		if err != nil {
			t.Fatal(err)
		}
		if tb.String() != before[n.name].String() {
			t.Errorf("%s: table changed across the restart:\nbefore:\n%s\nafter:\n%s", n.name, before[n.name], tb)
		}
		sc.notes = append(sc.notes, fmt.Sprintf("%s: %s, restart to first full sync %.1f s, operations planned %v, kube_ipvs_operations_total %v, table unchanged",
			n.name, next, time.Since(start).Seconds(), first["ops"], ops))
		time.Sleep(2 * time.Second)
	}
	sc.results = load.stop()
	requireNoFailures(t, sc.results, true)
	sc.tables = c.tablesOf(webVIP)
	for _, n := range c.nodes {
		if v := strings.TrimSpace(mustRun(t, n.name, n.command(n.proc.kind)[0], "version")); n.proc.kind == kubeIPVSNext && !strings.Contains(v, "next") {
			t.Errorf("%s runs %q, not the new binary", n.name, v)
		}
	}
}

// mustRun runs a command in a namespace and returns its output.
func mustRun(t *testing.T, ns, name string, args ...string) string {
	t.Helper()
	out, err := inNS(ns, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// testBackToKubeProxy moves node 1 back to kube-proxy under load, without
// a gap: stop kube-ipvs (its table stays and serves), start kube-proxy
// (its first sync adopts the same virtual servers and VIPs and adds its
// rules and sets), then `kube-ipvs cleanup --shim-only` removes kube-ipvs'
// chains and sets and nothing else. Afterwards node 1 holds what it held
// under kube-proxy at the start.
func testBackToKubeProxy(ctx context.Context, t *testing.T, c *cluster) {
	sc := &scenario{name: "back to kube-proxy on node-1"}
	c.rep.add(sc)
	n := c.node(1)
	load := steadyLoad()
	load.start()
	time.Sleep(2 * time.Second)
	start := time.Now()
	if err := n.stop(); err != nil {
		t.Fatal(err)
	}
	if err := n.start(kubeProxy); err != nil {
		t.Fatal(err)
	}
	// kube-proxy has synced once its sets hold the cluster IPs.
	if _, err := waitFor(settle, func() (bool, string) {
		out, err := inNS(n.name, "ipset", "list", "KUBE-CLUSTER-IP")
		return err == nil && strings.Contains(out, "10.96.1.10,tcp:80"), out
	}); err != nil {
		t.Fatalf("kube-proxy's first sync on node-1: %v", err)
	}
	_, err := inNS(n.name, agentBin, "cleanup", "--shim-only", "--log-level", "error")
	if err != nil {
		t.Fatalf("cleanup --shim-only: %v", err)
	}
	sc.notes = append(sc.notes, fmt.Sprintf("node-1: kube-ipvs stopped, kube-proxy synced, kube-ipvs' shim removed in %.1f s", time.Since(start).Seconds()))
	time.Sleep(3 * time.Second)
	sc.results = load.stop()
	requireNoFailures(t, sc.results, false)
	sc.tables = c.tablesOf(webVIP)
	st, err := kubeProxySettled(n)
	if err != nil {
		t.Fatal(err)
	}
	// kube-proxy's IPv6 proxier fills its chains when it first syncs, which
	// in this IPv4-only cluster it did on one start and not on another
	// (its log: "Not syncing ipvs rules until Services and Endpoints have
	// been received"): its IPv6 rules are compared by chain only, and the
	// lines checked for kube-ipvs' names below.
	chainsOnly := func(st nodeState) nodeState {
		out := nodeState{}
		for k, v := range st {
			out[k] = v
		}
		var chains []string
		for _, l := range st["ip6tables-save"] {
			if strings.HasPrefix(l, ":") || strings.HasPrefix(l, "*") {
				chains = append(chains, l)
			}
		}
		out["ip6tables-save"] = chains
		return out
	}
	if d := diffState("node-1 now", chainsOnly(st), "node-1 under kube-proxy at the start", chainsOnly(c.kubeProxyState)); d != "" {
		t.Errorf("node-1 back on kube-proxy differs from its state under kube-proxy at the start:\n%s", d)
	}
	if d := diffState("node-1 now", st, "at the start", c.kubeProxyState); d != "" {
		sc.notes = append(sc.notes, fmt.Sprintf("kube-proxy's own IPv6 rules differ from its first start: %d lines", strings.Count(d, "\n")+1))
	}
	// kube-ipvs' names; kube-proxy's own KUBE-IPVS-FILTER, -OUT-FILTER and
	// -IPS are not among them.
	ours := regexp.MustCompile(`KUBE-IPVS6?-(SERVICES|POSTROUTING|MARK-MASQ|FIREWALL|SOURCE-RANGES|FORWARD|CLUSTER-IP|EXTERNAL|LOOP-BACK|NO-ENDPOINTS|VIPS|FRONTENDS|LOCAL|HEALTH)`)
	for _, sec := range []string{"iptables-save", "ip6tables-save", "ipset list -n"} {
		for _, l := range st[sec] {
			if ours.MatchString(l) {
				t.Errorf("node-1: kube-ipvs leftover in %s: %s", sec, l)
			}
		}
	}
	sc.notes = append(sc.notes, "node-1 compared with its own state under kube-proxy before the migration: iptables-save, ip6tables-save, ipset list -n, virtual servers, "+boundVIPs)
}
