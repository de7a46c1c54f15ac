package reconciler

import (
	"context"
	"fmt"
	"maps"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
)

// Diff reads the kernel afresh and returns what the agent would change
// now: empty at steady state. Draining real servers count as wanted at
// weight 0, as they are during a sync. Nothing is applied or cached.
//
// It compares the published View with its own read of the kernel (through
// Options.Reader), so it never waits for a sync; during a sync it may show
// operations that sync is about to apply.
func (r *Reconciler) Diff(ctx context.Context) ([]model.Op, error) {
	v := r.View()
	obs, err := r.reader().Observe(ctx)
	if err != nil {
		return nil, fmt.Errorf("observe kernel state: %w", err)
	}
	desired := v.Desired()
	drain(drainInput{
		desired: desired, observed: obs.State, conns: readNow(func(ref dataplane.RealRef) (model.Conns, bool) { n, ok := obs.Conns[ref]; return n, ok }),
		since: maps.Clone(v.drains), timeout: v.drainTimeout(r.opt.Translate.DrainTimeout), now: r.opt.Now(),
	})
	return plan.Diff(desired, obs.State, r.ownerOf(obs.State, r.publishedReserved(), r.publishedNodePorts(), r.NodePortAddrs())), nil
}

// reader is the kernel reader Diff uses.
func (r *Reconciler) reader() Observer {
	if r.opt.Reader != nil {
		return r.opt.Reader
	}
	return r.opt.Dataplane
}
