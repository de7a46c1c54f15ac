//go:build linux

package linux

import (
	"context"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// AddUnchecked adds e as AddSetEntry does but without refusing what the
// kernel cannot hold, so a test can show that the read-back catches it.
func (s *Shim) AddUnchecked(ctx context.Context, e model.SetEntry) error {
	if err := s.change(ctx, true, e); err != nil {
		return err
	}
	return s.checkHeld(ctx, e)
}

// BindBatch binds addrs (host addresses) to the link with index ifindex as
// Apply does, a window per send on one socket, and returns each one's
// error: the batch path on a kernel without IPVS or dummy links.
func BindBatch(ifindex int32, addrs []netip.Addr) ([]error, error) {
	s, err := openSocket(netlinkRoute)
	if err != nil {
		return nil, err
	}
	defer s.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, len(addrs))
	for start := 0; start < len(addrs); start += batchWindow {
		end := min(start+batchWindow, len(addrs))
		var enc addrEncoder
		reqs := make([]request, 0, end-start)
		for _, a := range addrs[start:end] {
			reqs = append(reqs, enc.change(ifindex, true, a))
		}
		if err := s.exchange(ctx, reqs, errs[start:end]); err != nil {
			return nil, err
		}
	}
	return errs, nil
}

// IPSetNames is ipsetNames: the kernel's set names, without members.
var IPSetNames = ipsetNames

// RuleReads counts the rulesets ShimInPlace read with iptables-save.
func (s *Shim) RuleReads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ruleReads
}

// Watcher is a Dataplane that can only Watch and read the addresses of
// link: the announcements on a kernel without IPVS.
func Watcher(link string) *Dataplane {
	return &Dataplane{log: zap.NewNop(), linkName: link, timeout: 30 * time.Second,
		calls: newCalls(zap.NewNop(), 30*time.Second, openHandles)}
}
