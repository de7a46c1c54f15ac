package reconciler

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// Inspection is a copy of what the reconciler knows, for status pages.
// Callers must not run it concurrently with Sync (the agent serializes both).
type Inspection struct {
	Desired  model.State
	Observed model.State
	Meta     map[model.VSKey]translate.VSMeta
	Draining map[dataplane.RealRef]time.Time // since when each real server drains
	Last     Status
}

// Inspect copies the reconciler's view.
func (r *Reconciler) Inspect() Inspection {
	in := Inspection{
		Desired:  r.desired.state.Clone(),
		Observed: r.observed.Clone(),
		Meta:     map[model.VSKey]translate.VSMeta{},
		Draining: maps.Clone(r.drains),
		Last:     r.last,
	}
	for k := range r.desired.state.Services {
		if m, ok := r.desired.meta(k); ok {
			in.Meta[k] = m
		}
	}
	return in
}

// Drift reads the kernel afresh and returns what the agent would change
// now: empty at steady state. Draining real servers count as wanted at
// weight 0, as they are during a sync. Nothing is applied or cached.
func (r *Reconciler) Drift(ctx context.Context) ([]plan.Op, error) {
	obs, err := r.opt.Dataplane.Observe(ctx)
	if err != nil {
		return nil, fmt.Errorf("observe kernel state: %w", err)
	}
	desired := r.desired.state.Clone()
	drain(drainInput{
		desired: desired, observed: obs.State, conns: obs.Conns,
		since: maps.Clone(r.drains), timeout: r.drainTimeout, now: r.opt.Now(),
	})
	return plan.Diff(desired, obs.State, r.ownerOf(obs.State)), nil
}
