package rescan

import (
	"context"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/logv"
	"github.com/kube-ipvs/kube-ipvs/internal/observed"
)

// Checker reads the whole kernel once per Period, beside the syncs: every
// virtual server with its real servers, the link's addresses (unless Notify
// follows their announcements), the set members, and whether the netfilter
// rules are in place. So anything changed by someone else is read within
// one Period and two reads' time
// (the read under way may have missed it), and repaired by the sync that
// follows (the sync loop's minimum interval later at most), or one Period
// and a read later if the agent itself changed the same thing while the
// kernel was being read. With Notify set it also reads again, at once and
// alone, what the kernel announces changed (an address on the link, the
// shim's iptables-nft rules), so that those are repaired within a fraction
// of a second.
type Checker struct {
	Mailbox *Mailbox
	Reader  dataplane.Reader // its own sockets: never the sync's
	Period  time.Duration
	Log     *zap.Logger
	// Notify, when set, is followed for the kernel's announcements
	// (dataplane.Notifier): an address on the link or a rule changed by
	// anyone is read again at once, that part alone, and so repaired
	// within a fraction of a second rather than a Period. nil: the
	// Period's reads alone find drift.
	Notify dataplane.Notifier
	// CPU is the CPU the process has used so far (nil: processCPU): a
	// read costs the more of its time and the CPU spent during it beyond
	// the process's pace before it (see charge).
	CPU func() time.Duration

	// lastVS and lastMembers size the next scan as the last found the
	// kernel.
	lastVS, lastMembers int
	// spent is what the last check's scan cost (see readOnce and Check).
	spent time.Duration
	// paceFrom and paceCPU are when the last read ended (or Run began) and
	// the process's CPU then: the pace the process kept since is what it
	// spends besides a read (charge).
	paceFrom time.Time
	paceCPU  time.Duration
	// partSpent and partEnded are what the last read of announced parts
	// cost and when it ended.
	partSpent time.Duration
	partEnded time.Time
}

// readShare, repairWait and minReadShare space the reads. After a read
// that cost t (charge: its time, or the CPU the process spent during it
// beyond its pace before, if that is more) the checker waits readShare ×
// t, so that at most 1/(readShare+1) of a CPU goes to finding drift. Where
// that wait would outgrow repairWait, it waits repairWait instead, but
// never less than minReadShare × t: someone else's change is repaired
// within about five minutes for as long as a read costs under
// repairWait/minReadShare (16 s; 10,000 Services read in 2-3 s), at up to
// 1/(minReadShare+1) of a CPU, and a table too large for that (50,000
// Services read in about half a minute) is read at that share, within
// about minReadShare+3 reads' time (the scan, the whole read that repairs,
// the sync; under a quarter of an hour at 50,000). kube-proxy's IPVS mode
// reads and rewrites everything every 30 s, its nftables mode rewrites
// what someone else changed only at its hourly full sync.
// A read under slowRead costs little however often it comes (a small
// table, or the rules check's iptables-save on a slow machine): it waits
// fastReadShare × t, so that a short --ipvs-sync-period still repairs
// within seconds. A table that reads in under Period/readShare keeps the
// Period.
const (
	readShare     = 100
	repairWait    = 4 * time.Minute
	minReadShare  = 15
	fastReadShare = 20
	slowRead      = time.Second
)

// settle is how long the checker lets announcements gather before it reads
// what they name: a sync binds, unbinds and rewrites in bursts, each
// announced, and a burst is read once. partShare bounds what reading the
// announced parts costs while someone keeps changing them (another tool
// rewriting its own rules in the same tables, say): after a read of parts
// that took t, the next waits at least partShare × t.
const (
	settle    = 150 * time.Millisecond
	partShare = 10
)

// Run reads the kernel every Period until ctx ends, the first time as soon
// as the first sync has ended: that read finds at once anything that
// fought the start (another tool still programming the table during a
// migration), and learns what a read of this kernel costs before the agent
// is at rest, so that the budget spaces the reads after it. A read starts
// Period after the one before it was folded, or later as the last read's
// cost asks (pause; reading and checking the rules only: not
// the wait for the sync loop to fold it, which is the minimum sync
// interval's, not the kernel's), so that reads never pile up and a kernel
// slow to read costs a bounded share of a CPU.
//
// With Notify set, it reads again what the kernel announces changed (see
// CheckPart), settle after the announcement. The agent's own writes are
// announced as well: their read finds what the cache holds, and repairs
// nothing.
func (c *Checker) Run(ctx context.Context) {
	c.markPace()
	heard := newHeard()
	if c.Notify != nil {
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			c.Notify.Watch(ctx, heard.add)
		}()
		defer func() { <-watched }()
	}
	select {
	case <-ctx.Done():
		return
	case <-c.Mailbox.synced:
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	var settled <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-heard.cue:
			if settled == nil {
				settled = time.After(c.settleFor(time.Now()))
			}
			continue
		case <-settled:
			settled = nil
			if ev := heard.take(); ev != 0 {
				c.CheckPart(ctx, ev)
			}
			continue
		case <-timer.C:
		}
		// The read covers what was announced before it, but the VIPs when
		// it leaves them to the announcements: those stay cued.
		leave := c.followsAddrs()
		heard.forget(coveredBy(leave))
		c.check(ctx, leave)
		took := c.spent
		next := c.pause(took)
		if next > c.Period {
			c.log().Info("rescan: the next read waits longer than the sync period, the kernel being slow to read",
				zap.Duration("took", took), zap.Duration("period", c.Period), zap.Duration("next", next))
		}
		timer.Reset(next)
	}
}

// settleFor is how long announcements heard at now wait to be read: settle,
// or longer while the last read of announced parts is within partShare of
// its time.
func (c *Checker) settleFor(now time.Time) time.Duration {
	return max(settle, c.partEnded.Add(partShare*c.partSpent).Sub(now))
}

// pause is how long the checker waits after a read that took took.
func (c *Checker) pause(took time.Duration) time.Duration {
	if took < slowRead {
		return max(c.Period, fastReadShare*took)
	}
	return max(c.Period, min(readShare*took, max(repairWait, minReadShare*took)))
}

// Check reads the kernel, hands the read to the sync loop and waits until
// it is folded. It scans first: when the kernel agrees with the cache (the
// common case by far) that is all, and nothing of it was copied. When the
// fold found the scan's digests differ, it reads the kernel whole at once
// and hands that, which the fold compares entry by entry. It returns the
// last read, nil if one failed (a doubtful read is dropped: it never
// drives a repair, let alone a prune).
//
// The next check is spaced by the scan's cost alone: the whole read is the
// repair's, made only when someone else changed the kernel, and charging it
// would hold off the next repair by its cost many times over, though at
// rest it is never made. While someone keeps changing the kernel, reading
// costs then up to the whole read's share more.
func (c *Checker) Check(ctx context.Context) *Read {
	return c.check(ctx, c.followsAddrs())
}

// check is Check, its scan leaving the link's addresses out if
// leaveAddrs.
func (c *Checker) check(ctx context.Context, leaveAddrs bool) *Read {
	rd, spent := c.readOnce(ctx, c.scanner(leaveAddrs), true)
	c.spent = spent
	if rd == nil || ctx.Err() != nil || !rd.WantWhole {
		return rd // (ended before the fold: WantWhole is not to be read)
	}
	c.log().Info("rescan: the kernel differs from what the agent holds; reading it whole to repair it")
	rd, _ = c.readOnce(ctx, c.Whole, true)
	return rd
}

// CheckPart reads again only what the kernel announced changed (ev): the
// link's addresses (one dump, however large the table), whether the rules
// are in place, or both; hands the read to the sync loop and waits until
// it is folded. It returns the read, nil if it failed.
func (c *Checker) CheckPart(ctx context.Context, ev dataplane.Event) *Read {
	take := func(ctx context.Context, since observed.Revision) (*Read, error) {
		if ev&dataplane.AddrsChanged == 0 {
			return NewRead(observed.AddrsRead(since, nil)), nil
		}
		addrs, err := c.Notify.LinkAddrs(ctx)
		if err != nil {
			return nil, err
		}
		return NewRead(observed.AddrsRead(since, addrs)), nil
	}
	rd, spent := c.readOnce(ctx, take, ev&dataplane.RulesChanged != 0)
	c.partSpent, c.partEnded = spent, time.Now()
	return rd
}

// readOnce makes one read with take, checks the rules if asked, hands the
// read to the sync loop and waits until it is folded. It returns the read
// (nil if it failed) and what reading cost: its time, or the CPU the
// process spent meanwhile if that is more.
func (c *Checker) readOnce(ctx context.Context, take func(context.Context, observed.Revision) (*Read, error), rules bool) (*Read, time.Duration) {
	m := c.Mailbox
	cfg, since := m.Begin()
	began, cpuBegan := time.Now(), c.cpu()
	rd, err := take(ctx, since)
	read := time.Since(began)
	if err == nil && rules && cfg != nil {
		var ok bool
		ok, err = c.Reader.ShimInPlace(ctx, *cfg)
		rd.RulesMissing = !ok
	}
	took, cpu := time.Since(began), c.cpu()-cpuBegan
	spent := c.charge(began, cpuBegan, took, cpu)
	c.log().Log(logv.V(logv.Sync), "rescan read the kernel", zap.Bool("whole", err == nil && !isScan(rd) && !rd.Partial()),
		zap.Bool("partial", err == nil && rd.Partial()), zap.Bool("rules_missing", err == nil && rd.RulesMissing),
		zap.Duration("table", read), zap.Duration("rules", took-read), zap.Duration("cpu", cpu), zap.Duration("charged", spent))
	defer c.markPace()
	if err != nil {
		m.Abort()
		if ctx.Err() == nil {
			c.log().Warn("rescan: read the kernel", zap.Error(err))
		}
		return nil, spent
	}
	m.Hand(rd)
	select {
	case <-rd.done:
	case <-ctx.Done():
	}
	return rd, spent
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
	return c.scanner(false)(ctx, since)
}

// scanner is Scan, leaving the link's addresses out if leaveAddrs (to
// Notify's announcements: CheckPart reads those).
func (c *Checker) scanner(leaveAddrs bool) func(context.Context, observed.Revision) (*Read, error) {
	return func(ctx context.Context, since observed.Revision) (*Read, error) {
		s := observed.NewScan(since, c.lastVS, c.lastMembers)
		if leaveAddrs {
			s.WithoutAddrs()
		}
		if err := c.Reader.Scan(ctx, s.Visitor()); err != nil {
			return nil, err
		}
		rd := s.Read()
		_, c.lastVS, c.lastMembers = rd.Scanned()
		return NewRead(rd), nil
	}
}

// followsAddrs tells whether Notify follows every announcement of the
// link's addresses now, so that a scan may leave them out.
func (c *Checker) followsAddrs() bool { return c.Notify != nil && c.Notify.FollowsAddrs() }

// coveredBy is what a check's read covers of the announcements: the rules,
// and the addresses unless it leaves them out.
func coveredBy(leaveAddrs bool) dataplane.Event {
	if leaveAddrs {
		return dataplane.RulesChanged
	}
	return dataplane.RulesChanged | dataplane.AddrsChanged
}

// charge is what a read begun at began, when the process had used
// cpuBegan, cost: its time took, or the CPU the process spent during it
// (cpu) if that is more, less what the process spends anyway at the pace
// it kept from the last read (or the start) until this one. The kernel
// answers in the reader's thread and the runtime collects its garbage on
// others, so the process's CPU is the read's; but a read right after the
// start shares the CPU with the start's aftermath, and charging that to the
// read would hold off the next one by many times what it cost.
func (c *Checker) charge(began time.Time, cpuBegan, took, cpu time.Duration) time.Duration {
	var besides time.Duration
	if since := began.Sub(c.paceFrom); !c.paceFrom.IsZero() && since > 0 {
		besides = time.Duration(float64(cpuBegan-c.paceCPU) / float64(since) * float64(took))
	}
	return max(took, cpu-besides)
}

// markPace starts measuring the process's pace now.
func (c *Checker) markPace() { c.paceFrom, c.paceCPU = time.Now(), c.cpu() }

// cpu is the CPU the process has used so far.
func (c *Checker) cpu() time.Duration {
	if c.CPU == nil {
		return processCPU()
	}
	return c.CPU()
}

// processCPU is the CPU the process has used so far, user and system; 0
// when the kernel will not say.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (c *Checker) log() *zap.Logger {
	if c.Log == nil {
		return zap.NewNop()
	}
	return c.Log
}
