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
	n := 0
	err := d.do(ctx, "flush conntrack", func(h *handles) error {
		if h.ct == nil {
			c, err := conntrack.Dial(nil)
			if err != nil {
				return fmt.Errorf("open conntrack netlink socket: %w", err)
			}
			h.ct = c
		}
		family := netfilter.ProtoIPv4
		if real.Addr().Unmap().Is6() {
			family = netfilter.ProtoIPv6
		}
		flows, err := h.ct.DumpFilter(conntrack.NewFilter().Family(family), nil)
		if err != nil {
			return fmt.Errorf("dump conntrack: %w", err)
		}
		var errs []error
		for _, f := range flows {
			if !repliesFrom(f, proto, real) {
				continue
			}
			err := h.ct.Delete(conntrack.Flow{TupleOrig: f.TupleOrig, TupleReply: f.TupleReply, ID: f.ID})
			switch {
			case err == nil:
				n++
			case errors.Is(err, syscall.ENOENT):
				// It expired between the dump and the delete: gone either way.
			default:
				errs = append(errs, fmt.Errorf("delete flow %s: %w", f.TupleOrig, err))
			}
		}
		return errors.Join(errs...)
	})
	if err != nil {
		return n, fmt.Errorf("flush %s conntrack entries of %s: %w", proto, real, err)
	}
	return n, nil
}

// repliesFrom tells whether a flow of proto is answered by real.
func repliesFrom(f conntrack.Flow, proto model.Protocol, real netip.AddrPort) bool {
	r := f.TupleReply
	return uint16(r.Proto.Protocol) == uint16(proto) &&
		r.IP.SourceAddress.Unmap() == real.Addr().Unmap() &&
		r.Proto.SourcePort == real.Port()
}
