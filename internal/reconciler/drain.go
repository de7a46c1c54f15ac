package reconciler

import (
	"net/netip"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// drainInput is what the drain decision needs; all values, no kernel.
type drainInput struct {
	desired  model.State // the scoped desired state; changed in place (cloned services)
	observed model.State // the scoped observed state
	conns    map[dataplane.RealRef]model.Conns
	since    map[dataplane.RealRef]time.Time // when each drain started; updated in place
	timeout  func(model.VSKey) time.Duration
	now      time.Time
}

// drain decides the fate of real servers that left their Service while the
// virtual server stays (KEP-1669): a TCP/SCTP real server is kept
// at weight 0 until its connections reach zero or its drain timeout passes,
// so established connections finish; a UDP real server goes at once (UDP
// has no end of connection to wait for; the sync deletes its conntrack
// entries once its removal succeeded, see clearConntrack). Kept ones are written into in.desired at
// weight 0 and their start into in.since; it returns how many are kept.
func drain(in drainInput) (draining int) {
	for k, want := range in.desired.Services {
		have, ok := in.observed.Services[k]
		if !ok {
			continue
		}
		kept := false
		for _, rs := range have.Reals.All() {
			addr := rs.Addr
			if want.Reals.Has(addr) {
				delete(in.since, dataplane.RealRef{VS: k, RS: addr})
				continue
			}
			if !keepDraining(in, k, addr) {
				continue
			}
			if !kept {
				want = want.Clone()
				in.desired.Services[k] = want
				kept = true
			}
			want.Reals.Set(model.RealServer{Addr: addr, Weight: 0, Forward: rs.Forward})
			draining++
		}
	}
	return draining
}

// keepDraining tells whether a departed real server stays at weight 0 now,
// recording when its drain began.
func keepDraining(in drainInput, k model.VSKey, addr netip.AddrPort) bool {
	ref := dataplane.RealRef{VS: k, RS: addr}
	if k.Proto == model.UDP {
		delete(in.since, ref)
		return false
	}
	start, ok := in.since[ref]
	if !ok {
		start = in.now
		in.since[ref] = start
	}
	conns, known := in.conns[ref]
	if (known && conns.Total() == 0) || in.now.Sub(start) >= in.timeout(k) {
		delete(in.since, ref)
		return false
	}
	return true
}

// forgetDrains drops drain records of virtual servers that are gone.
func forgetDrains(since map[dataplane.RealRef]time.Time, desired model.State) {
	for ref := range since {
		if _, ok := desired.Services[ref.VS]; !ok {
			delete(since, ref)
		}
	}
}
