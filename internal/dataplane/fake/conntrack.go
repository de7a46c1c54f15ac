package fake

import (
	"context"
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// ConntrackKey names the conntrack entries FlushConntrack deletes.
type ConntrackKey struct {
	Proto model.Protocol
	Real  netip.AddrPort
}

// FlushConntrack deletes the entries SetConntrack planted for (proto, real)
// and records the call.
func (f *Fake) FlushConntrack(ctx context.Context, proto model.Protocol, real netip.AddrPort) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := ConntrackKey{Proto: proto, Real: real}
	if err := f.begin(ctx, "FlushConntrack", k); err != nil {
		return 0, err
	}
	f.flushes = append(f.flushes, k)
	n := f.conntrack[k]
	delete(f.conntrack, k)
	return n, nil
}

// FlushConntrackDest deletes the entries SetConntrackDest planted.
func (f *Fake) FlushConntrackDest(ctx context.Context, proto model.Protocol, dst netip.AddrPort) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := ConntrackKey{Proto: proto, Real: dst}
	if err := f.begin(ctx, "FlushConntrackDest", k); err != nil {
		return 0, err
	}
	f.flushesDest = append(f.flushesDest, k)
	n := f.conntrackDest[k]
	delete(f.conntrackDest, k)
	return n, nil
}
