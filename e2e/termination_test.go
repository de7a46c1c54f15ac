package e2e

import (
	"testing"
	"time"
)

// Scenario 3: graceful termination. A backend that turns terminating goes to
// weight 0: its established connection goes on, new connections go
// elsewhere. Removed from the slice, it stays (weight 0) while its
// connection lives and leaves after the connection closes; with a short
// drain timeout it leaves after that timeout even with the connection open.
func TestGracefulTermination(t *testing.T) {
	s := setup(t)
	bs := s.startBackends(t, "gt", 3, 3)

	t.Run("drains until the connection closes", func(t *testing.T) {
		svc := tcpService("gt", "10.96.3.1", bs)
		s.ready(t, svc, bs...)
		// The long-lived connection is the only one this virtual server
		// has seen, so once it closes its backend has nothing left.
		long, err := s.client.openLong("", svc.target())
		if err != nil {
			t.Fatalf("opening the long-lived connection: %v", err)
		}
		defer closeReset(long.conn)
		x := backendOf(bs, long.backend)
		others := without(bs, x)
		t.Logf("the long-lived connection is on %s", x.name)

		// Terminating: still listed, weight 0.
		eps := []endpoint{{addr: x.addr, state: terminating}}
		for _, b := range others {
			eps = append(eps, endpoint{addr: b.addr})
		}
		s.put(t, svc.with(eps...))
		w := allAt(svc, 1, others...)
		w[svc.real(x.addr)] = 0
		took := waitReals(t, svc, w)
		t.Logf("%s terminating: weight 0 in the kernel after %s", x.name, took.Round(time.Millisecond))
		if err := long.ping("while-terminating"); err != nil {
			t.Fatalf("the established connection stopped when its backend turned terminating: %v", err)
		}
		got := tally{}
		for i := 0; i < 20; i++ {
			name, err := s.client.askReset("", svc.target(), 3*time.Second)
			if err != nil {
				t.Fatalf("new connection %d: %v", i+1, err)
			}
			got[name]++
		}
		t.Logf("20 new connections while %s terminates: %s", x.name, got)
		if got[x.name] != 0 {
			t.Errorf("%s took %d new connections at weight 0", x.name, got[x.name])
		}

		// Removed from the slice: the agent keeps it draining at weight 0.
		mark := s.agent.mark()
		s.put(t, svc.with(eps[1:]...))
		e, err := s.agent.waitLog(mark, settle, func(e logEntry) bool { return isSync(e) && e.int("draining") > 0 })
		if err != nil {
			t.Fatalf("no sync counting a draining real server after the removal: %v", err)
		}
		t.Logf("after the removal the agent reports: %s", e)
		tab, err := readTable()
		if err != nil {
			t.Fatal(err)
		}
		if !tab.matches(svc.vs(), w) {
			t.Fatalf("after the removal want %v (draining at weight 0), kernel has %s", w, tab.weights(svc.vs()))
		}
		if err := long.ping("after-removal"); err != nil {
			t.Fatalf("the established connection stopped when its endpoint left the slice: %v", err)
		}
		t.Logf("the connection to %s still answers after its endpoint left the slice", x.name)

		closeReset(long.conn)
		gone := waitReals(t, svc, allAt(svc, 1, others...))
		t.Logf("%s left the kernel %s after its last connection closed (IPVS keeps a reset connection 10s)", x.name, gone.Round(time.Millisecond))
	})

	t.Run("short drain timeout", func(t *testing.T) {
		const timeout = 3 * time.Second
		svc := tcpService("gt-short", "10.96.3.2", bs).annotated(map[string]string{annDrainTimeout: timeout.String()})
		s.ready(t, svc, bs...)
		long, err := s.client.openLong("", svc.target())
		if err != nil {
			t.Fatalf("opening the long-lived connection: %v", err)
		}
		defer closeReset(long.conn)
		y := backendOf(bs, long.backend)
		others := without(bs, y)
		var eps []endpoint
		for _, b := range others {
			eps = append(eps, endpoint{addr: b.addr})
		}
		removed := time.Now()
		s.put(t, svc.with(eps...))
		w := allAt(svc, 1, others...)
		w[svc.real(y.addr)] = 0
		toZero := waitReals(t, svc, w)
		waitReals(t, svc, allAt(svc, 1, others...))
		gone := time.Since(removed)
		t.Logf("%s removed with its connection open: weight 0 after %s, gone %s after the removal (drain timeout %s)",
			y.name, toZero.Round(time.Millisecond), gone.Round(time.Millisecond), timeout)
		if gone < timeout {
			t.Errorf("%s left after %s, before its drain timeout %s", y.name, gone, timeout)
		}
		if gone > timeout+15*time.Second {
			t.Errorf("%s left %s after the removal; the drain timeout is %s", y.name, gone, timeout)
		}
	})
}

// without returns bs minus x.
func without(bs []*backend, x *backend) []*backend {
	var out []*backend
	for _, b := range bs {
		if b != x {
			out = append(out, b)
		}
	}
	return out
}
