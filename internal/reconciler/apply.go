package reconciler

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/logv"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
)

// apply runs the operations in order, recording each success in the
// observed cache. A failed operation does not stop the others (one
// Service's kernel error must not cost the rest theirs); what failed is
// returned in an outcome, whose err() says whether the sync as a whole
// failed. Cancellation stops it between batches: a SIGTERM during a sync
// of thousands of operations must not try them all. What one operation's
// failure holds back is data of the plan (plan.Needs, plan.Withheld): see
// hold.go.
//
// Operations go to the kernel in batches (dataplane.Batch): runs of one
// kind (and, for set members, one set), up to maxBatch, so that a cold
// start costs a few thousand round trips, not hundreds of thousands.
// What one operation's failure holds back is always of another kind or
// set, so it is decided once the batch it depends on is back: a batch is
// sent before the next operation is looked at.
//
// The passes are made and applied one after another, by one applier (what
// a failure holds back holds in the later passes too); each pass is let go
// of once applied. It returns the outcome. What the applied operations
// removed is left for the conntrack cleanup (noteStale).
func (r *Reconciler) apply(ctx context.Context, passes []plan.Pass, now time.Time) outcome {
	d := r.desired.state
	r.obs.Reserve(len(d.Services), len(d.Addrs), len(d.Sets))
	a := newApplier(r, now)
	for i, pass := range passes {
		start := time.Now() // the log's, not a measurement's (opt.Now is the metrics' clock)
		ops := pass()
		a.out.planned += len(ops)
		n := a.applyPass(ctx, ops)
		if len(passes) > 1 { // a cold start: minutes at scale, shown as it goes
			r.log.Info("applied a pass of the first sync", zap.Int("pass", i+1), zap.Int("of", len(passes)),
				zap.Int("ops", len(ops)), zap.Duration("took", time.Since(start)))
		}
		if n > 0 {
			// Stopped: the later passes are made only to be counted.
			for _, rest := range passes[i+1:] {
				m := len(rest())
				n, a.out.planned = n+m, a.out.planned+m
			}
			a.out.stopped(n, a.out.planned, context.Cause(ctx))
			break
		}
	}
	r.noteStale(a.out.removed)
	a.out.removed = nil
	return a.out
}

// applyPass applies one pass in batches. It returns how many of its
// operations were not tried because ctx ended (0: all were).
func (a *applier) applyPass(ctx context.Context, ops []model.Op) int {
	batch := make([]model.Op, 0, min(len(ops), maxBatch))
	for i := 0; i <= len(ops); i++ {
		if len(batch) > 0 && (i == len(ops) || !sameBatch(batch[0], ops[i]) || len(batch) == maxBatch) {
			if n := a.send(ctx, batch); n > 0 {
				return n + len(ops) - i
			}
			batch = batch[:0]
		}
		if i == len(ops) {
			break
		}
		if ctx.Err() != nil {
			return len(ops) - i
		}
		if !a.held(ctx, ops[i]) {
			batch = append(batch, ops[i])
		}
	}
	return 0
}

// maxBatch bounds the operations of one Apply: the linux dataplane sends
// them a window at a time anyway; this bounds what one call holds.
const maxBatch = 1024

// sameBatch tells whether b may go in the batch that a opened: one kind,
// and for set members one set.
func sameBatch(a, b model.Op) bool {
	return a.Kind == b.Kind && (a.Target() != model.TargetMember || a.Entry.Set() == b.Entry.Set())
}

// applier is one apply's bookkeeping: its outcome, what its failures
// withhold from the operations after them, and the cache entries it may
// change in place.
type applier struct {
	r   *Reconciler
	out outcome
	// withheld are the outcomes that failed (or were held back) in this
	// apply, which the operations that need them wait on (see held).
	withheld map[plan.Dep]bool
	// now is the sync's time, against which retries are due.
	now time.Time
	// applied are the operations applied and not yet folded into the
	// observed cache (fold).
	applied []model.Op
}

func newApplier(r *Reconciler, now time.Time) *applier {
	return &applier{r: r, withheld: map[plan.Dep]bool{}, now: now}
}

// send applies a batch and records each operation's result. It returns how
// many were not tried because ctx ended (then apply stops).
func (a *applier) send(ctx context.Context, batch []model.Op) int {
	errs := a.r.opt.Dataplane.Apply(ctx, batch)
	notTried, failed := 0, 0
	for i, op := range batch {
		switch {
		case errors.Is(errs[i], dataplane.ErrNotTried):
			notTried++
			continue
		case errs[i] != nil:
			failed++
		}
		a.record(ctx, op, errs[i])
	}
	a.fold()
	a.r.metrics.m.Ops(batch[0].Kind.String(), len(batch)-notTried-failed, failed)
	return notTried
}

// fold folds the operations applied since the last fold into the observed
// cache, at once (observed.Cache.ApplyAll): a batch's real servers of one
// virtual server change its list in one pass.
func (a *applier) fold() {
	if len(a.applied) == 0 {
		return
	}
	a.r.obs.ApplyAll(a.applied, a.r.desired.state.Services)
	a.applied = a.applied[:0]
}

// record notes one applied operation in the observed cache, and what its
// failure holds back.
func (a *applier) record(ctx context.Context, op model.Op, e error) {
	r := a.r
	a.out.attempted++
	if e != nil {
		a.fold() // what failed is handled on a cache holding what came before
		name, owned := r.serviceOf(op)
		a.out.fail(op, e, name, owned)
		r.log.Log(logv.V(logv.Problem), "operation failed", zap.String("op", op.Command(r.opt.LocalRoutes)), zap.Error(e))
		r.obs.Tried(op)
		a.failed(ctx, op, e)
		return
	}
	if ce := r.log.Check(logv.V(logv.Sync), "applied"); ce != nil {
		ce.Write(zap.String("op", op.Command(r.opt.LocalRoutes)))
	}
	if op.Kind == model.AddService {
		r.made[op.VS.Key] = struct{}{}
	}
	if op.Kind == model.DeleteService {
		delete(r.made, op.VS.Key)
		a.fold() // its real servers are noted from the cache
	}
	a.out.removed.note(op, r.obs)
	a.applied = append(a.applied, op)
}

// applyOp sends one operation to the dataplane.
func applyOp(ctx context.Context, dp dataplane.Batch, op model.Op) error {
	return dp.Apply(ctx, []model.Op{op})[0]
}
