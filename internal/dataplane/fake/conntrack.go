package fake

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// ConntrackFlow is a conntrack entry as far as a cleanup can tell it from
// another: its protocol, its original destination and the source of its
// replies (the real server IPVS NATed it to, or the destination itself when
// nothing did).
type ConntrackFlow struct {
	Proto model.Protocol
	Dst   netip.AddrPort
	Reply netip.AddrPort
}

// String prints the flow as the fake's dump lists it.
func (c ConntrackFlow) String() string {
	dst := "*"
	if c.Dst.IsValid() {
		dst = c.Dst.String()
	}
	return fmt.Sprintf("%s dst %s reply %s", strings.ToLower(c.Proto.String()), dst, c.Reply)
}

// ClearConntrack deletes the live entries s names, reading the table of
// each family s has keys of once, as the kernel implementation does.
func (f *Fake) ClearConntrack(ctx context.Context, s dataplane.StaleFlows) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "ClearConntrack", s); err != nil {
		return 0, err
	}
	for i, v6 := range []bool{false, true} {
		if s.Has(v6) {
			f.ctDumps[i]++
		}
	}
	n := 0
	for fl, c := range f.flows {
		if s.Matches(fl.Proto, fl.Dst, fl.Reply) {
			n += c
			delete(f.flows, fl)
		}
	}
	return n, nil
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
