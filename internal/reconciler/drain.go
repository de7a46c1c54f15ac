package reconciler

import (
	"maps"
	"net/netip"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// drainInput is what the drain decision needs; all values, no kernel.
type drainInput struct {
	desired  model.State                                 // the scoped desired state; changed in place (cloned services)
	observed model.State                                 // the scoped observed state
	conns    func(dataplane.RealRef) (model.Conns, bool) // a real server's counters, if known
	since    map[dataplane.RealRef]time.Time             // when each drain started; updated in place
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
		var keep []model.RealServer
		eachReal(want.Reals, have.Reals, func(rs model.RealServer, wanted bool) {
			addr := rs.Addr
			if wanted {
				delete(in.since, dataplane.RealRef{VS: k, RS: addr})
				return
			}
			if keepDraining(in, k, addr) {
				keep = append(keep, model.RealServer{Addr: addr, Weight: 0, Forward: rs.Forward})
			}
		})
		if len(keep) == 0 {
			continue
		}
		want = want.Clone()
		want.Reals.Insert(keep) // eachReal walks in address order
		in.desired.Services[k] = want
		draining += len(keep)
	}
	return draining
}

// eachReal calls fn with every real server of have, in address order,
// telling whether want lists its address too: both lists are walked side
// by side, a comparison per real server rather than a search.
func eachReal(want, have model.Reals, fn func(rs model.RealServer, wanted bool)) {
	w := want.All()
	for _, rs := range have.All() {
		for len(w) > 0 && w[0].Addr.Compare(rs.Addr) < 0 {
			w = w[1:]
		}
		fn(rs, len(w) > 0 && w[0].Addr == rs.Addr)
	}
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
	conns, known := in.conns(ref)
	if (known && conns.Total() == 0) || in.now.Sub(start) >= in.timeout(k) {
		delete(in.since, ref)
		return false
	}
	return true
}

// forgetGone drops the records in m of virtual servers no longer desired;
// vs names the virtual server of a record's key. The drains and the
// counters' reads are kept per virtual server and let go of alike.
func forgetGone[K comparable, V any](m map[K]V, desired model.State, vs func(K) model.VSKey) {
	maps.DeleteFunc(m, func(k K, _ V) bool {
		_, ok := desired.Services[vs(k)]
		return !ok
	})
}

// realVS and itself name the virtual server of a drain's and of a read's
// record (forgetGone).
func realVS(ref dataplane.RealRef) model.VSKey { return ref.VS }
func itself(k model.VSKey) model.VSKey         { return k }
