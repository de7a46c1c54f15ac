package reconciler

import (
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/rescan"
)

// foldRescan takes the rescan's finished read, if any, and folds it into
// the observed cache (observed.Cache.Fold): what differs from the cache on
// what no sync wrote since the read began joins scope, so that this sync
// repairs what someone else changed. It returns the read (nil if none;
// Sync calls its Done once applied) and how many things differed (the
// rules count as one).
func (r *Reconciler) foldRescan(scope plan.Scope) (*rescan.Read, int) {
	rd := r.rescans.Take()
	if rd == nil {
		return nil, 0
	}
	f := r.obs.Fold(rd.Read, scope)
	if f.Stale {
		rd.RulesMissing = false // the full sync since ensured them
		return rd, 0
	}
	rd.WantWhole = f.Whole
	drifted := f.Drifted
	if rd.RulesMissing {
		drifted++
	}
	return rd, drifted
}

// dropRescan drops a read waiting to be folded: a full sync reads
// everything afresh.
func (r *Reconciler) dropRescan() {
	if rd := r.rescans.Take(); rd != nil {
		r.obs.Drop()
		rd.Done()
	}
}

// closeFolded tells the rescan the read this sync folded is done.
func (r *Reconciler) closeFolded() {
	if r.folded != nil {
		r.folded.Done()
		r.folded = nil
	}
}

// Rescans is where a rescan.Checker hands its reads to this reconciler.
func (r *Reconciler) Rescans() *rescan.Mailbox { return r.rescans }

// RescanWake is the runner's cue that a rescan's read waits to be folded:
// it should sync (incrementally) soon.
func (r *Reconciler) RescanWake() <-chan struct{} { return r.rescans.Wake() }
