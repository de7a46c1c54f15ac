// Package reconciler owns one Sync: take what changed, translate it, diff it
// against the cached observed state, apply the operations, and keep the
// cache in step with what was applied. A full observe of the kernel happens
// at start, on the periodic resync and after any failure.
package reconciler

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/metrics"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
	"github.com/kube-ipvs/kube-ipvs/internal/snapshot"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// Recorder reports a Service's problem to its owner (a Kubernetes Event).
type Recorder interface {
	ServiceWarning(name model.ServiceName, reason, message string)
}

// Observer reads the whole kernel state.
type Observer interface {
	Observe(ctx context.Context) (dataplane.Observation, error)
}

// Options wire a reconciler.
type Options struct {
	Dataplane     dataplane.Dataplane
	Store         *snapshot.Store
	Translate     translate.Config
	NodePortRange model.PortRange
	Exclude       []netip.Prefix
	Timeouts      dataplane.Timeouts
	// Shim shapes the netfilter shim's rules (masquerade-all, cluster CIDRs,
	// families). Its families are the agent's, the same value as
	// Translate's: the caller hands both the one it was configured with.
	Shim shim.Config
	// DryRun prints the operations to Out instead of applying them.
	DryRun bool
	Out    io.Writer
	Log    *zap.Logger
	// Views observes the kernel for Drift, apart from Dataplane so that a
	// diff never queues behind a sync's kernel call (the linux dataplane
	// serializes its calls); nil: Dataplane.
	Views    Observer
	Recorder Recorder         // may be nil
	Now      func() time.Time // nil: time.Now
	Metrics  *metrics.Metrics // may be nil
}

// Reconciler keeps the kernel in step with the store. Sync is called from
// one goroutine only (the runner's); View and Drift are safe from any
// goroutine at any time, and never wait for a sync.
type Reconciler struct {
	opt Options
	log *zap.Logger

	observed     model.State
	conns        map[dataplane.RealRef]model.Conns
	haveObserved bool
	needFull     bool
	prunedOnce   bool // a full sync ran after every source had synced

	desired desiredSet
	drains  map[dataplane.RealRef]time.Time
	metrics syncMetrics
	// failing are the Services whose operations failed, retried with backoff.
	failing map[model.ServiceName]*failure
	// refused are the desired frontends the plan refuses, and why, so that
	// each is reported once.
	refused map[model.VSKey]plan.Refusal
	// made are the virtual servers this process created and has not
	// deleted (see plan.Owner.Made).
	made map[model.VSKey]struct{}

	// touched is what the running sync may change (its scope), for publish;
	// pub holds what views read.
	touched plan.Scope
	pub     publisher
}

// New returns a reconciler; call Init before the first Sync.
func New(opt Options) *Reconciler {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Log == nil {
		opt.Log = zap.NewNop()
	}
	knownOps(opt.Metrics)
	r := &Reconciler{
		opt:     opt,
		log:     opt.Log.Named("reconciler"),
		desired: newDesiredSet(),
		drains:  map[dataplane.RealRef]time.Time{},
		failing: map[model.ServiceName]*failure{},
		refused: map[model.VSKey]plan.Refusal{},
		made:    map[model.VSKey]struct{}{},
		metrics: syncMetrics{m: opt.Metrics},
	}
	r.pub.reset()
	r.pub.store(Status{}, nil, counts{})
	return r
}

// Init prepares the node (link, sysctls, IPVS timeouts). A dry run changes
// nothing, so it skips this.
func (r *Reconciler) Init(ctx context.Context) error {
	// One families value configures both; two that differ would program
	// virtual servers whose masquerading sets are missing, silently.
	if r.opt.Shim.Families != r.opt.Translate.Families {
		return fmt.Errorf("shim families %s differ from the agent's %s", r.opt.Shim.Families, r.opt.Translate.Families)
	}
	if r.opt.DryRun {
		return nil
	}
	if err := r.opt.Dataplane.Init(ctx); err != nil {
		return err
	}
	if err := r.opt.Dataplane.EnsureShim(ctx, r.opt.Shim); err != nil {
		return err
	}
	return r.opt.Dataplane.SetTimeouts(ctx, r.opt.Timeouts)
}
