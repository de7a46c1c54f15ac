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

// The connection counters of a large virtual server are read at most once
// per readsShare times the last read's time: an endpoint that leaves
// sooner waits at weight 0, taking no new connection, and the sync asks
// to be run again; the read that comes once the pace allows it removes it.
// A small virtual server's counters are read in every sync that needs them.
func TestLargeVirtualServersCountersReadAtAPace(t *testing.T) {
	r := newRig(t)
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

	// The first departure is read at once: gone.
	if leave("10.128.0.1"); holds("10.128.0.1") != "gone" {
		t.Fatalf("first departed real server: %s, want gone", holds("10.128.0.1"))
	}
	// A read that took a second a second ago holds the next one off.
	r.rec.countersRead[k] = counterRead{at: r.clock.now().Add(-time.Second), took: time.Second}
	st := leave("10.128.0.2")
	if got := holds("10.128.0.2"); got != "-w 0" || st.Draining != 1 || st.Requeue != drainRecheck {
		t.Fatalf("departed within the pace: %s, %d draining, requeue %v; want -w 0, 1, %v", got, st.Draining, st.Requeue, drainRecheck)
	}
	r.clock.advance(readsShare * time.Second)
	if st := r.sync(false); holds("10.128.0.2") != "gone" || st.Draining != 0 {
		t.Fatalf("after the pace: %s, %d draining; want gone, 0", holds("10.128.0.2"), st.Draining)
	}

	// Below pacedReads real servers, no read is held off.
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
