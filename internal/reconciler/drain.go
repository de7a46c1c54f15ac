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
	desired  model.State                     // the scoped desired state; changed in place (cloned services)
	observed model.State                     // the scoped observed state
	conns    countersSince                   // a real server's counters, if read since its drain began
	since    map[dataplane.RealRef]time.Time // when each drain started; updated in place
	// idle are the real servers whose drain ended that the budget kept;
	// updated in place (only when budget is set).
	idle    map[dataplane.RealRef]bool
	budget  int // most real servers a sync deletes from one virtual server at a drain's end; 0: no limit
	timeout func(model.VSKey) time.Duration
	now     time.Time
}

// drainDeletes is the budget of a sync: the most real servers whose drain
// ended it deletes from one virtual server. A large Service's counters are
// read at a pace (pacedReads), so a rolling update's departures end their
// drains in batches of a thousand and more at a read; deleted at once,
// each such sync keeps the next endpoint changes waiting for seconds,
// every IPVS command walking the virtual server's list. Kept beyond the
// budget, they wait at weight 0 for the next syncs: a real server at
// weight 0 takes no new connection (expire_quiescent_template ends its
// persistence too), so one read idle stays idle.
const drainDeletes = 256

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
		left := in.budget
		eachReal(want.Reals, have.Reals, func(rs model.RealServer, wanted bool) {
			addr := rs.Addr
			if wanted {
				ref := dataplane.RealRef{VS: k, RS: addr}
				delete(in.since, ref)
				delete(in.idle, ref)
				return
			}
			if keepDraining(in, k, addr, &left) {
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

// drainKept drains desired against observed on the reconciler's own
// records (the drains' starts, the idle ones, the delete budget), as every
// sync that applies does; conns gives the counters known now.
func (r *Reconciler) drainKept(desired, observed model.State, conns countersSince, now time.Time) int {
	return drain(drainInput{desired: desired, observed: observed, conns: conns, since: r.drains,
		idle: r.idle, budget: drainDeletes, timeout: r.drainTimeout, now: now})
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
// recording when its drain began. One whose drain ended goes while the
// virtual server's budget (left, with in.budget set) lasts; past it, it
// is kept, marked idle. A UDP real server goes at once, whatever the
// budget: its flows must move to the endpoints that remain now.
func keepDraining(in drainInput, k model.VSKey, addr netip.AddrPort, left *int) bool {
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
	if !in.idle[ref] && !drained(in, k, ref, start) {
		return true
	}
	if in.budget > 0 {
		if *left == 0 {
			in.idle[ref] = true
			return true
		}
		*left--
	}
	delete(in.since, ref)
	delete(in.idle, ref)
	return false
}

// drained tells whether ref's drain has ended: no connection left, or its
// drain timeout passed.
func drained(in drainInput, k model.VSKey, ref dataplane.RealRef, start time.Time) bool {
	conns, known := in.conns(ref, start)
	return (known && conns.Total() == 0) || in.now.Sub(start) >= in.timeout(k)
}

// countersSince gives a real server's connection counters if they were
// read since its drain began (since): a read taken while it still had
// its weight may have been followed by new connections.
type countersSince func(ref dataplane.RealRef, since time.Time) (model.Conns, bool)

// readNow is a countersSince for counters read in the sync that asks,
// before it applies anything: new to every drain it decides.
func readNow(conns func(dataplane.RealRef) (model.Conns, bool)) countersSince {
	return func(ref dataplane.RealRef, _ time.Time) (model.Conns, bool) { return conns(ref) }
}

// forgetGone drops the records in m of virtual servers no longer desired;
// vs names the virtual server of a record's key. The drains, the idle
// real servers and the counters' reads are kept per virtual server and let
// go of alike.
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
