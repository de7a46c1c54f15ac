package reconciler

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// held tells whether op is not to be sent, and notes what that withholds
// in turn. An operation waits on what the plan says it needs (plan.Needs):
// a VIP whose virtual server could not be created, deleted or guarded is
// neither bound nor unbound; the real servers and set members of a
// virtual server not made are not tried; an address not released keeps
// its set members; a frontend not recorded gets no virtual server. The
// operations of a failing Service, or of no Service, whose retry is not
// due are held back as if they had failed (backsOff), without being sent:
// a full sync keeps their backoff too.
func (a *applier) held(ctx context.Context, op model.Op) bool {
	if a.r.backsOff(op, a.now) {
		a.failed(ctx, op, errBackingOff)
		return true
	}
	if len(a.withheld) == 0 {
		return false
	}
	held := false
	for _, d := range plan.Needs(op) {
		if !d.IsZero() && a.withheld[d] {
			held = true
			a.withhold(d.Withholds())
		}
	}
	return held
}

// failed notes what a failed operation withholds from the operations
// after it (plan.Withheld). A virtual server someone else made between
// our read and our create is not claimed: its record is withdrawn.
func (a *applier) failed(ctx context.Context, op model.Op, e error) {
	exists := errors.Is(e, dataplane.ErrExist)
	a.withhold(plan.Withheld(op, exists))
	if op.Kind == model.AddService && exists {
		a.r.withdrawRecord(ctx, op.VS.Key)
	}
}

// withhold notes deps as withheld.
func (a *applier) withhold(deps plan.Deps) {
	for _, d := range deps {
		if !d.IsZero() {
			a.withheld[d] = true
		}
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
