package fake

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// ConntrackKey names the conntrack entries FlushConntrack deletes.
type ConntrackKey struct {
	Proto model.Protocol
	Real  netip.AddrPort
}

// ConntrackFlow is a conntrack entry as far as a cleanup can tell it from
// another: its protocol, its original destination and the source of its
// replies (the real server IPVS NATed it to, or the destination itself when
// nothing did).
type ConntrackFlow struct {
	Proto model.Protocol
	Dst   netip.AddrPort
	Reply netip.AddrPort
}

func (c ConntrackFlow) v6() bool {
	if c.Dst.IsValid() {
		return c.Dst.Addr().Unmap().Is6()
	}
	return c.Reply.Addr().Unmap().Is6()
}

// String prints the flow as the fake's dump lists it.
func (c ConntrackFlow) String() string {
	dst := "*"
	if c.Dst.IsValid() {
		dst = c.Dst.String()
	}
	return fmt.Sprintf("%s dst %s reply %s", strings.ToLower(c.Proto.String()), dst, c.Reply)
}

// dumpTable counts one read of the family's whole table, as the kernel
// implementation makes for each flush.
func (f *Fake) dumpTable(v6 bool) {
	if v6 {
		f.ctDumps[1]++
	} else {
		f.ctDumps[0]++
	}
}

// deleteFlows deletes the live entries that match and counts them.
func (f *Fake) deleteFlows(match func(ConntrackFlow) bool) int {
	n := 0
	for fl, c := range f.flows {
		if match(fl) {
			n += c
			delete(f.flows, fl)
		}
	}
	return n
}

// FlushConntrack deletes the entries of proto whose replies come from real,
// reading the family's table once, and records the call.
func (f *Fake) FlushConntrack(ctx context.Context, proto model.Protocol, real netip.AddrPort) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := ConntrackKey{Proto: proto, Real: real}
	if err := f.begin(ctx, "FlushConntrack", k); err != nil {
		return 0, err
	}
	f.flushes = append(f.flushes, k)
	f.dumpTable(real.Addr().Unmap().Is6())
	return f.deleteFlows(func(c ConntrackFlow) bool { return c.Proto == proto && c.Reply == real }), nil
}

// FlushConntrackDest deletes the entries of proto first sent to dst,
// reading the family's table once, and records the call.
func (f *Fake) FlushConntrackDest(ctx context.Context, proto model.Protocol, dst netip.AddrPort) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := ConntrackKey{Proto: proto, Real: dst}
	if err := f.begin(ctx, "FlushConntrackDest", k); err != nil {
		return 0, err
	}
	f.flushesDest = append(f.flushesDest, k)
	f.dumpTable(dst.Addr().Unmap().Is6())
	return f.deleteFlows(func(c ConntrackFlow) bool { return c.Proto == proto && c.Dst == dst }), nil
}

// conntrackDump lists the live entries, sorted, one line per flow with its
// count. The caller holds f.mu.
func (f *Fake) conntrackDump() string {
	lines := make([]string, 0, len(f.flows))
	for fl, n := range f.flows {
		lines = append(lines, fmt.Sprintf("%s x%d\n", fl, n))
	}
	slices.Sort(lines)
	return strings.Join(lines, "")
}
