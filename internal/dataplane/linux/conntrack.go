//go:build linux

package linux

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"github.com/vishvananda/netlink/nl"
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
		n, err := call(ctx, d.calls, "clear conntrack", func(h *handles) (int, error) {
			if h.ct == nil {
				c, err := h.dialCT()
				if err != nil {
					return 0, err
				}
				h.ct = c
			}
			return clearFlows(h.ct, v6, fam)
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
// tests).
type flowTable interface {
	// Dump hands fn every flow of the family, of proto as far as the kernel
	// can filter by it (fn still checks). An error after some flows were
	// handed over means the dump is incomplete.
	Dump(v6 bool, proto uint8, fn func(conntrack.Flow)) error
	Delete(f conntrack.Flow) error
	Close() error
}

// clearFlows dumps the family's flows once, keeping only those s names,
// and then deletes them. The deletes wait for the dump's end: the dump's
// socket cannot carry them, and the kernel's walk of its table is not
// disturbed. It returns how many went; a dump cut short is an error (the
// caller retries), after the flows it did read are deleted.
func clearFlows(ct flowTable, v6 bool, s dataplane.StaleFlows) (int, error) {
	var stale []conntrack.Flow
	dumpErr := ct.Dump(v6, uint8(s.Proto), func(f conntrack.Flow) {
		if s.Matches(model.Protocol(f.TupleOrig.Proto.Protocol), origDst(f), replySrc(f)) {
			stale = append(stale, f)
		}
	})
	if dumpErr != nil {
		dumpErr = fmt.Errorf("dump conntrack: %w", dumpErr)
	}
	n := 0
	errs := []error{dumpErr}
	for _, f := range stale {
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

// origDst is where a flow was first sent.
func origDst(f conntrack.Flow) netip.AddrPort {
	return netip.AddrPortFrom(f.TupleOrig.IP.DestinationAddress, f.TupleOrig.Proto.DestinationPort)
}

// replySrc is where a flow's replies come from: the real server IPVS NATed
// it to, or its destination when nothing did.
func replySrc(f conntrack.Flow) netip.AddrPort {
	return netip.AddrPortFrom(f.TupleReply.IP.SourceAddress, f.TupleReply.Proto.SourcePort)
}

// ctTable dumps over a socket of its own, streaming (a table of a million
// entries is never held whole), and deletes over ti-mo/conntrack's.
type ctTable struct {
	// dump numbers its requests, so that a reply to an earlier one is never
	// taken for this one's.
	dump *nl.SocketHandle
	conn *conntrack.Conn
	// noFilter: the kernel refused the dump filter; dump unfiltered.
	noFilter bool
}

// dialConntrack opens the conntrack sockets in the agent's network
// namespace.
func dialConntrack() (flowTable, error) { return openFlowTable(netns.None(), time.Minute) }

// openFlowTable opens the conntrack sockets in ns (netns.None(): the
// current one). timeout bounds each receive, so a dump whose call was
// abandoned ends even if its socket's close does not wake it.
func openFlowTable(ns netns.NsHandle, timeout time.Duration) (*ctTable, error) {
	s, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("open conntrack netlink socket: %w", err)
	}
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	if err := s.SetReceiveTimeout(&tv); err != nil {
		s.Close()
		return nil, fmt.Errorf("set conntrack socket timeout: %w", err)
	}
	var cfg *netlink.Config
	if ns.IsOpen() {
		cfg = &netlink.Config{NetNS: int(ns)}
	}
	c, err := conntrack.Dial(cfg)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open conntrack netlink socket: %w", err)
	}
	return &ctTable{dump: &nl.SocketHandle{Socket: s}, conn: c}, nil
}

func (t *ctTable) Delete(f conntrack.Flow) error { return t.conn.Delete(f) }

func (t *ctTable) Close() error {
	t.dump.Socket.Close()
	return t.conn.Close()
}

// Dump dumps the family's table, filtered by the kernel to proto where it
// can (CTA_FILTER, Linux 5.8). The filter holds one tuple per direction, so
// the keys of a cleanup (many real servers, many frontends) cannot go in
// it: the protocol is what they share. A kernel that rejects the filter
// is asked again without it, and not asked with it again; an older kernel
// ignores the attribute and dumps everything, which the match sorts out.
func (t *ctTable) Dump(v6 bool, proto uint8, fn func(conntrack.Flow)) error {
	if !t.noFilter {
		err := t.dumpWith(v6, protoFilter(proto), fn)
		if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EOPNOTSUPP) {
			return err
		}
		t.noFilter = true
	}
	return t.dumpWith(v6, nil, fn)
}

// conntrack netlink message types and attributes (linux/netfilter/
// nfnetlink_conntrack.h).
const (
	ctNewMsg   = unix.NFNL_SUBSYS_CTNETLINK<<8 | 0 // IPCTNL_MSG_CT_NEW: what a dump answers with
	ctGetMsg   = unix.NFNL_SUBSYS_CTNETLINK<<8 | 1 // IPCTNL_MSG_CT_GET
	ctaTuple   = 1                                 // CTA_TUPLE_ORIG
	ctaProto   = 2                                 // CTA_TUPLE_PROTO
	ctaProtoNr = 1                                 // CTA_PROTO_NUM
	ctaFilter  = 25                                // CTA_FILTER
	ctaFOrig   = 1                                 // CTA_FILTER_ORIG_FLAGS
	ctaFProto  = 1 << 3                            // CTA_FILTER_F_CTA_PROTO_NUM
)

// protoFilter is the CTA_FILTER asking for flows of proto only.
func protoFilter(proto uint8) []byte {
	ae := netlink.NewAttributeEncoder()
	ae.Nested(ctaTuple, func(t *netlink.AttributeEncoder) error {
		t.Nested(ctaProto, func(p *netlink.AttributeEncoder) error {
			p.Uint8(ctaProtoNr, proto)
			return nil
		})
		return nil
	})
	ae.Nested(ctaFilter, func(f *netlink.AttributeEncoder) error {
		f.Uint32(ctaFOrig, ctaFProto)
		return nil
	})
	b, err := ae.Encode()
	if err != nil { // only on an attribute too large, which these are not
		return nil
	}
	return b
}

// dumpWith runs one dump of the family with attrs in its request, handing
// each flow to fn as it is decoded.
func (t *ctTable) dumpWith(v6 bool, attrs []byte, fn func(conntrack.Flow)) error {
	family := uint8(unix.AF_INET)
	if v6 {
		family = unix.AF_INET6
	}
	req := nl.NewNetlinkRequest(ctGetMsg, unix.NLM_F_DUMP)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_NETFILTER: t.dump}
	// nfgenmsg: family, version NFNETLINK_V0, resource id 0.
	req.AddRawData(append([]byte{family, 0, 0, 0}, attrs...))
	var bad error
	err := req.ExecuteIter(unix.NETLINK_NETFILTER, ctNewMsg, func(msg []byte) bool {
		var ev conntrack.Event
		if err := ev.Unmarshal(netlink.Message{Header: netlink.Header{Type: ctNewMsg}, Data: msg}); err != nil {
			bad = fmt.Errorf("decode conntrack entry: %w", err)
			return false // the rest is drained unread
		}
		fn(*ev.Flow)
		return true
	})
	return errors.Join(err, bad)
}
