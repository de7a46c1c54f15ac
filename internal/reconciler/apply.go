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
// of once applied. It returns the outcome and the operations, when there
// was one pass (the drift checker notes them; a cold start's are many
// passes, and its sync is a full one, which notes no operations).
//
// The operations of a failing Service, or of no Service, whose retry is
// not due at now are held back as if they had failed (backsOff), without
// being sent: a full sync keeps their backoff too.
func (r *Reconciler) apply(ctx context.Context, passes []plan.Pass, now time.Time) (outcome, []model.Op) {
	r.reserveObserved()
	a := newApplier(r, now)
	var ops []model.Op
	for i, pass := range passes {
		start := time.Now() // the log's, not a measurement's (opt.Now is the metrics' clock)
		ops = pass()
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
	if len(passes) > 1 {
		ops = nil
	}
	return a.out, ops
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
	// owned are the observed virtual servers this apply made or copied,
	// which it may change in place (see own).
	owned map[model.VSKey]bool
	// now is the sync's time, against which retries are due.
	now time.Time
}

func newApplier(r *Reconciler, now time.Time) *applier {
	return &applier{r: r, holdAddr: map[netip.Addr]bool{}, kept: map[netip.Addr]bool{},
		missing: map[model.VSKey]bool{}, unrecorded: map[model.VSKey]bool{}, taken: map[model.VSKey]bool{},
		owned: map[model.VSKey]bool{}, now: now}
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

// record notes one applied operation: the observed cache on success, what
// its failure holds back otherwise.
func (a *applier) record(ctx context.Context, op model.Op, e error) {
	r := a.r
	a.out.attempted++
	if e != nil {
		name, owned := r.serviceOf(op)
		a.out.fail(op, e, name, owned)
		r.log.Log(logv.V(logv.Problem), "operation failed", zap.Stringer("op", op), zap.Error(e))
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
	a.own(op)
	r.applyToCache(op)
	a.shareDone(op)
}

// shareDone makes the cache hold the desired virtual server itself as soon
// as op leaves the kernel's copy equal to it (see shareObserved), rather
// than at the end of the sync: a cold start adds 10,000 virtual servers
// before their real servers, and their copies were held, whole, until the
// plan was done (15 MB at its peak, issue 12). Equality is checked only
// when the counts match, so a large virtual server is compared once, not
// at each real server.
func (a *applier) shareDone(op model.Op) {
	if op.Kind != model.AddReal && op.Kind != model.UpdateReal && op.Kind != model.AddService {
		return
	}
	k := op.VS.Key
	want, ok := a.r.desired.state.Services[k]
	if have := a.r.observed.Services[k]; !ok || have == nil || have.Reals.Len() != want.Reals.Len() {
		return
	}
	a.r.shareObserved(k)
	if a.r.observed.Services[k] == want {
		a.owned[k] = false // shared: the next change copies it again
	}
}

// reserveObserved sizes the cache's maps when it is empty (a cold start),
// as reserve does the desired state's: the cache is built from the
// operations applied, which bring it to the desired state. (Its plan comes
// in passes, so the operations cannot be counted before the first apply.)
func (r *Reconciler) reserveObserved() {
	if !r.observed.Empty() {
		return
	}
	d := r.desired.state
	r.observed = model.SizedState(len(d.Services), len(d.Addrs), len(d.Sets))
}

// applyToCache records an applied operation in the observed cache, and
// in the digests of its table and set members.
func (r *Reconciler) applyToCache(op model.Op) {
	switch op.Kind {
	case model.AddSetEntry, model.DeleteSetEntry:
		r.sumSetOp(op)
	case model.BindAddr, model.UnbindAddr:
	default:
		r.sumTableOp(op)
	}
	if op.Kind == model.AddReal {
		r.sizeReals(op.VS.Key)
	}
	r.forgetConns(op)
	op.ApplyTo(&r.observed)
}

// sizeReals sizes the real servers of a virtual server in the cache as
// its Service wants them, at the first one added: the rest follow in the
// same plan, and grew from empty to ten at a cold start. Sized at the
// first real server rather than at the virtual server's create, so that a
// cold start does not hold 10,000 sized lists at once.
func (r *Reconciler) sizeReals(k model.VSKey) {
	have, ok := r.observed.Services[k]
	if !ok || have.Reals.Len() > 0 {
		return
	}
	if want, ok := r.desired.state.Services[k]; ok && want.Reals.Len() > 1 {
		have.Reals.Grow(want.Reals.Len())
	}
}

// sumSetOp counts a set member's add or delete, before it is applied.
func (r *Reconciler) sumSetOp(op model.Op) {
	_, held := r.observed.Sets[op.Entry]
	switch {
	case op.Kind == model.AddSetEntry && !held:
		r.sets.count(memberHash(op.Entry), 1)
	case op.Kind == model.DeleteSetEntry && held:
		r.sets.count(memberHash(op.Entry), -1)
	}
}

// sumTableOp counts a change to the IPVS table, before it is applied
// (what model.Op.ApplyTo does, in the digest).
func (r *Reconciler) sumTableOp(op model.Op) {
	k := op.VS.Key
	svc, ok := r.observed.Services[k]
	switch op.Kind {
	case model.AddService:
		if ok {
			r.table.countService(svc, -1) // replaced whole
		}
		r.table.count(vsHash(op.VS), 1)
	case model.DeleteService:
		if ok {
			r.table.countService(svc, -1)
		}
	case model.UpdateService:
		if ok {
			r.table.count(vsHash(svc.VirtualServer), -1)
			r.table.count(vsHash(op.VS), 1)
		}
	case model.AddReal, model.UpdateReal, model.DeleteReal:
		if !ok {
			return
		}
		if old, held := svc.Reals.Get(op.RS.Addr); held {
			r.table.count(realHash(k, old), -1)
		}
		if op.Kind != model.DeleteReal {
			r.table.count(realHash(k, op.RS), 1)
		}
	}
}

// own copies the observed virtual server op is about to change, the first
// time this apply changes it: the cache's services are shared with the
// desired state and the published views once the kernel holds what is
// wanted (see shareObserved), and a shared one is never changed in place.
// A service this apply made or copied is changed in place, so a cold
// start copies nothing.
func (a *applier) own(op model.Op) {
	k := op.VS.Key
	switch op.Kind {
	case model.AddService:
		a.owned[k] = true
	case model.UpdateService, model.AddReal, model.UpdateReal, model.DeleteReal:
		if svc, ok := a.r.observed.Services[k]; ok && !a.owned[k] {
			a.r.observed.Services[k] = svc.Clone()
			a.owned[k] = true
		}
	}
}

// shareObserved makes the cache hold the desired virtual server itself
// where the kernel holds exactly that, rather than a second copy of the
// table (issue 12, item 4): from then on the two differ only where a sync
// could not bring the kernel in step, and apply copies before it changes.
func (r *Reconciler) shareObserved(k model.VSKey) {
	want, wanted := r.desired.state.Services[k]
	have, inKernel := r.observed.Services[k]
	if wanted && inKernel && have != want && have.Equal(want) {
		r.observed.Services[k] = want
	}
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
	if _, ok := r.observed.Sets[op.Entry]; !ok {
		return
	}
	if err := applyOp(ctx, r.opt.Dataplane, op); err != nil {
		r.log.Warn("withdraw the record of a foreign virtual server", zap.Stringer("vs", k), zap.Error(err))
		return
	}
	r.applyToCache(op)
}

// applyOp sends one operation to the dataplane.
func applyOp(ctx context.Context, dp dataplane.Dataplane, op model.Op) error {
	return dataplane.ApplyOne(ctx, dp, op)
}
