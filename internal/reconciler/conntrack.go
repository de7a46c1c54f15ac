package reconciler

import (
	"context"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/logv"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// A failed conntrack cleanup is tried again after conntrackRetryFirst,
// doubling up to conntrackRetryMax while it keeps failing.
const (
	conntrackRetryFirst = time.Second
	conntrackRetryMax   = time.Minute
	// maxStaleKeys bounds the keys kept while cleanups keep failing (a
	// node whose conntrack netlink is gone): beyond it a key is dropped and
	// counted, and its entries expire on their own once their clients
	// stop sending.
	maxStaleKeys = 1 << 16
)

// staleConntrack is the conntrack cleanup applied operations left to do
// (dataplane.StaleFlows): the UDP real servers removed and the UDP
// frontends that got their first endpoint. Keys stay until a cleanup of
// them succeeds, so a failed one is not lost but tried again.
type staleConntrack struct {
	reals, dests map[netip.AddrPort]struct{}
	failures     int       // cleanups failed in a row
	next         time.Time // when a failed cleanup is tried again
	dropped      int       // keys dropped at maxStaleKeys since the last warning
}

func newStaleConntrack() staleConntrack {
	return staleConntrack{reals: map[netip.AddrPort]struct{}{}, dests: map[netip.AddrPort]struct{}{}}
}

// add keeps k in set, unless maxStaleKeys are kept.
func (c *staleConntrack) add(set map[netip.AddrPort]struct{}, k netip.AddrPort) {
	k = netip.AddrPortFrom(k.Addr().Unmap(), k.Port())
	if _, ok := set[k]; !ok && len(c.reals)+len(c.dests) >= maxStaleKeys {
		c.dropped++
		return
	}
	set[k] = struct{}{}
}

// noteStale records the cleanup that what an apply removed calls for: each
// UDP real server removed (with its virtual server or alone), and each UDP
// frontend whose no-endpoints member went (its first endpoint).
func (r *Reconciler) noteStale(rm removed) {
	c := &r.stale
	for _, g := range rm {
		switch {
		case g.member != (model.SetEntry{}):
			if firstEndpoint(g.member) {
				c.add(c.dests, netip.AddrPortFrom(g.member.Addr(), g.member.Port()))
			}
		case g.real.VS.Proto == model.UDP:
			c.add(c.reals, g.real.RS)
		}
	}
}

// firstEndpoint tells whether a removed member means a UDP frontend just
// got its first usable endpoint: it is the frontend's no-endpoints member.
func firstEndpoint(e model.SetEntry) bool {
	return e.Proto() == model.UDP && shim.KindOf(e) == shim.NoEndpoints
}

// clearConntrack deletes the stale UDP conntrack entries the syncs so far
// left (see staleConntrack): one ClearConntrack per family, which reads
// that family's table once whatever the number of keys, timed and counted
// as kube-proxy times and counts a round of its conntrack reconciler. It
// runs after the sync's operations and its programming latency: the table
// is right without it. A failure is logged and tried again with backoff
// (st.Requeue asks for the sync that does); it never fails the sync.
func (r *Reconciler) clearConntrack(ctx context.Context, st *Status) {
	c := &r.stale
	if len(c.reals)+len(c.dests) == 0 {
		return
	}
	now := r.opt.Now()
	if now.Before(c.next) {
		st.requeueIn(c.next.Sub(now))
		return
	}
	r.forgetLive()
	failed := false
	for _, v6 := range []bool{false, true} {
		s := c.family(v6)
		if s.Len() == 0 {
			continue
		}
		start := r.opt.Now()
		n, err := r.opt.Dataplane.ClearConntrack(ctx, s)
		r.metrics.m.ConntrackDeleted(n)
		r.metrics.m.ConntrackReconciled(v6, r.opt.Now().Sub(start), n)
		if err != nil {
			failed = true
			r.log.Warn("clear stale conntrack entries", zap.Int("reals", len(s.Reals)), zap.Int("frontends", len(s.Dests)),
				zap.Int("deleted", n), zap.Int("dropped", c.dropped), zap.Error(err))
			c.dropped = 0
			continue
		}
		c.forget(s)
		r.log.Log(logv.V(logv.Sync), "cleared stale conntrack entries", zap.Int("reals", len(s.Reals)), zap.Int("frontends", len(s.Dests)),
			zap.Int("deleted", n))
	}
	if !failed {
		c.failures, c.next = 0, time.Time{}
		return
	}
	c.failures++
	d := backoff(c.failures, conntrackRetryFirst, conntrackRetryMax)
	c.next = r.opt.Now().Add(d)
	st.requeueIn(d)
}

// forgetLive drops the keys whose entries are live again: a real server
// another UDP virtual server still sends to (at a weight above 0), and a
// frontend that has no endpoint again (its entries are what its next
// first endpoint clears).
func (r *Reconciler) forgetLive() {
	c := &r.stale
	if len(c.reals) > 0 {
		for k, svc := range r.obs.State().Services {
			if k.Proto != model.UDP {
				continue
			}
			for _, rs := range svc.Reals.All() {
				if rs.Weight > 0 {
					delete(c.reals, netip.AddrPortFrom(rs.Addr.Addr().Unmap(), rs.Addr.Port()))
				}
			}
		}
	}
	for dst := range c.dests {
		if r.obs.HasMember(shim.Entry(shim.NoEndpoints, dst.Addr(), model.UDP, dst.Port())) {
			delete(c.dests, dst)
		}
	}
}

// family is the cleanup of one address family.
func (c *staleConntrack) family(v6 bool) dataplane.StaleFlows {
	s := dataplane.NewStaleFlows(model.UDP)
	for k := range c.reals {
		if k.Addr().Is6() == v6 {
			s.AddReal(k)
		}
	}
	for k := range c.dests {
		if k.Addr().Is6() == v6 {
			s.AddDest(k)
		}
	}
	return s
}

// forget drops the keys of a cleanup that succeeded.
func (c *staleConntrack) forget(s dataplane.StaleFlows) {
	for k := range s.Reals {
		delete(c.reals, k)
	}
	for k := range s.Dests {
		delete(c.dests, k)
	}
}
