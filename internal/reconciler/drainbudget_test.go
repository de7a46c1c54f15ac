package reconciler

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// A sync deletes at most drainDeletes real servers of one virtual server
// whose drain ended; the rest wait at weight 0 and go in the next syncs,
// with no new read of the counters: they were read idle at weight 0. A
// UDP Service's departed real servers all go at once.
func TestDrainEndsWithinABudgetASync(t *testing.T) {
	r := newTimedRig(t)
	const n = 2*drainDeletes + 10
	for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
		name := strings.ToLower(string(proto))
		r.store.SetService(service(name, "10.96.0.10", proto, 80))
		var eps []endpoint
		for i := range n {
			eps = append(eps, ready(fmt.Sprintf("10.128.%d.%d", i/250, i%250+1)))
		}
		r.store.SetSlice(slice(name, proto, 8080, eps...))
	}
	r.sync(false)
	for _, name := range []string{"tcp", "udp"} {
		proto := corev1.Protocol(strings.ToUpper(name))
		r.store.SetSlice(slice(name, proto, 8080, ready("10.128.0.1")))
	}
	r.clock.advance(time.Second)
	st := r.sync(false)
	if live, zero := reals(r, "-u"); live != 1 || zero != 0 {
		t.Fatalf("UDP after the departures: %d live, %d at weight 0; want 1, 0", live, zero)
	}
	// The TCP ones wait for the read behind that sync, all of them.
	if live, zero := reals(r, "-t"); live != 1 || zero != n-1 || st.Draining != zero {
		t.Fatalf("TCP after the departures: %d live, %d at weight 0, %d draining; want 1, %d, the same", live, zero, st.Draining, n-1)
	}
	r.clock.advance(drainRecheck)
	st = r.sync(false)
	tcp := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80)
	if live, zero := reals(r, "-t"); live != 1 || zero != n-1-drainDeletes || st.Draining != zero || st.Requeue != drainRecheck {
		t.Fatalf("TCP after the read: %d live, %d at weight 0, %d draining, requeue %v; want 1, %d, the same, %v",
			live, zero, st.Draining, st.Requeue, n-1-drainDeletes, drainRecheck)
	}

	// The kept ones need no read: with the counters held off by the
	// pace, the next budget goes anyway.
	r.rec.countersRead[tcp] = counterRead{at: r.clock.now(), took: time.Hour}
	r.clock.advance(drainRecheck)
	r.sync(false)
	if _, zero := reals(r, "-t"); zero != n-1-2*drainDeletes {
		t.Fatalf("TCP a sync later: %d at weight 0, want %d", zero, n-1-2*drainDeletes)
	}

	// One of them back in the slice is served again, not deleted.
	back := "10.128.2.21" // the 521st in address order: past both budgets
	ref := dataplane.RealRef{VS: tcp, RS: netip.MustParseAddrPort(back + ":8080")}
	if !r.rec.idle[ref] || !strings.Contains(ipvsDump(r.fake.Dump()), "-r "+back+":8080 -m -w 0") {
		t.Fatalf("%s before it comes back: idle %v, kernel:\n%s", back, r.rec.idle[ref], ipvsDump(r.fake.Dump()))
	}
	r.store.SetSlice(slice("tcp", corev1.ProtocolTCP, 8080, ready("10.128.0.1"), ready(back)))
	r.clock.advance(drainRecheck)
	st = r.sync(false)
	if live, zero := reals(r, "-t"); live != 2 || zero != 0 || st.Draining != 0 || len(r.rec.idle) != 0 {
		t.Fatalf("TCP with %s back: %d live, %d at weight 0, %d draining, %d idle; want 2, 0, 0, 0",
			back, live, zero, st.Draining, len(r.rec.idle))
	}
}

// reals counts the real servers of the virtual servers of one protocol
// flag of the dump: above weight 0, and at it.
func reals(r *rig, proto string) (live, zero int) {
	vs := false
	for _, l := range strings.Split(ipvsDump(r.fake.Dump()), "\n") {
		if strings.HasPrefix(l, "-A ") {
			vs = strings.HasPrefix(l, "-A "+proto+" ")
			continue
		}
		if !vs || !strings.Contains(l, "-r ") {
			continue
		}
		if strings.HasSuffix(l, "-w 0") {
			zero++
		} else {
			live++
		}
	}
	return live, zero
}
