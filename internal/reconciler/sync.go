package reconciler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/logv"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/objects"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
	"github.com/kube-ipvs/kube-ipvs/internal/workers"
)

// drainRecheck is how soon a sync is wanted again while real servers drain,
// so a drained one goes soon after its last connection closes.
const drainRecheck = 2 * time.Second

// Status describes one finished sync.
type Status struct {
	Time     time.Time
	Full     bool
	Services int // Services re-translated
	Ops      int // operations planned
	Failed   int // operations that failed
	// Failing counts the Services whose operations failed (this sync or
	// earlier) and are retried with backoff; they do not fail the sync.
	Failing  int
	Draining int
	// Checked: this sync compared the whole kernel with its cache (a full
	// sync's own read, or a rescan's whole read or scan folded in; not a
	// read of the parts the kernel announced changed).
	Checked bool
	// Drift counts the virtual servers, addresses and set members a rescan
	// found changed by someone else, repaired by this sync.
	Drift    int
	Duration time.Duration
	Err      error
	// Requeue, when non-zero, asks for another (incremental) sync this soon.
	Requeue time.Duration
}

// Sync brings the kernel in step with the store. full forces a fresh
// observe of the kernel and a diff of everything; otherwise only the
// Services that changed, draining real servers and whatever the rescan's
// last read found changed by someone else (rescan.go) are diffed
// against the cached observed state.
func (r *Reconciler) Sync(ctx context.Context, full bool) (Status, error) {
	st := Status{Time: r.opt.Now()}
	synced := r.opt.Store.Synced()
	if !r.opt.DryRun {
		r.readFamilies(ctx)
	}
	// The first sync after every source has synced is full: only then may
	// what nobody asked for be pruned.
	st.Full = full || r.needFull || !r.haveObserved || (synced && !r.prunedOnce)
	// One read of the Node per sync: the shim, the translations, the
	// reserved addresses and the ownership predicate all see the same one.
	node := r.opt.Store.Node()
	shimCfg, err := r.shimConfig(node)
	if err != nil {
		return r.finish(st, err)
	}
	defer r.closeFolded()
	var shimErr error
	if st.Full {
		r.dropRescan()
		if err := r.observe(ctx); err != nil {
			return r.finish(st, err)
		}
		r.cold = r.obs.State().Empty()
		// The rules go first on a full sync: what is served first needs
		// them (the node's own connections are masqueraded by them).
		shimErr = r.ensureShim(ctx, shimCfg)
		if synced && !r.prunedOnce && !r.opt.DryRun {
			st.Ops = r.serveFirst(ctx, node, st.Time)
		}
	}
	passes, tried := r.plan(ctx, &st, synced, node)
	if r.opt.DryRun {
		var err error
		st.Ops, err = r.print(passes)
		return r.finish(st, err)
	}
	// The rules are repaired on a full sync (above) and when the rescan
	// found them changed, and written when their configuration changed.
	if !st.Full && ((r.folded != nil && r.folded.RulesMissing) || !shimCfg.Equal(r.shimCfg)) {
		shimErr = r.ensureShim(ctx, shimCfg)
	}
	out := r.apply(ctx, passes, st.Time)
	r.canary(ctx, &out)
	st.Ops += out.planned
	st.Failed = out.failed
	r.noteFailures(&st, out, tried)
	err = out.err()
	if err == nil && synced && st.Full {
		r.prunedOnce = true
	}
	err = errors.Join(err, shimErr)
	if err == nil {
		r.metrics.programmed(r.opt.Now(), r.failing)
	}
	// Cancelled: the cleanup would only fail; its keys wait for the next
	// sync.
	if ctx.Err() == nil {
		r.clearConntrack(ctx, &st)
		r.readBehind(ctx)
	}
	return r.finish(st, err)
}

// ensureShim repairs the netfilter rules, and writes them when their
// configuration changed (NodeCIDR mode: the Node's pod CIDRs). They are
// constant for a configuration, so this writes nothing unless someone
// changed them.
func (r *Reconciler) ensureShim(ctx context.Context, cfg shim.Config) error {
	if r.opt.DryRun {
		return nil
	}
	err := r.opt.Dataplane.EnsureShim(ctx, cfg)
	r.metrics.shim(err)
	if errors.Is(err, dataplane.ErrSetEmptied) {
		// The cached members of the set are gone from the kernel: the
		// next sync reads them again rather than trust the cache.
		r.needFull = true
	}
	if err != nil {
		return err
	}
	r.shimCfg = cfg
	r.rescans.Ensured(cfg)
	return nil
}

// plan translates what changed and returns the operations that bring the
// scope (the changed Services, or everything on a full sync) in step,
// draining real servers kept at weight 0, in passes to apply one after
// another. Until every source has synced nothing is deleted: the absence
// of an object proves nothing yet. It also returns the Services whose
// operations the plan covers.
func (r *Reconciler) plan(ctx context.Context, st *Status, synced bool, node *corev1.Node) ([]plan.Pass, map[model.ServiceName]struct{}) {
	scope, tried, due := r.retranslate(st, node)
	if st.Full {
		scope = r.everything()
		for name := range r.desired.results {
			tried[name] = struct{}{}
		}
	} else {
		r.widenRetries(st.Time, scope, due)
		r.folded, st.Drift = r.foldRescan(scope)
	}
	for name := range r.holding {
		delete(tried, name) // nothing of it is tried
	}
	r.publishNodePorts()
	reserved := r.reservedAddrs(node)
	if !st.Full {
		r.widenToReserved(scope, reserved)
	}
	r.reserved = reserved
	st.Checked = st.Full || (r.folded != nil && !r.folded.Partial())
	r.touched = scope
	r.addDraining(ctx, scope, st.Full)
	desired, observed := r.scoped(scope, st.Full)
	st.Draining = r.drainKept(desired, observed, r.knownSince(st.Full), st.Time)
	forgetGone(r.drains, r.desired.state, realVS)
	forgetGone(r.idle, r.desired.state, realVS)
	forgetGone(r.countersRead, r.desired.state, itself)
	if st.Draining > 0 {
		st.Requeue = drainRecheck
	}
	passes, refused := r.passes(desired, observed, st.Full)
	r.noteRefusals(scope, refused)
	if !synced {
		for i, pass := range passes {
			passes[i] = func() []model.Op { return withoutDeletes(pass()) }
		}
	}
	return passes, tried
}

// passes plans desired against observed. On a cold start (a full sync
// over a kernel read empty, the one plan of hundreds of thousands of
// operations) the plan is made in passes as they are applied
// (plan.Staged), so that the start holds one pass of it at a time; the
// passes are made against a copy of their own of what the kernel held
// then (nothing, or what was served first: a few entries), as the cache
// they are applied to fills. Otherwise the plan is made whole, in one pass.
func (r *Reconciler) passes(desired, observed model.State, full bool) ([]plan.Pass, []plan.Refusal) {
	owner := r.ownerOf(r.obs.State(), r.reserved, r.desired.nodePorts, r.nodePortAddrs).Made(r.made)
	if full && r.cold && !r.opt.DryRun {
		return plan.Staged(desired, observed.Clone(), owner)
	}
	ops, refused := plan.Plan(desired, observed, owner)
	return []plan.Pass{func() []model.Op { return ops }}, refused
}

// finish records and logs a sync's outcome.
func (r *Reconciler) finish(st Status, err error) (Status, error) {
	st.Err = err
	st.Duration = r.opt.Now().Sub(st.Time)
	r.metrics.synced(st)
	r.publish(st)
	r.rescans.SyncEnded()
	if err != nil {
		r.needFull = true
		return st, err
	}
	// One Info line per sync that changed something; from -v=4 on every
	// sync has its line (kube-proxy's "syncProxyRules complete" is V(4)),
	// so a quiet one (a drift check that found nothing, a drain recheck)
	// can be seen too.
	level := logv.V(logv.Sync)
	if st.Ops > 0 {
		level = zap.InfoLevel
	}
	if ce := r.log.Check(level, "synced"); ce != nil {
		ce.Write(zap.Bool("full", st.Full), zap.Bool("checked", st.Checked), zap.Int("services", st.Services),
			zap.Int("ops", st.Ops), zap.Int("draining", st.Draining), zap.Int("drift", st.Drift), zap.Duration("took", st.Duration))
	}
	return st, nil
}

// observe reads the whole kernel state into the cache. On error the cache
// is left as it was: a doubtful read never drives a prune.
func (r *Reconciler) observe(ctx context.Context) error {
	obs, err := r.opt.Dataplane.Observe(ctx)
	if err != nil {
		return fmt.Errorf("observe kernel state: %w", err)
	}
	r.obs.Load(obs)
	r.haveObserved, r.needFull = true, false
	return nil
}

// retranslate translates every Service that changed and folds the results
// into the desired set; it returns the scope those changes touch, the
// Services translated and the failing ones among them whose retry is due
// (translated again with the changed ones).
func (r *Reconciler) retranslate(st *Status, node *corev1.Node) (plan.Scope, map[model.ServiceName]struct{}, []model.ServiceName) {
	scope := plan.NewScope()
	if st.Full {
		scope = plan.Scope{} // the plan covers everything: nothing to record
	}
	changes := r.opt.Store.Take()
	r.metrics.took(changes.Triggers)
	r.holding = r.backingOff(st.Time, changes.Services)
	due := r.dueRetries(st.Time)
	names := append(slices.Clone(changes.Services), due...)
	cfg := r.translateConfig()
	r.node, r.nodePortAddrs = nodeStatus(node), translate.NodePortAddrs(node, cfg)
	if changes.Node || r.refamily {
		// Every Service may translate differently on a new Node (addresses,
		// zone) or families: all held ones, and all translated before
		// (deleted since).
		names = append(names, append(r.opt.Store.ServiceNames(), r.desired.names()...)...)
		r.refamily = false
	}
	names = slices.Compact(slices.SortedFunc(slices.Values(names), model.ServiceName.Compare))
	tried := make(map[model.ServiceName]struct{}, len(names))
	translated := translateAll(r.opt.Store, names, node, cfg, r.memos)
	r.desired.reserve(translated)
	for i, name := range names {
		tried[name] = struct{}{}
		svc, res := translated[i].svc, translated[i].res
		r.metrics.translated(name, res)
		st.Services++
		r.sayTranslation(name, svc, res)
		if res.Err != nil {
			delete(tried, name) // nothing of it is planned
			continue            // the last good translation stays in force
		}
		if res.Skipped != "" {
			r.log.Log(logv.V(logv.Service), "service skipped", zap.Stringer("service", name), zap.String("reason", res.Skipped))
		}
		var created time.Time
		if svc != nil {
			created = svc.CreationTimestamp.Time
		}
		for _, c := range r.desired.replace(name, res, created, scope) {
			r.sayOnce(c.loser, c.reason(), c)
		}
	}
	// A Service that took over a frontend let go of in this sync is tried
	// now, backoff or not: held, the frontend would serve nothing until
	// its retry.
	for name := range r.desired.takeWoken() {
		delete(r.holding, name)
		tried[name] = struct{}{}
	}
	return scope, tried, due
}

// translation is one Service's translation, with the object translated.
type translation struct {
	svc *corev1.Service
	res translate.Result
}

// parallelFrom is how many Services each worker must have to translate
// before a sync translates them in parallel (translateAll): a cold start
// translates every Service and is bound by the CPU, while a change's one or
// two would pay more to start the workers than they save.
const parallelFrom = 256

// translateAll translates the named Services, in order of names. Each
// Service's translation is its own (translate.Service reads its arguments
// and nothing else), so many are spread over the CPUs but one
// (workers.Each). The objects are taken from the store first, one by one:
// workers contending for its lock cost more than the lookups.
// A large Service of several slices reads them through its memo (see
// endpointMemos; memos nil: none), taken here too, so that each worker has
// its own.
func translateAll(store *objects.Store, names []model.ServiceName, node *corev1.Node, cfg translate.Config, memos endpointMemos) []translation {
	out := make([]translation, len(names))
	epSlices := make([][]*discoveryv1.EndpointSlice, len(names))
	memo := make([]*translate.EndpointMemo, len(names))
	for i, name := range names {
		out[i].svc, epSlices[i] = store.Service(name)
		memo[i] = memos.of(name, out[i].svc, epSlices[i])
	}
	workers.Each(len(names), parallelFrom, func(i int) {
		out[i].res = translate.ServiceWith(out[i].svc, epSlices[i], node, cfg, memo[i])
	})
	return out
}

// endpointMemos are the memos of the Services of several EndpointSlices
// and at least memoFrom endpoints (translate.EndpointMemo): a change to
// one slice of a large Service reads that slice, not all of them. A
// Service of one slice has none: its change replaces everything the memo
// would hold, which would only cost memory. Nor has a small one of a few
// slices (a dual-stack Service has one per family): reading it whole
// costs less than the memo's bookkeeping and its copy of the endpoints.
type endpointMemos map[model.ServiceName]*translate.EndpointMemo

// memoFrom is the fewest endpoints a Service's slices list for it to read
// them through a memo: a few default-sized slices (the EndpointSlice
// controller puts up to 100 in one).
const memoFrom = 256

// endpointsIn counts the endpoints the slices list.
func endpointsIn(epSlices []*discoveryv1.EndpointSlice) int {
	n := 0
	for _, s := range epSlices {
		if s != nil {
			n += len(s.Endpoints)
		}
	}
	return n
}

// of returns the memo a Service's translation reads through, making or
// dropping it as the Service's slices call for (nil: none).
func (m endpointMemos) of(name model.ServiceName, svc *corev1.Service, epSlices []*discoveryv1.EndpointSlice) *translate.EndpointMemo {
	if m == nil {
		return nil
	}
	if svc == nil || len(epSlices) < 2 || endpointsIn(epSlices) < memoFrom {
		delete(m, name)
		return nil
	}
	memo, ok := m[name]
	if !ok {
		memo = &translate.EndpointMemo{}
		m[name] = memo
	}
	return memo
}

// warn logs a Service's problem and reports it as an Event when possible:
// the one place the agent's Events are posted, with messages capped at
// maxEventMessage.
func (r *Reconciler) warn(name model.ServiceName, reason string, err error) {
	msg := capMessage(err.Error())
	// Warn, not Error: the agent is fine, a user's object is not (and the
	// user is told through an Event).
	r.log.Warn("service not applied", zap.Stringer("service", name), zap.String("reason", reason), zap.String("error", msg))
	if r.opt.Recorder != nil {
		r.opt.Recorder.ServiceWarning(name, reason, msg)
	}
}

// noteRefusals reports the desired frontends the plan refused (another
// tool's virtual server, of a family not served, on a node's, the API
// server's or a pod's address), counted by the refused-frontends gauge.
// The ones newly refused are said per Service and reason, in one message
// (joinProblems), once for the Service object (sayOnce): a Service
// listing thousands of refused addresses costs one Event and one log
// line. A frontend of the scope no longer refused is forgotten.
func (r *Reconciler) noteRefusals(scope plan.Scope, refused []plan.Refusal) {
	type group struct {
		name   model.ServiceName
		owned  bool
		reason string
	}
	var order []group
	fresh := map[group][]string{}
	now := make(map[model.VSKey]plan.Refusal, len(refused))
	for _, ref := range refused {
		now[ref.Key] = ref
		if r.refused[ref.Key] == ref {
			continue
		}
		r.refused[ref.Key] = ref
		name, owned := r.desired.owner[ref.Key]
		g := group{name: name, owned: owned, reason: refusalReason(ref.Why)}
		if _, ok := fresh[g]; !ok {
			order = append(order, g)
		}
		fresh[g] = append(fresh[g], ref.String())
	}
	for _, g := range order {
		msg := joinProblems(fresh[g])
		if !g.owned {
			r.log.Warn("frontends refused", zap.String("reason", g.reason), zap.String("why", msg))
			continue
		}
		r.sayOnce(g.name, g.reason, errors.New(msg))
	}
	for k := range scope.Keys {
		if _, ok := now[k]; !ok {
			delete(r.refused, k)
		}
	}
}

// refusalReason is the Event reason of a refusal.
func refusalReason(why plan.Why) string {
	switch why {
	case plan.Unserved:
		return "UnservedFamily"
	case plan.ReservedAddr:
		return "ReservedAddress"
	}
	return "ForeignVirtualServer"
}

// everything is the scope of a full sync: all we want and all there is.
// It lists virtual servers and addresses, not set members: a full sync
// plans on the states themselves (see scoped), and what is published
// follows the first two only.
func (r *Reconciler) everything() plan.Scope {
	sc := plan.Scope{Keys: map[model.VSKey]struct{}{}, Addrs: map[netip.Addr]struct{}{}}
	for _, s := range []model.State{r.desired.state, r.obs.State()} {
		for k := range s.Services {
			sc.Keys[k] = struct{}{}
		}
		for a := range s.Addrs {
			sc.Addrs[a] = struct{}{}
		}
	}
	return sc
}

// scoped is the part of the desired and observed states a sync plans: the
// scope's, or on a full sync the whole states, shared rather than copied
// (a copy of the whole sets would double the start's peak memory). The desired services are put in a map of their own
// even then: drain replaces the ones it keeps real servers in.
func (r *Reconciler) scoped(scope plan.Scope, full bool) (desired, observed model.State) {
	if !full {
		return scope.Of(r.desired.state), scope.Of(r.obs.State())
	}
	desired = r.desired.state
	desired.Services = maps.Clone(desired.Services)
	return desired, r.obs.State()
}

// addDraining widens an incremental scope to the virtual servers with real
// servers still draining, and refreshes the connection counters of the
// small ones (a full sync has them all from the observe). A large virtual
// server's counters are read behind the sync's operations (readBehind),
// and count for a drain only if read after it began (knownSince): its
// real servers are not walked for departures here.
func (r *Reconciler) addDraining(ctx context.Context, scope plan.Scope, full bool) {
	draining := map[model.VSKey]bool{}
	for ref := range r.drains {
		scope.Keys[ref.VS] = struct{}{}
		draining[ref.VS] = true
	}
	if full {
		clear(r.countersRead) // the observe read them all
		return
	}
	have := r.obs.State().Services
	for k := range scope.Keys {
		if large(have[k]) {
			continue
		}
		if want, ok := r.desired.state.Services[k]; draining[k] || (ok && hasDeparted(want, have[k])) {
			r.readCounters(ctx, k, have[k])
		}
	}
}

// readBehind reads, after a sync's operations, the counters of the large
// virtual servers with real servers draining, except those read too
// recently (readTooRecently). Read there, a read of 10,000 real servers
// (a large part of a second under emulation) holds back no change of the
// sync it is in: the changes are in the kernel before it begins, and the
// real servers they set to weight 0 are read at it. The next sync ends
// the drains it finds over.
func (r *Reconciler) readBehind(ctx context.Context) {
	have := r.obs.State().Services
	seen := map[model.VSKey]bool{}
	for ref := range r.drains {
		k := ref.VS
		if seen[k] {
			continue
		}
		seen[k] = true
		if large(have[k]) && !r.readTooRecently(k, r.opt.Now()) {
			r.readCounters(ctx, k, have[k])
		}
	}
}

// readCounters reads the connection counters of k (holding have) into the
// cache, and records the read of a large virtual server: when it began and
// what it took.
func (r *Reconciler) readCounters(ctx context.Context, k model.VSKey, have *model.Service) {
	began := r.opt.Now()
	conns, err := r.opt.Dataplane.Conns(ctx, k)
	if err != nil {
		r.log.Warn("read connection counters", zap.Stringer("vs", k), zap.Error(err))
		return
	}
	r.obs.NoteConns(k, conns)
	if !large(have) {
		delete(r.countersRead, k)
		return
	}
	r.countersRead[k] = counterRead{at: began, took: r.opt.Now().Sub(began)}
}

// counterRead is one read of a large virtual server's connection
// counters: when it began and what it took.
type counterRead struct {
	at   time.Time
	took time.Duration
}

// pacedReads is how many real servers make a virtual server large: its
// counters are read behind the sync's operations (readBehind), at most
// once per readsShare times the last read's time. IPVS lists every real
// server of a virtual server to give one's counters, so a read of 10,000
// takes a large part of a second under emulation; a rolling update's
// syncs, each with a departed endpoint, would otherwise each read them
// all before applying anything. A departed real server of a large
// virtual server waits at weight 0, taking no new connection, for the
// read that says it has none.
const (
	pacedReads = 256
	readsShare = 10
)

// large tells whether a virtual server holding have is large (pacedReads).
func large(have *model.Service) bool { return have != nil && have.Reals.Len() >= pacedReads }

// readTooRecently tells whether the counters of k were read too recently
// to be read again at now.
func (r *Reconciler) readTooRecently(k model.VSKey, now time.Time) bool {
	last, ok := r.countersRead[k]
	return ok && now.Sub(last.at) < readsShare*last.took
}

// knownSince gives the counters the cache holds, but on an incremental
// sync those of a large virtual server only if its last read began after
// the drain asking (since): an older read was taken while the real server
// had its weight, and new connections may have come since. The instants
// are the clock's: the drain's is its sync's start, before that sync
// applies anything, the read's is the clock's when it began, after it.
// Compared strictly, a clock that has not moved between them makes the
// drain wait for a later read, never trust an earlier one. A full sync's
// counters are its observe's, read before any drain it decides.
func (r *Reconciler) knownSince(full bool) countersSince {
	if full {
		return readNow(r.obs.Conn)
	}
	have := r.obs.State().Services
	return func(ref dataplane.RealRef, since time.Time) (model.Conns, bool) {
		if large(have[ref.VS]) {
			if last, ok := r.countersRead[ref.VS]; !ok || !since.Before(last.at) {
				return model.Conns{}, false
			}
		}
		return r.obs.Conn(ref)
	}
}

// hasDeparted tells whether the kernel holds real servers the Service no
// longer lists.
func hasDeparted(want, have *model.Service) bool {
	if have == nil {
		return false
	}
	departed := false
	eachReal(want.Reals, have.Reals, func(_ model.RealServer, wanted bool) { departed = departed || !wanted })
	return departed
}

// drainTimeout is a virtual server's drain timeout: its Service's
// annotation, else the flag.
func (r *Reconciler) drainTimeout(k model.VSKey) time.Duration {
	if m, ok := r.desired.meta(k); ok {
		return m.DrainTimeout
	}
	return r.opt.Translate.DrainTimeout
}

// ownerOf builds the ownership predicate from one observed state: the
// cached one for a sync, a fresh read for the diff command; nodePortAddrs
// are the node addresses NodePorts are served on.
func (r *Reconciler) ownerOf(observed model.State, reserved plan.Reserved, nodePorts map[plan.NodePort]struct{}, nodePortAddrs []netip.Addr) plan.Owner {
	return plan.NewOwner(observed, nodePortAddrs, plan.OwnerPolicy{
		Reserved:      reserved,
		NodePortRange: r.opt.NodePortRange,
		NodePorts:     nodePorts,
		Exclude:       r.opt.Exclude,
		Families:      r.opt.Translate.Families,
	})
}

// withoutDeletes drops every removal: until every source has synced, the
// absence of an object proves nothing.
func withoutDeletes(ops []model.Op) []model.Op {
	out := ops[:0:0]
	for _, op := range ops {
		if !op.Kind.Removes() {
			out = append(out, op)
		}
	}
	return out
}

// print writes the planned operations, one ipvsadm-style line each, and
// returns how many there were.
func (r *Reconciler) print(passes []plan.Pass) (int, error) {
	var errs []error
	n := 0
	for _, pass := range passes {
		for _, op := range pass() {
			n++
			if _, err := fmt.Fprintln(r.opt.Out, op.Command(r.opt.LocalRoutes)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return n, errors.Join(errs...)
}
