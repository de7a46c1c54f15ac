// Package runner drives syncs: it coalesces bursts of changes so that syncs
// begin at least MinInterval apart, asks for an early incremental sync when
// the last one wants it (draining real servers), and retries failures with
// exponential backoff, as full syncs. Only the first sync and the retry
// after a failure read the kernel whole: drift made by anyone else is found
// by the rescan beside the syncs, which cues an incremental sync.
package runner

import (
	"context"
	"time"
)

// SyncFunc runs one sync. full asks for a fresh read of the kernel. A
// non-zero requeue asks for another sync that soon.
type SyncFunc func(ctx context.Context, full bool) (requeue time.Duration, err error)

// Runner is the coalescing sync loop.
type Runner struct {
	Sync SyncFunc
	// Trigger asks for an incremental sync: something changed, or a rescan
	// has read the kernel for the sync to fold in (coalesced by the sender).
	Trigger <-chan struct{}
	// MinInterval spaces the syncs' beginnings, as kube-proxy's
	// --ipvs-min-sync-period spaces its syncs (a rate, its tokens earned
	// while a sync runs): a sync that took longer is followed at once by
	// the next when something is pending, so a backlog of changes is not
	// left waiting an interval after every sync.
	MinInterval time.Duration
	// Backoff is the first retry delay after a failure, doubled per failure
	// up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
	// OnError is told about each failed sync (for logging); may be nil.
	OnError func(err error, retryIn time.Duration)
}

// loop is the runner's schedule between syncs.
type loop struct {
	dirty, full bool
	due         time.Time // a pending sync runs not before this
	retryAt     time.Time // after a failure, nothing runs before this
	began       time.Time // when the last sync began
	failures    int
}

// Run syncs once at start (full), then whenever triggered, until ctx ends.
func (r *Runner) Run(ctx context.Context) error {
	now := time.Now()
	l := loop{dirty: true, full: true, due: now}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.Trigger:
			l.dirty = true
			l.due = later(l.began.Add(r.MinInterval), l.retryAt)
		case <-timer.C:
		}
		if l.dirty && !time.Now().Before(l.due) {
			l.began = time.Now()
			requeue, err := r.Sync(ctx, l.full)
			r.after(&l, requeue, err)
		}
		if !l.dirty {
			timer.Stop() // nothing to do until triggered
			continue
		}
		// Since Go 1.23 Reset discards a pending expiry: no drain needed.
		timer.Reset(max(time.Until(l.due), 0))
	}
}

// after updates the schedule with a sync's outcome.
func (r *Runner) after(l *loop, requeue time.Duration, err error) {
	ended := time.Now()
	if err != nil {
		delay := r.backoff(l.failures)
		l.failures++
		l.retryAt = ended.Add(delay)
		l.dirty, l.full, l.due = true, true, l.retryAt
		if r.OnError != nil {
			r.OnError(err, delay)
		}
		return
	}
	l.failures, l.retryAt = 0, time.Time{}
	l.dirty, l.full = requeue > 0, false
	l.due = later(l.began.Add(r.MinInterval), ended.Add(requeue))
}

// backoff is the delay after the n+1st consecutive failure.
func (r *Runner) backoff(n int) time.Duration {
	b := r.Backoff
	if b <= 0 {
		b = time.Second
	}
	ceiling := max(r.MaxBackoff, b)
	for ; n > 0 && b < ceiling; n-- {
		b *= 2
	}
	return min(b, ceiling)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
