package rescan

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/logv"
	"github.com/kube-ipvs/kube-ipvs/internal/observed"
)

// Checker reads the whole kernel once per Period, beside the syncs: every
// virtual server with its real servers, the link's addresses, the set
// members, and whether the netfilter rules are in place. So anything
// changed by someone else is read within one Period and two reads' time
// (the read under way may have missed it), and repaired by the sync that
// follows (the sync loop's minimum interval later at most), or one Period
// and a read later if the agent itself changed the same thing while the
// kernel was being read.
type Checker struct {
	Mailbox *Mailbox
	Reader  dataplane.Reader // its own sockets: never the sync's
	Period  time.Duration
	Log     *zap.Logger

	// lastVS and lastMembers size the next scan as the last found the
	// kernel.
	lastVS, lastMembers int
	// spent is how long the last check spent reading, its whole read
	// after a scan included.
	spent time.Duration
}

// readShare bounds the time the checker spends reading: after a read that
// took t it waits at least readShare × t, so that at most about 1/readShare
// of a CPU goes to finding drift however large the table, and drift is
// still repaired within 101 reads' time, well inside the hour kube-proxy's
// nftables mode takes to rewrite what someone else changed (its full
// sync). A read under slowRead costs little however often it comes (a
// small table, or the rules check's iptables-save on a slow machine): it
// waits fastReadShare × t, so that a short --ipvs-sync-period still
// repairs within seconds. A table that reads in under Period/readShare
// keeps the Period.
const (
	readShare     = 100
	fastReadShare = 20
	slowRead      = time.Second
)

// Run reads the kernel every Period until ctx ends, the first time as soon
// as the first sync has ended: that read finds at once anything that
// fought the start (another tool still programming the table during a
// migration), and learns what a read of this kernel costs before the agent
// is at rest, so that the budget spaces the reads after it. A read starts
// Period after the one before it was folded, or readShare times the last
// read's time if that is longer (reading and checking the rules only: not
// the wait for the sync loop to fold it, which is the minimum sync
// interval's, not the kernel's), so that reads never pile up and a kernel
// slow to read costs a bounded share of a CPU.
func (c *Checker) Run(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-c.Mailbox.synced:
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		c.Check(ctx)
		took := c.spent
		next := c.pause(took)
		if next > c.Period {
			c.log().Info("rescan: the next read waits longer than the sync period, the kernel being slow to read",
				zap.Duration("took", took), zap.Duration("period", c.Period), zap.Duration("next", next))
		}
		timer.Reset(next)
	}
}

// pause is how long the checker waits after a read that took took.
func (c *Checker) pause(took time.Duration) time.Duration {
	if took < slowRead {
		return max(c.Period, fastReadShare*took)
	}
	return max(c.Period, readShare*took)
}

// Check reads the kernel, hands the read to the sync loop and waits until
// it is folded. It scans first: when the kernel agrees with the cache (the
// common case by far) that is all, and nothing of it was copied. When the
// fold found the scan's digests differ, it reads the kernel whole at once
// and hands that, which the fold compares entry by entry. It returns the
// last read, nil if one failed (a doubtful read is dropped: it never
// drives a repair, let alone a prune).
func (c *Checker) Check(ctx context.Context) *Read {
	c.spent = 0
	rd := c.readOnce(ctx, c.Scan)
	if rd == nil || ctx.Err() != nil || !rd.WantWhole {
		return rd // (ended before the fold: WantWhole is not to be read)
	}
	c.log().Info("rescan: the kernel differs from what the agent holds; reading it whole to repair it")
	return c.readOnce(ctx, c.Whole)
}

// readOnce makes one read with take, checks the rules, hands the read to
// the sync loop and waits until it is folded.
func (c *Checker) readOnce(ctx context.Context, take func(context.Context, observed.Revision) (*Read, error)) *Read {
	m := c.Mailbox
	cfg, since := m.Begin()
	began := time.Now()
	rd, err := take(ctx, since)
	read := time.Since(began)
	if err == nil && cfg != nil {
		var ok bool
		ok, err = c.Reader.ShimInPlace(ctx, *cfg)
		rd.RulesMissing = !ok
	}
	c.spent += time.Since(began)
	c.log().Log(logv.V(logv.Sync), "rescan read the kernel", zap.Bool("whole", err == nil && !isScan(rd)),
		zap.Duration("table", read), zap.Duration("rules", time.Since(began)-read))
	if err != nil {
		m.Abort()
		if ctx.Err() == nil {
			c.log().Warn("rescan: read the kernel", zap.Error(err))
		}
		return nil
	}
	m.Hand(rd)
	select {
	case <-rd.done:
	case <-ctx.Done():
	}
	return rd
}

func isScan(rd *Read) bool {
	if rd == nil {
		return false
	}
	scan, _, _ := rd.Scanned()
	return scan
}

// Whole reads the kernel whole, a read begun at since.
func (c *Checker) Whole(ctx context.Context, since observed.Revision) (*Read, error) {
	obs, err := c.Reader.Observe(ctx)
	if err != nil {
		return nil, err
	}
	return NewRead(observed.WholeRead(since, obs)), nil
}

// Scan reads the kernel into digests, keeping only what the fold needs to
// take the cache's later writes out of them, and the link's addresses.
func (c *Checker) Scan(ctx context.Context, since observed.Revision) (*Read, error) {
	s := observed.NewScan(since, c.lastVS, c.lastMembers)
	if err := c.Reader.Scan(ctx, s.Visitor()); err != nil {
		return nil, err
	}
	rd := s.Read()
	_, c.lastVS, c.lastMembers = rd.Scanned()
	return NewRead(rd), nil
}

func (c *Checker) log() *zap.Logger {
	if c.Log == nil {
		return zap.NewNop()
	}
	return c.Log
}
