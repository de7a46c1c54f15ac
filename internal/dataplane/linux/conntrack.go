//go:build linux

package linux

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// ClearConntrack deletes the conntrack entries s names: one dump of each
// family's table s has keys of, matched against all the keys, then a
// delete per match (see dataplane.StaleFlows).
func (d *Dataplane) ClearConntrack(ctx context.Context, s dataplane.StaleFlows) (int, error) {
	total := 0
	var errs []error
	for _, v6 := range []bool{false, true} {
		if !s.Has(v6) {
			continue
		}
		fam := s.Family(v6)
		n, err := call(ctx, d.calls, "clear conntrack", func(ctx context.Context, h *handles) (int, error) {
			if h.ct == nil {
				c, err := h.dialCT()
				if err != nil {
					return 0, err
				}
				h.ct = c
			}
			return clearFlows(ctx, h.ct, v6, fam)
		})
		total += n
		if err != nil {
			errs = append(errs, fmt.Errorf("clear %s conntrack entries of %d real servers and %d frontends (%s): %w",
				s.Proto, len(fam.Reals), len(fam.Dests), familyName(v6), err))
		}
	}
	return total, errors.Join(errs...)
}

func familyName(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}

// flowTable is the part of a conntrack socket a cleanup uses (a seam for
// tests). Its requests honour ctx.
type flowTable interface {
	// Dump hands fn every flow of the family, of proto as far as the kernel
	// can filter by it (fn still checks). An error after some flows were
	// handed over means the dump is incomplete.
	Dump(ctx context.Context, v6 bool, proto uint8, fn func(conntrack.Flow)) error
	// Delete deletes flows, a batch of sends, and returns each one's
	// error (errs[i] for flows[i]); its own error means the outcome of
	// those not answered is unknown.
	Delete(ctx context.Context, flows []conntrack.Flow, errs []error) error
	Close() error
}

// clearFlows dumps the family's flows once, keeping only those s names,
// and then deletes them. The deletes wait for the dump's end: the dump's
// socket cannot carry them, and the kernel's walk of its table is not
// disturbed. It returns how many went; a dump cut short is an error (the
// caller retries), after the flows it did read are deleted.
func clearFlows(ctx context.Context, ct flowTable, v6 bool, s dataplane.StaleFlows) (int, error) {
	var stale []conntrack.Flow
	dumpErr := ct.Dump(ctx, v6, uint8(s.Proto), func(f conntrack.Flow) {
		if s.Matches(model.Protocol(f.TupleOrig.Proto.Protocol), origDst(f), replySrc(f)) {
			stale = append(stale, conntrack.Flow{TupleOrig: f.TupleOrig, TupleReply: f.TupleReply, ID: f.ID})
		}
	})
	if dumpErr != nil {
		dumpErr = fmt.Errorf("dump conntrack: %w", dumpErr)
	}
	errs := []error{dumpErr}
	if len(stale) == 0 {
		return 0, errors.Join(errs...)
	}
	derrs := make([]error, len(stale))
	if err := ct.Delete(ctx, stale, derrs); err != nil {
		errs = append(errs, fmt.Errorf("delete %d flows: %w", len(stale), err))
	}
	n := 0
	for i, err := range derrs {
		switch {
		case err == nil:
			n++
		case errors.Is(err, syscall.ENOENT):
			// It expired between the dump and the delete: gone either way.
		default:
			errs = append(errs, fmt.Errorf("delete flow %s: %w", stale[i].TupleOrig, err))
		}
	}
	return n, errors.Join(errs...)
}

// origDst is where a flow was first sent.
func origDst(f conntrack.Flow) netip.AddrPort {
	return netip.AddrPortFrom(f.TupleOrig.IP.DestinationAddress, f.TupleOrig.Proto.DestinationPort)
}

// replySrc is where a flow's replies come from: the real server IPVS NATed
// it to, or its destination when nothing did.
func replySrc(f conntrack.Flow) netip.AddrPort {
	return netip.AddrPortFrom(f.TupleReply.IP.SourceAddress, f.TupleReply.Proto.SourcePort)
}

// ctTable reads and deletes conntrack entries over one netfilter socket:
// a dump streams (a table of a million entries is never held whole), and
// deletes go out in batches.
type ctTable struct {
	s *socket
	// noFilter: the kernel refused the dump filter; dump unfiltered.
	noFilter bool
}

// dialConntrack opens the conntrack socket in the agent's network
// namespace.
func dialConntrack() (flowTable, error) { return openFlowTable(netns.None()) }

// openFlowTable opens the conntrack socket in ns (netns.None(): the
// current one).
func openFlowTable(ns netns.NsHandle) (*ctTable, error) {
	s, err := openSocketIn(ns, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("open conntrack netlink socket: %w", err)
	}
	return &ctTable{s: s}, nil
}

func (t *ctTable) Close() error {
	t.s.close()
	return nil
}

// Dump dumps the family's table, filtered by the kernel to proto where it
// can (CTA_FILTER, Linux 5.8). The filter holds one tuple per direction, so
// the keys of a cleanup (many real servers, many frontends) cannot go in
// it: the protocol is what they share. A kernel that rejects the filter
// is asked again without it, and not asked with it again; an older kernel
// ignores the attribute and dumps everything, which the match sorts out.
func (t *ctTable) Dump(ctx context.Context, v6 bool, proto uint8, fn func(conntrack.Flow)) error {
	if !t.noFilter {
		err := t.dumpWith(ctx, v6, protoFilter(proto), fn)
		if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EOPNOTSUPP) {
			return err
		}
		t.noFilter = true
	}
	return t.dumpWith(ctx, v6, nil, fn)
}

// conntrack netlink message types and attributes (linux/netfilter/
// nfnetlink_conntrack.h).
const (
	ctNewMsg     = unix.NFNL_SUBSYS_CTNETLINK<<8 | 0 // IPCTNL_MSG_CT_NEW: what a dump answers with
	ctGetMsg     = unix.NFNL_SUBSYS_CTNETLINK<<8 | 1 // IPCTNL_MSG_CT_GET
	ctDeleteMsg  = unix.NFNL_SUBSYS_CTNETLINK<<8 | 2 // IPCTNL_MSG_CT_DELETE
	ctaTuple     = 1                                 // CTA_TUPLE_ORIG
	ctaReply     = 2                                 // CTA_TUPLE_REPLY
	ctaID        = 12                                // CTA_ID
	ctaTupleIP   = 1                                 // CTA_TUPLE_IP
	ctaProto     = 2                                 // CTA_TUPLE_PROTO
	ctaZone      = 3                                 // CTA_TUPLE_ZONE
	ctaIPv4Src   = 1                                 // CTA_IP_V4_SRC
	ctaIPv4Dst   = 2                                 // CTA_IP_V4_DST
	ctaIPv6Src   = 3                                 // CTA_IP_V6_SRC
	ctaIPv6Dst   = 4                                 // CTA_IP_V6_DST
	ctaProtoNr   = 1                                 // CTA_PROTO_NUM
	ctaProtoSrc  = 2                                 // CTA_PROTO_SRC_PORT
	ctaProtoDst  = 3                                 // CTA_PROTO_DST_PORT
	ctaFilter    = 25                                // CTA_FILTER
	ctaFOrig     = 1                                 // CTA_FILTER_ORIG_FLAGS
	ctaFProto    = 1 << 3                            // CTA_FILTER_F_CTA_PROTO_NUM
	nfnlVersion0 = 0                                 // NFNETLINK_V0
)

// protoFilter is the CTA_FILTER asking for flows of proto only.
func protoFilter(proto uint8) []byte {
	var a attrBuf
	t := a.nest(ctaTuple)
	p := a.nest(ctaProto)
	a.u8(ctaProtoNr, proto)
	a.end(p)
	a.end(t)
	f := a.nest(ctaFilter)
	a.u32(ctaFOrig, ctaFProto)
	a.end(f)
	return a.b
}

// nfgenmsg is struct nfgenmsg: family, version NFNETLINK_V0, resource id 0.
func nfgenmsg(v6 bool) []byte {
	if v6 {
		return []byte{unix.AF_INET6, nfnlVersion0, 0, 0}
	}
	return []byte{unix.AF_INET, nfnlVersion0, 0, 0}
}

// dumpWith runs one dump of the family with attrs in its request, handing
// each flow to fn as it is decoded.
func (t *ctTable) dumpWith(ctx context.Context, v6 bool, attrs []byte, fn func(conntrack.Flow)) error {
	return t.s.query(ctx, ctGetMsg, unix.NLM_F_DUMP, append(nfgenmsg(v6), attrs...), func(m netlink.Message) error {
		var ev conntrack.Event
		if err := ev.Unmarshal(netlink.Message{Header: netlink.Header{Type: ctNewMsg}, Data: m.Data}); err != nil {
			return fmt.Errorf("decode conntrack entry: %w", err)
		}
		fn(*ev.Flow)
		return nil
	})
}

// Delete deletes flows, batchWindow per send; a flow is named by both its
// tuples and its id, as the dump gave them, so that a connection made
// anew under the same tuple since is not the one deleted.
func (t *ctTable) Delete(ctx context.Context, flows []conntrack.Flow, errs []error) error {
	var a attrBuf
	reqs := make([]request, 0, batchWindow)
	for start := 0; start < len(flows); start += batchWindow {
		end := min(start+batchWindow, len(flows))
		a.b, reqs = a.b[:0], reqs[:0]
		for _, f := range flows[start:end] {
			at := len(a.b)
			a.b = append(a.b, nfgenmsg(f.TupleOrig.IP.IsIPv6())...)
			encodeTuple(&a, ctaTuple, f.TupleOrig)
			encodeTuple(&a, ctaReply, f.TupleReply)
			if f.ID != 0 {
				a.put(ctaID, binary.BigEndian.AppendUint32(nil, f.ID))
			}
			reqs = append(reqs, request{typ: ctDeleteMsg, data: a.b[at:]})
		}
		if err := t.s.exchange(ctx, reqs, errs[start:end]); err != nil {
			return err
		}
	}
	return nil
}

// encodeTuple puts one direction of a flow of a protocol with ports (the
// only ones a cleanup names: TCP, UDP, SCTP).
func encodeTuple(a *attrBuf, typ uint16, t conntrack.Tuple) {
	at := a.nest(typ)
	ip := a.nest(ctaTupleIP)
	src, dst := uint16(ctaIPv4Src), uint16(ctaIPv4Dst)
	if t.IP.IsIPv6() {
		src, dst = ctaIPv6Src, ctaIPv6Dst
	}
	a.put(src, t.IP.SourceAddress.AsSlice())
	a.put(dst, t.IP.DestinationAddress.AsSlice())
	a.end(ip)
	p := a.nest(ctaProto)
	a.u8(ctaProtoNr, t.Proto.Protocol)
	a.be16(ctaProtoSrc, t.Proto.SourcePort)
	a.be16(ctaProtoDst, t.Proto.DestinationPort)
	a.end(p)
	if t.Zone != 0 {
		a.be16(ctaZone, t.Zone)
	}
	a.end(at)
}
