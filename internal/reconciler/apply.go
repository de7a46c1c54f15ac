package reconciler

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/logv"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// apply runs the operations in order, recording each success in the
// observed cache. A failed operation does not stop the others (one
// Service's kernel error must not cost the rest theirs); what failed is
// returned in an outcome, whose err() says whether the sync as a whole
// failed. Cancellation stops it between batches: a SIGTERM during a sync
// of thousands of operations must not try them all.
//
// Operations go to the kernel in batches (dataplane.Batch): runs of one
// kind (and, for set members, one set), up to maxBatch, so that a cold
// start costs a few thousand round trips, not hundreds of thousands
// (issue 12). What one operation's failure holds back (below) is always of
// another kind or set, so it is decided once the batch it depends on is
// back: a batch is sent before the next operation is looked at.
//
// Three failures hold back later operations. A VIP whose virtual server
// could not be created is not bound (a bound VIP always has its virtual
// server, or traffic to it is accepted locally and dropped), and the real
// servers and set members of that virtual server are not tried (the
// reals cannot exist without it; the members would mark and filter a
// frontend that is not there). A VIP whose virtual server could not be deleted stays bound
// (the binding is what makes the server ours, so the next sync can still
// remove it). A VIP that could not be unbound keeps its set members (its
// VIPs guard above all). A VIP whose source-range filter or VIPs member could not be
// put in place (a set full, say) is not bound either: it would go live
// unfiltered, or answer on every port a host socket listens on.
//
// A frontend whose ownership record could not be written gets no virtual
// server: made unrecorded, a crash could leave it owned by nobody. A
// virtual server someone else made between our read and our create is not
// claimed: its record is withdrawn and no member naming it is added.
//
// The passes are made and applied one after another, by one applier (what
// a failure holds back holds in the later passes too); each pass is let go
// of once applied. It returns the outcome.
//
// The operations of a failing Service, or of no Service, whose retry is
// not due at now are held back as if they had failed (backsOff), without
// being sent: a full sync keeps their backoff too.
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

// sameBatch tells whether b may go in the batch that a opened.
func sameBatch(a, b model.Op) bool {
	if a.Kind != b.Kind {
		return false
	}
	return (a.Kind != model.AddSetEntry && a.Kind != model.DeleteSetEntry) || a.Entry.Set() == b.Entry.Set()
}

// applier is one apply's bookkeeping of what failed and what that holds back.
type applier struct {
	r   *Reconciler
	out outcome
	// addresses whose bind/unbind must wait
	holdAddr map[netip.Addr]bool
	// frontends whose virtual server could not be deleted keep their set
	// members: they are what still marks the server as ours.
	kept map[netip.Addr]bool
	// virtual servers that could not be created, whose record could not be
	// written, or that turned out to be someone else's
	missing, unrecorded, taken map[model.VSKey]bool
	// now is the sync's time, against which retries are due.
	now time.Time
}

func newApplier(r *Reconciler, now time.Time) *applier {
	return &applier{r: r, holdAddr: map[netip.Addr]bool{}, kept: map[netip.Addr]bool{},
		missing: map[model.VSKey]bool{}, unrecorded: map[model.VSKey]bool{}, taken: map[model.VSKey]bool{},
		now: now}
}

// held tells whether an earlier failure holds op back (see apply). An
// unrecorded frontend's server and reals count as not made.
func (a *applier) held(ctx context.Context, op model.Op) bool {
	if a.r.backsOff(op, a.now) {
		a.failed(ctx, op, errBackingOff)
		return true
	}
	switch {
	case (op.Kind == model.BindAddr || op.Kind == model.UnbindAddr) && a.holdAddr[op.Addr]:
		return true
	case op.Kind == model.AddSetEntry && shim.KindOf(op.Entry) == shim.VIPs && a.holdAddr[op.Entry.Addr()]:
		// A VIPs member follows its address's bind: held with it.
		return true
	case (op.Kind == model.AddService || op.Kind == model.AddReal) && a.unrecorded[op.VS.Key]:
		// Not made, as if its create had failed: no VIP, no reals, no
		// members naming it.
		a.holdAddr[op.VS.Key.Addr] = true
		a.missing[op.VS.Key] = true
		return true
	case op.Kind == model.DeleteSetEntry && a.kept[op.Entry.Addr()]:
		return true
	case (op.Kind == model.AddReal || op.Kind == model.UpdateReal) && a.missing[op.VS.Key]:
		return true
	}
	if k, ok := plan.FrontendOf(op.Entry); op.Kind == model.AddSetEntry && ok && (a.missing[k] || a.taken[k]) {
		return true
	}
	return false
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
	a.r.metrics.m.Ops(batch[0].Kind.String(), len(batch)-notTried-failed, failed)
	return notTried
}

// record notes one applied operation in the observed cache, and what its
// failure holds back.
func (a *applier) record(ctx context.Context, op model.Op, e error) {
	r := a.r
	a.out.attempted++
	if e != nil {
		name, owned := r.serviceOf(op)
		a.out.fail(op, e, name, owned)
		r.log.Log(logv.V(logv.Problem), "operation failed", zap.Stringer("op", op), zap.Error(e))
		r.obs.Tried(op)
		a.failed(ctx, op, e)
		return
	}
	if ce := r.log.Check(logv.V(logv.Sync), "applied"); ce != nil {
		ce.Write(zap.Stringer("op", op))
	}
	switch op.Kind {
	case model.AddService:
		r.made[op.VS.Key] = struct{}{}
	case model.DeleteService:
		delete(r.made, op.VS.Key)
	}
	r.noteStale(op)
	r.obs.Apply(op, r.desired.state.Services[op.VS.Key])
}

// failed notes what a failed operation holds back.
func (a *applier) failed(ctx context.Context, op model.Op, e error) {
	if op.Kind == model.AddService || op.Kind == model.DeleteService {
		a.holdAddr[op.VS.Key.Addr] = true
	}
	if op.Kind == model.AddService {
		a.missing[op.VS.Key] = true
	}
	if op.Kind == model.DeleteService {
		a.kept[op.VS.Key.Addr] = true
	}
	if op.Kind == model.UnbindAddr {
		// Still bound: its members stay, the VIPs one above all, or the
		// address would answer on every port a host socket listens on.
		a.kept[op.Addr] = true
	}
	if op.Kind == model.AddSetEntry && shim.KindOf(op.Entry).GuardsVIP() {
		a.holdAddr[op.Entry.Addr()] = true
	}
	if op.Kind == model.AddSetEntry && shim.KindOf(op.Entry) == shim.Frontends && !errors.Is(e, dataplane.ErrExist) {
		k, _ := plan.FrontendOf(op.Entry)
		a.unrecorded[k] = true
	}
	if op.Kind == model.AddService && errors.Is(e, dataplane.ErrExist) {
		a.taken[op.VS.Key] = true
		a.r.withdrawRecord(ctx, op.VS.Key)
	}
}

// withdrawRecord removes the ownership record of a virtual server that
// turned out to be someone else's. A failure is logged: the next full sync
// reads the kernel again.
func (r *Reconciler) withdrawRecord(ctx context.Context, k model.VSKey) {
	op := model.Op{Kind: model.DeleteSetEntry, Entry: shim.Entry(shim.Frontends, k.Addr, k.Proto, k.Port)}
	if !r.obs.HasMember(op.Entry) {
		return
	}
	if err := applyOp(ctx, r.opt.Dataplane, op); err != nil {
		r.obs.Tried(op)
		r.log.Warn("withdraw the record of a foreign virtual server", zap.Stringer("vs", k), zap.Error(err))
		return
	}
	r.obs.Apply(op, nil)
}

// applyOp sends one operation to the dataplane.
func applyOp(ctx context.Context, dp dataplane.Dataplane, op model.Op) error {
	return dataplane.ApplyOne(ctx, dp, op)
}
