package e2e

import (
	"strings"
	"testing"
)

// Scenario 1: the schedulers do what they promise to real clients, and a
// per-Service annotation changes one live Service's scheduler only.
func TestSchedulers(t *testing.T) {
	s := setup(t)
	bs := s.startBackends(t, "sch", 1, 3)

	t.Run("rr spreads evenly", func(t *testing.T) {
		svc := tcpService("sch-rr", "10.96.1.1", bs)
		s.ready(t, svc, bs...)
		const n = 300
		got := s.askN(t, "", svc.target(), n)
		t.Logf("rr: %d new connections: %s", n, got)
		even := n / len(bs)
		for _, b := range bs {
			if c := got[b.name]; c < even*9/10 || c > even*11/10 {
				t.Errorf("rr gave %s %d of %d connections; want within 10%% of %d (%s)", b.name, c, n, even, got)
			}
		}
	})

	t.Run("lc avoids a busy backend", func(t *testing.T) {
		svc := tcpService("sch-lc", "10.96.1.2", bs).annotated(map[string]string{annScheduler: "lc"})
		s.ready(t, svc, bs...)
		requireScheduler(t, svc, "lc")
		busy, err := s.client.openLong("", svc.target())
		if err != nil {
			t.Fatalf("opening the long-lived connection: %v", err)
		}
		defer busy.conn.Close()
		const n = 30
		got := s.askN(t, "", svc.target(), n)
		t.Logf("lc: %s holds an open connection; %d new connections: %s", busy.backend, n, got)
		if got[busy.backend] != 0 {
			t.Errorf("lc sent %d new connections to %s, which holds an open connection (%s)", got[busy.backend], busy.backend, got)
		}
		if len(got) != len(bs)-1 {
			t.Errorf("lc used %d backends for new connections, want the %d idle ones (%s)", len(got), len(bs)-1, got)
		}
		if err := busy.ping("still-busy"); err != nil {
			t.Errorf("the long-lived connection: %v", err)
		}
	})

	for _, sched := range []string{"sh", "mh"} {
		t.Run(sched+" keeps a client on one backend", func(t *testing.T) {
			vip := map[string]string{"sh": "10.96.1.3", "mh": "10.96.1.4"}[sched]
			svc := tcpService("sch-"+sched, vip, bs).annotated(map[string]string{annScheduler: sched})
			s.ready(t, svc, bs...)
			requireScheduler(t, svc, sched)
			used := tally{}
			var mapping []string
			for _, src := range clientAddrs {
				got := s.askN(t, src, svc.target(), 10)
				mapping = append(mapping, src+"->"+got.String())
				if len(got) != 1 {
					t.Errorf("%s spread one client address %s over %d backends: %s", sched, src, len(got), got)
				}
				for name := range got {
					used[name]++
				}
			}
			t.Logf("%s: 10 connections from each client address: %s", sched, strings.Join(mapping, ", "))
			t.Logf("%s: client addresses per backend: %s", sched, used)
			if len(used) < 2 {
				t.Errorf("%s put all %d client addresses on one backend (%s); want them spread", sched, len(clientAddrs), used)
			}
		})
	}

	t.Run("annotation changes one live service", func(t *testing.T) {
		svc := tcpService("sch-live", "10.96.1.5", bs)
		s.ready(t, svc, bs...)
		// A neighbour with its own scheduler and persistence: it must not
		// be touched by the edit of the other.
		nb := tcpService("sch-nb", "10.96.1.6", bs[:2]).annotated(map[string]string{annScheduler: "sh"})
		nb.affinity = 300
		s.ready(t, nb, bs[:2]...)
		requireScheduler(t, svc, "rr")
		long, err := s.client.openLong("", svc.target())
		if err != nil {
			t.Fatalf("opening the long-lived connection: %v", err)
		}
		defer long.conn.Close()
		others := func() []string { return withoutVS(saveTable(t), svc.target()) }
		before := others()
		mark := s.agent.mark()
		s.put(t, svc.annotated(map[string]string{annScheduler: "wlc"}))
		took := waitTable(t, svc.vs()+" to use wlc", func(tab table) bool {
			vs := tab[svc.vs()]
			return vs != nil && vs.sched == "wlc"
		}, svc.vs())
		t.Logf("scheduler rr -> wlc in the kernel %s after the file changed", took.Round(1e6))
		if e, err := s.agent.waitLog(mark, settle, isSync); err == nil {
			t.Logf("agent: %s", e)
		}
		after := others()
		if len(withoutVS(after, nb.target())) == len(after) {
			t.Fatalf("the neighbour %s is missing from the table: %q", nb.vs(), after)
		}
		if strings.Join(before, "\n") != strings.Join(after, "\n") {
			t.Errorf("other virtual servers changed:\nbefore:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
		} else {
			t.Logf("the other %d ipvsadm -Sn lines are unchanged", len(after))
		}
		waitReals(t, svc, allAt(svc, 1, bs...))
		if err := long.ping("after-edit"); err != nil {
			t.Errorf("the connection established before the edit: %v", err)
		}
	})
}

// requireScheduler checks the kernel's scheduler for a Service.
func requireScheduler(t *testing.T, svc service, sched string) {
	t.Helper()
	tab, err := readTable()
	if err != nil {
		t.Fatal(err)
	}
	if vs := tab[svc.vs()]; vs == nil || vs.sched != sched {
		t.Fatalf("%s: want scheduler %s, kernel has %s", svc.vs(), sched, tab.weights(svc.vs()))
	}
}

// withoutVS drops the ipvsadm -Sn lines of one virtual address.
func withoutVS(lines []string, target string) []string {
	var out []string
	for _, l := range lines {
		if !strings.Contains(l, " "+target+" ") && !strings.HasSuffix(l, " "+target) {
			out = append(out, l)
		}
	}
	return out
}
