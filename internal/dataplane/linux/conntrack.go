//go:build linux

package linux

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/ti-mo/conntrack"
	"github.com/ti-mo/netfilter"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// FlushConntrack deletes the conntrack entries of proto whose reply comes
// from real, i.e. flows IPVS NATed to that real server. Without this a UDP
// client that keeps its source port (DNS resolvers do) keeps hitting the
// conntrack entry of a removed pod and is black-holed.
//
// The conntrack netlink filter can only match family, mark, status and zone,
// so the family's table is dumped and matched here.
func (d *Dataplane) FlushConntrack(ctx context.Context, proto model.Protocol, real netip.AddrPort) (int, error) {
	n, err := d.flushFlows(ctx, real.Addr().Unmap().Is6(), func(f conntrack.Flow) bool { return repliesFrom(f, proto, real) })
	if err != nil {
		return n, fmt.Errorf("flush %s conntrack entries of %s: %w", proto, real, err)
	}
	return n, nil
}

// FlushConntrackDest deletes the conntrack entries of proto first sent to
// dst (see dataplane.Dataplane).
func (d *Dataplane) FlushConntrackDest(ctx context.Context, proto model.Protocol, dst netip.AddrPort) (int, error) {
	n, err := d.flushFlows(ctx, dst.Addr().Unmap().Is6(), func(f conntrack.Flow) bool { return sentTo(f, proto, dst) })
	if err != nil {
		return n, fmt.Errorf("flush %s conntrack entries to %s: %w", proto, dst, err)
	}
	return n, nil
}

// flowTable is the part of a conntrack socket a flush uses (a seam for the
// test of an abandoned flush).
type flowTable interface {
	DumpFilter(f conntrack.Filter, opts *conntrack.DumpOptions) ([]conntrack.Flow, error)
	Delete(f conntrack.Flow) error
	Close() error
}

// dialConntrack opens a conntrack netlink socket.
func dialConntrack() (flowTable, error) {
	c, err := conntrack.Dial(nil)
	if err != nil {
		return nil, fmt.Errorf("open conntrack netlink socket: %w", err)
	}
	return c, nil
}

// flushFlows deletes the family's flows that match and counts them. The
// count is the call's result, never a variable shared with it: an abandoned
// flush goes on deleting after its caller has returned.
func (d *Dataplane) flushFlows(ctx context.Context, v6 bool, match func(conntrack.Flow) bool) (int, error) {
	return call(ctx, d.calls, "flush conntrack", func(h *handles) (int, error) {
		if h.ct == nil {
			c, err := h.dialCT()
			if err != nil {
				return 0, err
			}
			h.ct = c
		}
		return deleteFlows(h.ct, v6, match)
	})
}

// deleteFlows dumps the family's flows and deletes those that match.
func deleteFlows(ct flowTable, v6 bool, match func(conntrack.Flow) bool) (int, error) {
	family := netfilter.ProtoIPv4
	if v6 {
		family = netfilter.ProtoIPv6
	}
	flows, err := ct.DumpFilter(conntrack.NewFilter().Family(family), nil)
	if err != nil {
		return 0, fmt.Errorf("dump conntrack: %w", err)
	}
	n := 0
	var errs []error
	for _, f := range flows {
		if !match(f) {
			continue
		}
		err := ct.Delete(conntrack.Flow{TupleOrig: f.TupleOrig, TupleReply: f.TupleReply, ID: f.ID})
		switch {
		case err == nil:
			n++
		case errors.Is(err, syscall.ENOENT):
			// It expired between the dump and the delete: gone either way.
		default:
			errs = append(errs, fmt.Errorf("delete flow %s: %w", f.TupleOrig, err))
		}
	}
	return n, errors.Join(errs...)
}

// sentTo tells whether a flow of proto was first sent to dst.
func sentTo(f conntrack.Flow, proto model.Protocol, dst netip.AddrPort) bool {
	o := f.TupleOrig
	return uint16(o.Proto.Protocol) == uint16(proto) &&
		o.IP.DestinationAddress.Unmap() == dst.Addr().Unmap() &&
		o.Proto.DestinationPort == dst.Port()
}

// repliesFrom tells whether a flow of proto is answered by real.
func repliesFrom(f conntrack.Flow, proto model.Protocol, real netip.AddrPort) bool {
	r := f.TupleReply
	return uint16(r.Proto.Protocol) == uint16(proto) &&
		r.IP.SourceAddress.Unmap() == real.Addr().Unmap() &&
		r.Proto.SourcePort == real.Port()
}
