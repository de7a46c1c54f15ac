//go:build linux

package linux

import (
	"context"
	"net/netip"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// AddUnchecked adds e as AddSetEntry does but without refusing what the
// kernel cannot hold, so a test can show that the read-back catches it.
func (s *Shim) AddUnchecked(ctx context.Context, e model.SetEntry) error {
	if err := s.change(ctx, "add", e, ipsetHandle.add, dataplane.ErrExist); err != nil {
		return err
	}
	return s.checkHeld(ctx, e)
}

// BindBatch binds addrs (host addresses) to the link with index ifindex as
// Apply does, a window per send on one socket, and returns each one's
// error: the batch path on a kernel without IPVS or dummy links.
func BindBatch(ifindex int32, addrs []netip.Addr) ([]error, error) {
	s, err := openBatchSocket(netlinkRoute, 30*time.Second)
	if err != nil {
		return nil, err
	}
	defer s.close()
	errs := make([]error, len(addrs))
	for start := 0; start < len(addrs); start += batchWindow {
		end := min(start+batchWindow, len(addrs))
		var enc addrEncoder
		reqs := make([]request, 0, end-start)
		for _, a := range addrs[start:end] {
			reqs = append(reqs, enc.change(ifindex, true, a))
		}
		if err := s.exchange(reqs, errs[start:end]); err != nil {
			return nil, err
		}
	}
	return errs, nil
}

// ObserveOverNetlink runs fn with the kernel's listing of the table out of
// reach, so that Observe reads every service's destinations over netlink:
// what the listing gives is compared with what netlink gives.
func ObserveOverNetlink(fn func()) {
	saved := procIPVSPath
	procIPVSPath = "/nonexistent/ip_vs"
	defer func() { procIPVSPath = saved }()
	fn()
}

// ListingShows tells whether the kernel's listing, read now, gives k's
// destinations (so Observe does not ask netlink for them).
func ListingShows(k model.VSKey) bool {
	_, ok := readProcIPVS().reals(k)
	return ok
}

// IPSetNames is ipsetNames: the kernel's set names, without members.
var IPSetNames = ipsetNames

// RuleReads counts the rulesets ShimInPlace read with iptables-save.
func (s *Shim) RuleReads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ruleReads
}
