package reconciler

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// The connection counters of a large virtual server are read behind a
// sync's operations, at most once per readsShare times the last read's
// time: an endpoint that leaves waits at weight 0, taking no new
// connection, for a read begun after it left, and the sync asks to be run
// again; the sync after that read removes it. A read from before it left
// does not: it had its weight then. A small virtual server's counters are
// read in every sync that needs them, before its operations.
func TestLargeVirtualServersCountersReadBehindAtAPace(t *testing.T) {
	r := newTimedRig(t)
	r.store.SetService(service("big", "10.96.0.10", corev1.ProtocolTCP, 80))
	var eps []endpoint
	for i := range pacedReads + 2 {
		eps = append(eps, ready(fmt.Sprintf("10.128.%d.%d", i/250, i%250+1)))
	}
	r.store.SetSlice(slice("big", corev1.ProtocolTCP, 8080, eps...))
	r.sync(false)
	k := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80)
	leave := func(addr string) Status {
		t.Helper()
		for i, e := range eps {
			if e.addr == addr {
				eps = append(eps[:i:i], eps[i+1:]...)
				break
			}
		}
		r.store.SetSlice(slice("big", corev1.ProtocolTCP, 8080, eps...))
		r.clock.advance(time.Second)
		return r.sync(false)
	}
	holds := func(addr string) string {
		for _, l := range strings.Split(ipvsDump(r.fake.Dump()), "\n") {
			if strings.Contains(l, "-r "+addr+":8080 ") {
				return l[strings.LastIndex(l, "-w "):]
			}
		}
		return "gone"
	}

	stays := func(addr string) {
		t.Helper()
		r.clock.advance(time.Second)
		if st := r.sync(false); holds(addr) != "-w 0" || st.Draining != 1 || st.Requeue != drainRecheck {
			t.Fatalf("%s: %s, %d draining, requeue %v; want -w 0, 1, %v", addr, holds(addr), st.Draining, st.Requeue, drainRecheck)
		}
	}
	goes := func(addr string) {
		t.Helper()
		r.clock.advance(time.Second)
		if st := r.sync(false); holds(addr) != "gone" || st.Draining != 0 {
			t.Fatalf("%s: %s, %d draining; want gone, 0", addr, holds(addr), st.Draining)
		}
	}

	// The first departure waits for the read behind its sync, and goes
	// in the next; so does the second, whose counters (none) the first's
	// read saw while it had its weight.
	for _, addr := range []string{"10.128.0.1", "10.128.0.2"} {
		if st := leave(addr); holds(addr) != "-w 0" || st.Draining != 1 {
			t.Fatalf("%s as it leaves: %s, %d draining; want -w 0, 1", addr, holds(addr), st.Draining)
		}
		goes(addr)
	}
	// A read that took a second a second ago holds the next one off,
	// through the syncs within its pace.
	r.rec.countersRead[k] = counterRead{at: r.clock.now().Add(-time.Second), took: time.Second}
	leave("10.128.0.3")
	stays("10.128.0.3")
	r.clock.advance(readsShare * time.Second)
	stays("10.128.0.3") // the read now, behind this sync
	goes("10.128.0.3")

	// Below pacedReads real servers the counters are read before the
	// sync's operations, pace or not: a departed one with none goes at once.
	eps = eps[:pacedReads-1]
	r.store.SetSlice(slice("big", corev1.ProtocolTCP, 8080, eps...))
	r.clock.advance(time.Second)
	r.sync(false)
	r.rec.countersRead[k] = counterRead{at: r.clock.now(), took: time.Second}
	first := eps[0].addr
	if leave(first); holds(first) != "gone" {
		t.Fatalf("a small virtual server's departed real server: %s, want gone", holds(first))
	}
}
