package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// announcedRepair bounds the repair of what the kernel announces: a VIP
// bound on kube-ipvs0 (a local route or an address) and the shim's
// iptables-nft rules.
const announcedRepair = 2 * time.Second

// TestAnnouncedDriftRepaired: with a sync period far longer than the test,
// a bound ClusterIP's local route deleted with `ip route del` and the
// shim's jump deleted with `iptables -t nat -D` are each back within
// announcedRepair: the kernel announced the change, not the period's read,
// made the agent look.
func TestAnnouncedDriftRepaired(t *testing.T) {
	s := setup(t)
	s.restartAgentWith(t, "--ipvs-sync-period", "10m")
	bs := s.startBackends(t, "announce", 26, 1)
	svc := tcpService("announce", "10.96.26.1", bs)
	s.ready(t, svc, bs...)

	t.Run("a bound ClusterIP deleted", func(t *testing.T) {
		rebound(t, s, svc.vip, func() (bool, string) { return localRoute(svc.vip) }, unbindByHand(svc.vip)...)
		if got := s.askN(t, "", svc.target(), 2); len(got) == 0 {
			t.Errorf("%s does not answer after the repair", svc.target())
		}
	})

	t.Run("the shim's jump deleted", func(t *testing.T) {
		jump := func() (int, string) {
			out, err := run("iptables", "-w", "-t", "nat", "-L", "PREROUTING", "-n", "--line-numbers")
			if err != nil {
				return 0, err.Error()
			}
			for _, l := range strings.Split(out, "\n") {
				f := strings.Fields(l)
				if len(f) > 1 && f[1] == "KUBE-IPVS-SERVICES" {
					var n int
					_, _ = fmt.Sscan(f[0], &n)
					return n, out
				}
			}
			return 0, out
		}
		n, out := jump()
		if n == 0 {
			t.Fatalf("no jump to KUBE-IPVS-SERVICES in nat PREROUTING:\n%s", out)
		}
		since := s.agent.mark()
		start := time.Now()
		if _, err := run("iptables", "-w", "-t", "nat", "-D", "PREROUTING", fmt.Sprint(n)); err != nil {
			t.Fatal(err)
		}
		if _, err := waitFor(settle, func() (bool, string) { n, out := jump(); return n != 0, out }); err != nil {
			t.Fatalf("the jump is not back: %v", err)
		}
		took := time.Since(start)
		t.Logf("the jump to KUBE-IPVS-SERVICES is back %s after it was deleted", took.Round(time.Millisecond))
		repaired(t, s.agent, since)
		if took > announcedRepair {
			t.Errorf("the jump is back after %s, want within %s", took.Round(time.Millisecond), announcedRepair)
		}
	})
}

// repaired requires that an incremental sync since the log's mark found
// drift: the agent repaired what was changed, not a full sync nor a
// restart.
// rebound runs a command that unbinds vip, waits until bound says it is
// bound again, and fails the test unless an incremental sync repaired it
// within announcedRepair. The command's success is the proof it was gone:
// the agent may bind it again before any look could see it unbound.
func rebound(t *testing.T, s *suite, vip string, bound func() (bool, string), unbind ...string) {
	t.Helper()
	since := s.agent.mark()
	start := time.Now()
	if _, err := run(unbind[0], unbind[1:]...); err != nil {
		t.Fatal(err)
	}
	if _, err := waitFor(settle, bound); err != nil {
		t.Fatalf("%s not bound again: %v", vip, err)
	}
	took := time.Since(start)
	t.Logf("%s bound again %s after `%s`", vip, took.Round(time.Millisecond), strings.Join(unbind, " "))
	repaired(t, s.agent, since)
	if took > announcedRepair {
		t.Errorf("%s bound again after %s, want within %s", vip, took.Round(time.Millisecond), announcedRepair)
	}
}

func repaired(t *testing.T, a *agent, since int) {
	t.Helper()
	if _, err := a.waitLog(since, settle, func(e logEntry) bool { return isSync(e) && !e.bool("full") && e.int("drift") > 0 }); err != nil {
		t.Errorf("no incremental sync repaired drift: %v", err)
	}
	for _, e := range a.since(since) {
		if isFullSync(e) {
			t.Errorf("a full sync ran: %s", e)
		}
	}
}
