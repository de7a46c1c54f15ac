package reconciler

import (
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// The observed cache follows what apply made: each applied operation is
// folded into it (and into the digests of its table and set members), and
// the virtual servers the kernel holds as wanted are shared with the
// desired state rather than copied.

// shareDone makes the cache hold the desired virtual server itself as soon
// as op leaves the kernel's copy equal to it (see shareObserved), rather
// than at the end of the sync: a cold start adds every virtual server
// before the real servers, and a copy of each held until the plan is done
// would be a second table at the start's peak. Equality is checked only
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
	switch op.Target() {
	case model.TargetMember:
		r.sumSetOp(op)
	case model.TargetTable:
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
// table: from then on the two differ only where a sync
// could not bring the kernel in step, and apply copies before it changes.
func (r *Reconciler) shareObserved(k model.VSKey) {
	want, wanted := r.desired.state.Services[k]
	have, inKernel := r.observed.Services[k]
	if wanted && inKernel && have != want && have.Equal(want) {
		r.observed.Services[k] = want
	}
}
