package reconciler

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// Drift made by anyone else (ipvsadm -D, an address deleted, a set member
// removed, the rules flushed) is found by a DriftChecker, not by a full
// resync in the sync loop (issue 12): re-reading 10,000 virtual servers
// there took seconds, and every change waited for it. The checker reads
// the kernel a part at a time on its own sockets, beside the syncs, and
// hands each part to the sync loop, which folds it into its cache and
// diffs only that part. A sync never waits for a read.
//
// A read and a sync may overlap: what the sync loop changed while a part
// was being read is newer in the cache than in the read, so the fold
// leaves it out (driftMailbox records it); the next period reads it again.

// driftRead is one part of the kernel as the checker read it.
type driftRead struct {
	keys []model.VSKey // the virtual servers read; absent from obs: missing
	obs  dataplane.Observation
	// table: obs holds the link's addresses and the set members, and the
	// fold repairs the netfilter rules too.
	table bool
	done  chan struct{} // closed once the sync loop folded or dropped it
}

// driftMailbox is where the checker and the sync loop meet; it is the only
// reconciler state both touch.
type driftMailbox struct {
	mu      sync.Mutex
	reading bool       // a read is under way or waits to be folded
	touched plan.Scope // what syncs changed since the read began
	stale   bool       // a full sync ran since: the read is older than the cache
	pending *driftRead
	wake    chan struct{} // the runner's cue to sync (and so fold)
}

func newDriftMailbox() *driftMailbox {
	return &driftMailbox{wake: make(chan struct{}, 1)}
}

// begin opens a read: from now on every sync's changes are recorded.
func (m *driftMailbox) begin() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reading, m.stale, m.touched, m.pending = true, false, plan.NewScope(), nil
}

// abort closes a read that failed.
func (m *driftMailbox) abort() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reading, m.touched = false, plan.Scope{}
}

// hand leaves a finished read for the sync loop and wakes it.
func (m *driftMailbox) hand(rd *driftRead) {
	m.mu.Lock()
	m.pending = rd
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// note records what a sync may have changed in the kernel: its scope and
// every operation it tried (a full sync: everything). Called after apply,
// so a change is either noted or finished before the read began.
func (m *driftMailbox) note(scope plan.Scope, ops []plan.Op, full bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.reading {
		return
	}
	if full {
		m.stale = true
		return
	}
	add(m.touched, scope)
	for _, op := range ops {
		touch(m.touched, op)
	}
}

// take hands the sync loop the finished read, if any, with what changed
// since it began, and closes it.
func (m *driftMailbox) take() (rd *driftRead, touched plan.Scope, stale bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending == nil {
		return nil, plan.Scope{}, false
	}
	rd, touched, stale = m.pending, m.touched, m.stale
	m.reading, m.pending, m.touched = false, nil, plan.Scope{}
	return rd, touched, stale
}

func add(dst, src plan.Scope) {
	for k := range src.Keys {
		dst.Keys[k] = struct{}{}
	}
	for a := range src.Addrs {
		dst.Addrs[a] = struct{}{}
	}
	for e := range src.Sets {
		dst.Sets[e] = struct{}{}
	}
}

// touch adds what one operation changes to sc.
func touch(sc plan.Scope, op plan.Op) {
	switch op.Kind {
	case plan.BindAddr, plan.UnbindAddr:
		sc.Addrs[op.Addr] = struct{}{}
	case plan.AddSetEntry, plan.DeleteSetEntry:
		sc.Sets[op.Entry] = struct{}{}
	default:
		k := op.VS.Key
		sc.Keys[k] = struct{}{}
		// A create refused with EEXIST withdraws the frontend's record
		// (apply): a set member no set operation names.
		sc.Sets[shim.Entry(shim.Frontends, k.Addr, k.Proto, k.Port)] = struct{}{}
	}
}

// foldDrift takes the checker's finished read, if any: every part of it
// the syncs did not change since it began replaces the cache, and joins
// scope, so that this sync repairs what someone else changed there. It
// returns the read (nil if none; Sync closes its done once applied) and
// how many virtual servers, addresses and set members differed.
func (r *Reconciler) foldDrift(scope plan.Scope) (*driftRead, int) {
	rd, touched, stale := r.drift.take()
	if rd == nil || stale {
		return rd, 0
	}
	drifted := 0
	for _, k := range rd.keys {
		if _, ok := touched.Keys[k]; ok {
			continue
		}
		// Only what differs joins the scope: the cache was in step with
		// what is wanted, so the rest needs nothing, and an idle fold costs
		// no diff and no copy of the published view.
		if r.adopt(k, rd.obs) {
			drifted++
			scope.Keys[k] = struct{}{}
		}
	}
	if rd.table {
		drifted += foldSet(r.observed.Addrs, rd.obs.State.Addrs, touched.Addrs, scope.Addrs)
		drifted += foldSet(r.observed.Sets, rd.obs.State.Sets, touched.Sets, scope.Sets)
	}
	return rd, drifted
}

// adopt replaces the cached virtual server k and its counters with the
// read's, and tells whether they differed.
func (r *Reconciler) adopt(k model.VSKey, obs dataplane.Observation) bool {
	have, inKernel := obs.State.Services[k]
	cached, inCache := r.observed.Services[k]
	if inCache {
		for a := range cached.Reals {
			delete(r.conns, dataplane.RealRef{VS: k, RS: a})
		}
	}
	if !inKernel {
		delete(r.observed.Services, k)
		return inCache
	}
	r.observed.Services[k] = have
	for a := range have.Reals {
		ref := dataplane.RealRef{VS: k, RS: a}
		r.conns[ref] = obs.Conns[ref]
	}
	return !inCache || !have.Equal(cached)
}

// foldSet makes the cached set agree with the read, except on what the
// syncs changed since, and adds what differed to scope.
func foldSet[K comparable](cache, read, touched, scope map[K]struct{}) int {
	n := 0
	fix := func(k K, in bool) {
		if _, ok := touched[k]; ok {
			return
		}
		if in {
			cache[k] = struct{}{}
		} else {
			delete(cache, k)
		}
		scope[k] = struct{}{}
		n++
	}
	for k := range read {
		if _, ok := cache[k]; !ok {
			fix(k, true)
		}
	}
	for k := range cache {
		if _, ok := read[k]; !ok {
			fix(k, false)
		}
	}
	return n
}

// DriftWake is the runner's cue that a read waits to be folded: it should
// sync (incrementally) soon.
func (r *Reconciler) DriftWake() <-chan struct{} { return r.drift.wake }

// DriftChecker reads the kernel in parts, beside the syncs: once per
// Period every virtual server the agent knows of or the kernel lists, in
// Slices parts spread evenly over the period, and once the table (which
// virtual servers exist, the link's addresses, the set members; the fold
// also checks the netfilter rules). So anything changed by someone else is
// read within one Period, and repaired by the sync that follows
// (MinInterval later at most), or one Period after that if the agent
// itself changed the same virtual server while its part was read.
type DriftChecker struct {
	Rec    *Reconciler
	Reader dataplane.Reader // its own sockets: never the sync's
	Period time.Duration
	Slices int
	Log    *zap.Logger
}

// Run reads a part per tick until ctx ends. Each part waits until the
// sync loop has folded the one before, so reads never pile up.
func (d *DriftChecker) Run(ctx context.Context) {
	n := max(d.Slices, 1)
	tick := time.NewTicker(max(d.Period/time.Duration(n+1), time.Millisecond))
	defer tick.Stop()
	seed := maphash.MakeSeed()
	var listed map[model.VSKey]*model.Service // the table read's virtual servers
	var began time.Time                       // of the rotation under way
	for step := 0; ; step = (step + 1) % (n + 1) {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if step == 0 && d.Rec.View().Last.Time.IsZero() {
			// The first sync reads the whole kernel itself: a read beside
			// it would only compete with the cold start, and be dropped.
			step = -1
			continue
		}
		if step == 0 {
			// Reads slower than their tick stretch the rotation, and the
			// bound with it: say so.
			if took := time.Since(began); !began.IsZero() && took > d.Period+d.Period/2 {
				d.log().Warn("drift check: the kernel took longer to read than the sync period", zap.Duration("took", took), zap.Duration("period", d.Period))
			}
			began = time.Now()
			rd := d.read(ctx, nil, true)
			if rd != nil {
				listed = rd.obs.State.Services
			}
			continue
		}
		part := func(k model.VSKey) bool { return int(maphash.Comparable(seed, k)%uint64(n)) == step-1 }
		d.read(ctx, d.keys(listed, part), false)
	}
}

// keys are the virtual servers of one part: those the agent wants or knows
// in the kernel (its last view) and those the last table read listed.
func (d *DriftChecker) keys(listed map[model.VSKey]*model.Service, in func(model.VSKey) bool) []model.VSKey {
	var out []model.VSKey
	seen := map[model.VSKey]bool{}
	for k := range d.Rec.View().servers.keys() {
		if in(k) {
			seen[k] = true
			out = append(out, k)
		}
	}
	for k := range listed {
		if in(k) && !seen[k] {
			out = append(out, k)
		}
	}
	return out
}

// read reads one part, hands it to the sync loop and waits until it is
// folded. It returns the read, nil if it failed (a doubtful read is
// dropped: it never drives a repair, let alone a prune).
func (d *DriftChecker) read(ctx context.Context, keys []model.VSKey, table bool) *driftRead {
	m := d.Rec.drift
	m.begin()
	rd := &driftRead{keys: keys, table: table, done: make(chan struct{})}
	var err error
	if table {
		rd.obs, err = d.Reader.ObserveTable(ctx)
	} else {
		rd.obs, err = d.Reader.ObserveServices(ctx, keys)
	}
	if err != nil {
		m.abort()
		if ctx.Err() == nil {
			d.log().Warn("drift check: read the kernel", zap.Bool("table", table), zap.Error(err))
		}
		return nil
	}
	m.hand(rd)
	select {
	case <-rd.done:
	case <-ctx.Done():
	}
	return rd
}

func (d *DriftChecker) log() *zap.Logger {
	if d.Log == nil {
		return zap.NewNop()
	}
	return d.Log
}
