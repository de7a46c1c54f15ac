package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Scenario: kube-proxy's meanings, on a node migrating from kube-proxy.
// With --ipvs-exclude-cidrs (kube-proxy's ipvs.excludeCIDRs) a Service
// whose ClusterIP is inside is served, and goes with its Service; a
// keepalived-like virtual server inside is left alone. With the cluster's
// own NodePort range (--nodeport-range 20000-22767), kube-proxy's NodePort
// virtual server on a port outside 30000-32767 is taken over in place by
// the Service naming that nodePort: a connection made through it before
// the agent started goes on.
func TestKubeProxyMeanings(t *testing.T) {
	s := setup(t)
	bs := s.startBackends(t, "kpm", 66, 2)
	const (
		excluded = "10.96.66.0/24"
		foreign  = "10.96.66.99:443" // keepalived's, inside excludeCIDRs
		nodePort = 20080
	)
	inExcluded := tcpService("kpm-excluded", "10.96.66.1", bs)
	np := tcpService("kpm-nodeport", "10.96.67.1", bs)
	// The NodePort's virtual server, as ipvsadm names it.
	npVS := service{name: np.name, vip: clientNodeAddr, port: nodePort, proto: "TCP", targetPort: backendTCPPort}

	if err := s.agent.stop(); err != nil {
		t.Fatalf("stopping the agent: %v", err)
	}
	// What kube-proxy left, and keepalived's: the NodePort with the one
	// endpoint kube-proxy knew of, the foreign server not on kube-ipvs0.
	kubeProxys := []string{
		fmt.Sprintf("-A -t %s:%d -s rr", clientNodeAddr, nodePort),
		fmt.Sprintf("-a -t %s:%d -r %s -m -w 1", clientNodeAddr, nodePort, np.real(bs[0].addr)),
		"-A -t " + foreign + " -s wlc",
		"-a -t " + foreign + " -r " + np.real(bs[1].addr) + " -m -w 3",
	}
	for _, r := range kubeProxys {
		if _, err := run("ipvsadm", strings.Fields(r)...); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		// The Services go while the agent that made them runs, then the
		// suite's agent comes back.
		s.removeFile(t, inExcluded.file())
		s.removeFile(t, np.file())
		for _, key := range []string{inExcluded.vs(), np.vs(), npVS.vs()} {
			waitTable(t, key+" to go", func(tab table) bool { _, ok := tab[key]; return !ok }, key)
		}
		_, _ = run("ipvsadm", "-D", "-t", foreign)
		if err := s.agent.stop(); err != nil {
			t.Errorf("stopping the agent: %v", err)
		}
		if err := s.startAgent(); err != nil {
			t.Errorf("restarting the suite's agent: %v", err)
		}
	})
	long, err := s.client.openLong("", npVS.target())
	if err != nil {
		t.Fatalf("a connection through kube-proxy's NodePort before the agent starts: %v", err)
	}
	defer long.conn.Close()

	// The Services exist before the agent starts, as in a migration.
	s.put(t, inExcluded)
	s.writeFile(t, np.file(), asNodePort(np.yaml(), nodePort))
	if err := s.startAgent("--ipvs-exclude-cidrs="+excluded, "--nodeport-range=20000-22767", "--nodeport-addresses="+clientNodeAddr+"/32"); err != nil {
		t.Fatalf("starting the agent with the cluster's flags: %v", err)
	}

	t.Run("a Service inside the excluded CIDRs is served", func(t *testing.T) {
		waitReals(t, inExcluded, allAt(inExcluded, 1, bs...))
		got := s.askN(t, "", inExcluded.target(), 6)
		if len(got) != 2 {
			t.Errorf("%s answered by %s, want both backends", inExcluded.target(), got)
		}
		t.Logf("%s (inside %s): %s", inExcluded.target(), excluded, got)
	})

	t.Run("kube-proxy's NodePort outside 30000-32767 is taken over in place", func(t *testing.T) {
		took := waitReals(t, npVS, allAt(npVS, 1, bs...))
		if err := long.ping("after-adoption"); err != nil {
			t.Fatalf("the connection made through kube-proxy's NodePort before the agent started: %v", err)
		}
		for _, e := range s.agent.since(0) {
			if e.msg() == "applied" && strings.HasPrefix(e.str("op"), fmt.Sprintf("-D -t %s:%d", clientNodeAddr, nodePort)) {
				t.Fatalf("the agent deleted kube-proxy's NodePort: %s", e)
			}
		}
		got := s.askN(t, "", npVS.target(), 6)
		t.Logf("%s adopted within %s of the start, its connection to %s answers, new ones: %s",
			npVS.target(), took.Round(time.Millisecond), long.backend, got)
	})

	t.Run("another tool's server inside the excluded CIDRs survives", func(t *testing.T) {
		// Two checks of the whole kernel (the start's full sync and a
		// periodic drift check) see it.
		_, next, err := s.agent.waitLogAt(0, settle, isFullSync)
		if err == nil {
			_, err = s.agent.waitLog(next, settle, isCheck)
		}
		if err != nil {
			t.Fatalf("waiting for a full sync and a drift check: %v", err)
		}
		have := map[string]bool{}
		for _, l := range saveTable(t) {
			have[l] = true
		}
		for _, r := range kubeProxys[2:] {
			if !have[r] {
				t.Errorf("%q is gone", r)
			}
		}
	})

	t.Run("the Service's own goes with it", func(t *testing.T) {
		s.removeFile(t, inExcluded.file())
		took := waitTable(t, inExcluded.vs()+" to go", func(tab table) bool { _, ok := tab[inExcluded.vs()]; return !ok }, inExcluded.vs())
		if _, err := waitFor(settle, func() (bool, string) {
			bound, out := vipBound(inExcluded.vip)
			return !bound, out
		}); err != nil {
			t.Fatalf("VIP %s still bound on kube-ipvs0: %v", inExcluded.vip, err)
		}
		if tab := strings.Join(saveTable(t), "\n"); !strings.Contains(tab, "-A -t "+foreign) {
			t.Fatalf("another tool's %s went with the Service:\n%s", foreign, tab)
		}
		t.Logf("%s and its VIP left %s after its file was removed; %s stays", inExcluded.vs(), took.Round(time.Millisecond), foreign)
	})
}

// asNodePort makes a Service's manifest a NodePort Service on nodePort.
func asNodePort(yaml string, nodePort int) string {
	yaml = strings.Replace(yaml, "  type: ClusterIP\n", "  type: NodePort\n", 1)
	return strings.Replace(yaml, "      targetPort: ", fmt.Sprintf("      nodePort: %d\n      targetPort: ", nodePort), 1)
}
