// Package reconciler owns one Sync: take what changed, translate it, diff it
// against the cached observed state, apply the operations, and keep the
// observed cache (package observed) in step with what was applied. A full
// observe of the kernel happens at start and after a failure of the kernel
// as a whole; drift made by anyone else is found by a rescan reading the
// kernel once a period beside the syncs (package rescan), whose reads the
// sync folds into the cache, never by a full read that changes wait for.
package reconciler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/metrics"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/objects"
	"github.com/kube-ipvs/kube-ipvs/internal/observed"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/rescan"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
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
	Store         *objects.Store
	Translate     translate.Config
	NodePortRange model.PortRange
	Exclude       []netip.Prefix
	// ReservedAddrs and ReservedCIDRs are addresses no Service may claim
	// beyond the node's own and every Node's, which the store knows: the
	// API server's, the cluster CIDRs (plan.Reserved). A Service's
	// ClusterIP inside them is not reserved (reservedAddrs).
	ReservedAddrs []netip.Addr
	ReservedCIDRs []netip.Prefix
	Timeouts      dataplane.Timeouts
	// Shim shapes the netfilter shim's rules (masquerade-all, cluster CIDRs,
	// families). Its families are the agent's, the same value as
	// Translate's: the caller hands both the one it was configured with.
	Shim shim.Config
	// PodCIDRsFromNode takes the shim's pod CIDRs from this Node's
	// spec.podCIDRs (kube-proxy's --detect-local-mode=NodeCIDR): the rules
	// are written by the first sync that knows them, and rewritten should
	// the Node come back with others (kube-proxy restarts for that).
	PodCIDRsFromNode bool
	// DryRun prints the operations to Out instead of applying them.
	DryRun bool
	// LocalRoutes tells the printed and logged operations that a VIP is
	// bound as a local route, not as an address (model.Op.Command).
	LocalRoutes bool
	Out         io.Writer
	Log         *zap.Logger
	// Reader reads the kernel for Diff, apart from Dataplane so that a
	// diff never queues behind a sync's kernel call (the linux dataplane
	// serializes its calls); nil: Dataplane.
	Reader   Observer
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

	// obs is the observed cache: the kernel's state as the agent knows it.
	obs          *observed.Cache
	haveObserved bool
	needFull     bool
	prunedOnce   bool // a full sync ran after every source had synced
	cold         bool // the last full sync read an empty kernel

	desired desiredSet
	memos   endpointMemos
	drains  map[dataplane.RealRef]time.Time
	// idle are the drained real servers the delete budget keeps at weight
	// 0 for a later sync (drainDeletes).
	idle map[dataplane.RealRef]bool
	// countersRead is when each large virtual server's connection counters
	// were last read and what the read took (see pacedReads).
	countersRead map[model.VSKey]counterRead
	metrics      syncMetrics
	// failing are the Services whose operations failed, retried with
	// backoff; holding those this sync holds back (backingOff); strays the
	// failed operations of no Service, retried with backoff too.
	failing map[model.ServiceName]*failure
	holding map[model.ServiceName]bool
	strays  map[strayKey]*failure
	// refused are the desired frontends the plan refuses, and why, so that
	// each is reported once.
	refused map[model.VSKey]plan.Refusal
	// told is what each Service object was told (reports.go).
	told map[model.ServiceName]*told
	// made are the virtual servers this process created and has not
	// deleted (see plan.Owner.Made).
	made map[model.VSKey]struct{}
	// node is what the last translation knew of this node's Node, and
	// nodePortAddrs the node addresses it served NodePorts on.
	node          NodeStatus
	nodePortAddrs []netip.Addr
	// served are the families translated for: the configured ones the
	// link can hold addresses of now (families.go). Read from any
	// goroutine (NodePortAddrs). refamily: they changed, so every Service
	// is translated again.
	served   atomic.Pointer[model.Families]
	refamily bool
	// reserved are the addresses the last plan refused to claim;
	// pubReserved the same, for Drift.
	reserved plan.Reserved
	// reservedBase are the reserved addresses of the last sync before
	// exemptions, exempt the ClusterIPs among them (reservedAddrs).
	reservedBase plan.Reserved
	exempt       []netip.Addr
	pubReserved  atomic.Pointer[plan.Reserved]
	// pubNodePorts are the nodePorts the Services name, for Drift.
	pubNodePorts atomic.Pointer[map[plan.NodePort]struct{}]

	// touched is what the running sync may change (its scope), for publish;
	// pub holds what views read.
	touched plan.Scope
	pub     publisher

	// shimCfg is the shim configuration last ensured; podCIDRs the Node's
	// pod CIDRs last seen (PodCIDRsFromNode).
	shimCfg  shim.Config
	podCIDRs []netip.Prefix
	// rescans is where the rescan hands its reads over; folded is the
	// read the running sync folded in.
	rescans *rescan.Mailbox
	folded  *rescan.Read
	// stale is the conntrack cleanup still to do (conntrack.go).
	stale staleConntrack
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
	cache := observed.New()
	r := &Reconciler{
		opt:          opt,
		obs:          cache,
		log:          opt.Log.Named("reconciler"),
		desired:      newDesiredSet(),
		memos:        endpointMemos{},
		drains:       map[dataplane.RealRef]time.Time{},
		idle:         map[dataplane.RealRef]bool{},
		countersRead: map[model.VSKey]counterRead{},
		failing:      map[model.ServiceName]*failure{},
		strays:       map[strayKey]*failure{},
		refused:      map[model.VSKey]plan.Refusal{},
		told:         map[model.ServiceName]*told{},
		made:         map[model.VSKey]struct{}{},
		metrics:      syncMetrics{m: opt.Metrics},
		rescans:      rescan.NewMailbox(cache),
		stale:        newStaleConntrack(),
	}
	r.pub.reset()
	r.pub.store(Status{}, NodeStatus{}, nil, nil, counts{})
	r.served.Store(&opt.Translate.Families)
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
	r.readFamilies(ctx)
	// In NodeCIDR mode the Node is not known yet: the first sync writes
	// the rules once it is, rather than rules without the pod CIDRs now.
	if cfg, err := r.shimConfig(r.opt.Store.Node()); err == nil {
		// A set made anew empty empties nothing read yet: the first sync
		// reads the kernel whole and ensures the shim again, which reports
		// whatever else failed with it.
		if err := r.ensureShim(ctx, cfg); err != nil && !errors.Is(err, dataplane.ErrSetEmptied) {
			return err
		}
	}
	return r.opt.Dataplane.SetTimeouts(ctx, r.opt.Timeouts)
}

// shimConfig is the shim's configuration for this sync: the configured
// one, with the Node's pod CIDRs in NodeCIDR mode (the last ones seen, if
// the Node has lost them: rules are not loosened by a Node being
// re-created). Without any yet, it is an error: the rules cannot be told.
// node is the Node as the sync read it.
func (r *Reconciler) shimConfig(node *corev1.Node) (shim.Config, error) {
	cfg := r.opt.Shim
	if !r.opt.PodCIDRsFromNode {
		return cfg, nil
	}
	if cidrs := translate.NodePodCIDRs(node); len(cidrs) > 0 && !slices.Equal(cidrs, r.podCIDRs) {
		if r.podCIDRs != nil {
			r.log.Info("the Node's pod CIDRs changed", zap.Stringers("from", r.podCIDRs), zap.Stringers("to", cidrs))
		}
		r.podCIDRs = cidrs
	}
	if len(r.podCIDRs) == 0 {
		return cfg, fmt.Errorf("detect-local mode NodeCIDR: node %q has no spec.podCIDRs yet", r.opt.Translate.NodeName)
	}
	cfg.PodCIDRs = r.podCIDRs
	return cfg, nil
}

// translateConfig is the translation configuration for this sync: the
// node's own addresses are the store's when a watcher keeps them there.
func (r *Reconciler) translateConfig() translate.Config {
	cfg := r.opt.Translate
	cfg.Families = *r.served.Load()
	if addrs, ok := r.opt.Store.HostAddrs(); ok {
		cfg.HostAddrs = addrs
	}
	return cfg
}

// NodePortAddrs are the node addresses NodePorts are served on now, from
// a read of the Node of its own. Safe from any goroutine; a sync uses its
// own read's (View.NodePortAddrs).
func (r *Reconciler) NodePortAddrs() []netip.Addr {
	return translate.NodePortAddrs(r.opt.Store.Node(), r.translateConfig())
}
