package e2e

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// Scenario 6: lifecycle. Deleting a Service removes its virtual server and
// VIP, and connections to it fail fast; restarting the agent against the
// unchanged folder applies nothing, leaves established connections and
// weights alone; a virtual server added by hand outside the agent's
// addresses (as keepalived would) survives full resyncs.
func TestLifecycle(t *testing.T) {
	s := setup(t)
	bs := s.startBackends(t, "life", 6, 2)
	keep := tcpService("life-keep", "10.96.6.1", bs)
	gone := tcpService("life-gone", "10.96.6.2", bs)
	s.ready(t, keep, bs...)
	s.ready(t, gone, bs...)

	// Not the agent's: not on kube-ipvs0, not a node address.
	const foreign = "192.0.2.1:443"
	foreignRules := []string{
		"-A -t " + foreign + " -s wlc",
		"-a -t " + foreign + " -r 10.244.6.1:8080 -m -w 3",
	}
	for _, r := range foreignRules {
		if _, err := run("ipvsadm", strings.Fields(r)...); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = run("ipvsadm", "-D", "-t", foreign) })
	foreignSince := time.Now()

	t.Run("delete a service", func(t *testing.T) {
		s.removeFile(t, gone.file())
		took := waitTable(t, gone.vs()+" to go", func(tab table) bool { _, ok := tab[gone.vs()]; return !ok }, gone.vs())
		t.Logf("%s left the kernel %s after its file was removed", gone.vs(), took.Round(time.Millisecond))
		if _, err := waitFor(settle, func() (bool, string) {
			bound, out := vipBound(gone.vip)
			return !bound, out
		}); err != nil {
			t.Fatalf("VIP %s still bound on kube-ipvs0: %v", gone.vip, err)
		}
		for i := 0; i < 3; i++ {
			if i > 0 {
				// Pacing, not a check: the node answers "unreachable"
				// at most once a second per destination (ICMP rate
				// limit), and a limited answer is a retransmit later.
				time.Sleep(1100 * time.Millisecond)
			}
			start := time.Now()
			c, err := s.client.dial("tcp", "", gone.target(), 5*time.Second)
			took := time.Since(start)
			if err == nil {
				c.Close()
				t.Fatalf("a connection to the deleted service %s succeeded", gone.target())
			}
			t.Logf("connecting to the deleted %s failed after %s: %v", gone.target(), took.Round(time.Millisecond), err)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || took > 2*time.Second {
				t.Errorf("the connection failed only after %s (%v); want a fast failure, not a black hole", took, err)
			}
		}
	})

	t.Run("restart applies nothing", func(t *testing.T) {
		long, err := s.client.openLong("", keep.target())
		if err != nil {
			t.Fatalf("opening the long-lived connection: %v", err)
		}
		defer long.conn.Close()
		before := saveTable(t)
		if err := s.agent.stop(); err != nil {
			t.Fatalf("stopping the agent: %v", err)
		}
		if err := s.startAgent(); err != nil {
			t.Fatalf("restarting the agent: %v", err)
		}
		// Two checks of the whole kernel: the start's full sync and one
		// periodic drift check.
		_, next, err := s.agent.waitLogAt(0, settle, isFullSync)
		if err == nil {
			_, err = s.agent.waitLog(next, settle, isCheck)
		}
		if err != nil {
			t.Fatalf("waiting for the restarted agent's full sync and a drift check: %v", err)
		}
		ops, syncs := 0, 0
		for _, e := range s.agent.since(0) {
			if isSync(e) {
				syncs++
				ops += e.int("ops")
				t.Logf("restarted agent: %s", e)
			}
		}
		if ops != 0 {
			t.Errorf("the restarted agent applied %d operations to an unchanged table", ops)
		}
		after := saveTable(t)
		if strings.Join(before, "\n") != strings.Join(after, "\n") {
			t.Errorf("the table changed across the restart:\nbefore:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
		}
		if err := long.ping("after-restart"); err != nil {
			t.Errorf("the connection established before the restart: %v", err)
		}
		tab, err := readTable()
		if err != nil {
			t.Fatal(err)
		}
		for key, vs := range tab {
			for _, r := range vs.reals {
				if r.weight == 0 {
					t.Errorf("after the restart %s has %s at weight 0", key, r.addr)
				}
			}
		}
		plan, err := run(agentBin(), "agent", "--manifests", s.dir, "--dry-run",
			"--hostname-override", nodeName, "--log-level", "error")
		if err != nil || strings.TrimSpace(plan) != "" {
			t.Errorf("a dry-run against the unchanged folder planned: %q (%v)", plan, err)
		}
		t.Logf("restart: %d syncs, %d operations, %d ipvsadm -Sn lines unchanged, the connection to %s answers, dry-run plans nothing",
			syncs, ops, len(after), long.backend)
	})

	t.Run("a foreign virtual server survives resyncs", func(t *testing.T) {
		// A drift check reads the whole kernel every syncPeriod (or 100
		// reads' time, when a read is slow); wait for two folded after
		// the foreign rules went in.
		n := 0
		_, err := waitFor(2*settle, func() (bool, string) {
			n = 0
			for _, e := range s.agent.since(0) {
				if isCheck(e) && entryTime(e).After(foreignSince) {
					n++
				}
			}
			return n >= 2, fmt.Sprintf("%d drift checks", n)
		})
		if err != nil {
			t.Fatalf("waiting for two drift checks: %v", err)
		}
		have := map[string]bool{}
		for _, l := range saveTable(t) {
			have[l] = true
		}
		for _, r := range foreignRules {
			if !have[r] {
				t.Errorf("the hand-added rule %q is gone after drift checks", r)
			}
		}
		t.Logf("after %d drift checks the hand-added %s is intact", n, foreign)
	})
}

// entryTime is a log entry's timestamp: component-base's "ts",
// milliseconds since the epoch.
func entryTime(e logEntry) time.Time {
	ms, _ := e["ts"].(float64)
	return time.UnixMicro(int64(ms * 1000))
}
