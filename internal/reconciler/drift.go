package reconciler

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/logv"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// Drift made by anyone else (ipvsadm -D, an address deleted, a set member
// removed, the rules flushed) is found by a DriftChecker, not by a full
// resync in the sync loop (issue 12): re-reading 10,000 virtual servers
// there took seconds, and every change waited for it. The checker reads
// the whole kernel once a period on its own sockets, beside the syncs,
// and hands the read to the sync loop, which folds into its cache only
// what differs and diffs only that. A sync never waits for a read.
//
// A read and a sync may overlap: what the sync loop changed while the
// kernel was being read is newer in the cache than in the read, so the
// fold leaves it out (driftMailbox records it); the next period reads it
// again.

// driftRead is the kernel as the checker read it: a scan (digests only,
// scanned set) or a whole Observation.
type driftRead struct {
	// obs is the whole read; after a scan it holds the link's addresses
	// alone (the fold compares those one by one, there are few).
	obs dataplane.Observation
	// sets and table digest the read's set members and IPVS table, taken
	// off the sync loop.
	sets, table digest
	// scan is what a scan keeps to take touched entries out of the
	// digests; nil for a whole read.
	scan *scanned
	// rulesMissing: the netfilter rules were not as the shim configuration
	// last ensured has them.
	rulesMissing bool
	// wantWhole: the fold found a scan's digests differ from the cache's
	// and asks for a whole read, which the checker makes at once.
	wantWhole bool
	done      chan struct{} // closed once the sync loop folded or dropped it
}

// scanned is what a scan keeps beside its digests: each virtual server's
// part of the table digest and every set member's hash, sorted, so that
// the fold can take out what the syncs changed during the read. Some 10,000
// small entries and 130,000 integers at 10,000 Services, against the
// 100 MB of a whole Observation.
type scanned struct {
	perVS   map[model.VSKey]digest
	members []uint64
}

// vsPart is the read's digest of virtual server k and its real servers.
func (rd *driftRead) vsPart(k model.VSKey) (digest, bool) {
	if rd.scan != nil {
		d, ok := rd.scan.perVS[k]
		return d, ok
	}
	svc, ok := rd.obs.State.Services[k]
	if !ok {
		return digest{}, false
	}
	var d digest
	d.countService(svc, 1)
	return d, true
}

// hasMember tells whether the read holds member e.
func (rd *driftRead) hasMember(e model.SetEntry) bool {
	if rd.scan != nil {
		_, ok := slices.BinarySearch(rd.scan.members, memberHash(e))
		return ok
	}
	_, ok := rd.obs.State.Sets[e]
	return ok
}

// driftMailbox is where the checker and the sync loop meet; it is the only
// reconciler state both touch.
type driftMailbox struct {
	mu      sync.Mutex
	reading bool       // a read is under way or waits to be folded
	touched plan.Scope // what syncs changed since the read began
	stale   bool       // a full sync ran since: the read is older than the cache
	pending *driftRead
	shim    *shim.Config  // the shim configuration last ensured
	wake    chan struct{} // the runner's cue to sync (and so fold)
}

func newDriftMailbox() *driftMailbox {
	return &driftMailbox{wake: make(chan struct{}, 1)}
}

// begin opens a read: from now on every sync's changes are recorded. It
// returns the shim configuration to check the rules against (nil: none
// ensured yet).
func (m *driftMailbox) begin() *shim.Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reading, m.stale, m.touched, m.pending = true, false, plan.NewScope(), nil
	return m.shim
}

// ensured records the shim configuration the rules were last written for.
func (m *driftMailbox) ensured(cfg shim.Config) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.shim = &cfg
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
func (m *driftMailbox) note(scope plan.Scope, ops []model.Op, full bool) {
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
func touch(sc plan.Scope, op model.Op) {
	switch op.Target() {
	case model.TargetAddr:
		sc.Addrs[op.Addr] = struct{}{}
	case model.TargetMember:
		sc.Sets[op.Entry] = struct{}{}
	default:
		k := op.VS.Key
		sc.Keys[k] = struct{}{}
		// A create refused with EEXIST withdraws the frontend's record
		// (apply): a set member no set operation names.
		sc.Sets[shim.Entry(shim.Frontends, k.Addr, k.Proto, k.Port)] = struct{}{}
	}
}

// foldDrift takes the checker's finished read, if any: every virtual
// server, address and set member the syncs did not change since it began
// and that differs from the cache replaces the cached one and joins scope,
// so that this sync repairs what someone else changed. What agrees costs
// a comparison and no more: no copy, no diff, nothing published; the
// virtual servers and the set members are compared one by one only when
// the digests of the read and the cache differ on what the syncs did not
// touch (digest.go, tableAgrees). It
// returns the read (nil if none; Sync closes its done once applied) and
// how many things differed (the rules count as one).
func (r *Reconciler) foldDrift(scope plan.Scope) (*driftRead, int) {
	rd, touched, stale := r.drift.take()
	if rd == nil || stale {
		if rd != nil {
			rd.rulesMissing = false // the full sync ensured them
		}
		return rd, 0
	}
	drifted := 0
	tableOK, setsOK := r.tableAgrees(rd, touched), r.setsAgree(rd, touched)
	if rd.scan != nil && (!tableOK || !setsOK) {
		// A scan tells that something differs, not what: the checker
		// reads the kernel whole at once, and that read is folded.
		rd.wantWhole = true
		tableOK, setsOK = true, true
	}
	if !tableOK {
		drifted += r.foldTable(rd, touched, scope)
	}
	drifted += foldSet(r.observed.Addrs, rd.obs.State.Addrs, touched.Addrs, scope.Addrs)
	if !setsOK {
		drifted += foldSet(r.observed.Sets, rd.obs.State.Sets, touched.Sets, scope.Sets)
		r.sets = membersDigest(r.observed.Sets)
	}
	if rd.rulesMissing {
		drifted++
	}
	return rd, drifted
}

// tableAgrees tells whether the read's virtual servers agree with the
// cache's on everything the syncs did not change since the read began: the
// digests of both, less what each holds of the touched keys. A read
// overlaps the changes of its time (at 10,000 Services it takes seconds,
// and endpoints change every few), so comparing whole digests would send
// nearly every read through the entry-by-entry fold, in the loop, while a
// change waits (issue 12); this costs a lookup per touched key.
func (r *Reconciler) tableAgrees(rd *driftRead, touched plan.Scope) bool {
	read, cached := rd.table, r.table
	for k := range touched.Keys {
		if part, ok := rd.vsPart(k); ok {
			read.remove(part)
		}
		if svc, ok := r.observed.Services[k]; ok {
			cached.countService(svc, -1)
		}
	}
	return read == cached
}

// setsAgree is tableAgrees for the set members.
func (r *Reconciler) setsAgree(rd *driftRead, touched plan.Scope) bool {
	read, cached := rd.sets, r.sets
	for e := range touched.Sets {
		if rd.hasMember(e) {
			read.count(memberHash(e), -1)
		}
		if _, ok := r.observed.Sets[e]; ok {
			cached.count(memberHash(e), -1)
		}
	}
	return read == cached
}

// foldTable folds the read's virtual servers one by one.
func (r *Reconciler) foldTable(rd *driftRead, touched, scope plan.Scope) int {
	drifted := 0
	read := rd.obs.State.Services
	cached, matched := len(r.observed.Services), 0
	for k := range read {
		if _, ok := r.observed.Services[k]; ok {
			matched++
		}
		if r.adoptIfUntouched(k, rd.obs, touched, scope) {
			drifted++
		}
	}
	// Every cached one the read also holds: none can be missing from it,
	// and the fold walks the table once, not twice.
	if matched < cached {
		for k := range r.observed.Services {
			if _, ok := read[k]; !ok && r.adoptIfUntouched(k, rd.obs, touched, scope) {
				drifted++
			}
		}
	}
	return drifted
}

// adoptIfUntouched adopts the read's virtual server k unless a sync
// changed it during the read, and tells whether it differed.
func (r *Reconciler) adoptIfUntouched(k model.VSKey, obs dataplane.Observation, touched, scope plan.Scope) bool {
	if _, ok := touched.Keys[k]; ok {
		return false
	}
	if !r.adopt(k, obs) {
		return false
	}
	scope.Keys[k] = struct{}{}
	return true
}

// adopt makes the cached virtual server k and its counters the read's,
// when they differ, and tells whether they did.
func (r *Reconciler) adopt(k model.VSKey, obs dataplane.Observation) bool {
	have, inKernel := obs.State.Services[k]
	cached, inCache := r.observed.Services[k]
	if inKernel == inCache && (!inKernel || have.Equal(cached)) {
		return false
	}
	if inCache {
		r.table.countService(cached, -1)
		for _, rs := range cached.Reals.All() {
			delete(r.conns, dataplane.RealRef{VS: k, RS: rs.Addr})
		}
	}
	if !inKernel {
		delete(r.observed.Services, k)
		return true
	}
	r.table.countService(have, 1)
	r.observed.Services[k] = have
	for _, rs := range have.Reals.All() {
		ref := dataplane.RealRef{VS: k, RS: rs.Addr}
		r.conns[ref] = obs.Conns[ref]
	}
	return true
}

// foldSet makes the cached set agree with the read, except on what the
// syncs changed since, and adds what differed to scope.
func foldSet[K comparable](cache, read, touched, scope map[K]struct{}) int {
	n, cached, matched := 0, len(cache), 0
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
		if _, ok := cache[k]; ok {
			matched++
		} else {
			fix(k, true)
		}
	}
	if matched == cached {
		return n // each cached one is in the read: none is missing from it
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

// DriftChecker reads the whole kernel once per Period, beside the syncs:
// every virtual server with its real servers, the link's addresses, the
// set members, and whether the netfilter rules are in place. So anything
// changed by someone else is read within one Period and two reads' time
// (the read under way may have missed it), and repaired by the sync that
// follows (MinInterval later at most), or one Period and a read later if
// the agent itself changed the same thing while the kernel was being read.
type DriftChecker struct {
	Rec    *Reconciler
	Reader dataplane.Reader // its own sockets: never the sync's
	Period time.Duration
	Log    *zap.Logger

	// lastVS and lastMembers size the next scan as the last found the
	// kernel.
	lastVS, lastMembers int
	// spent is how long the last read spent reading, its whole read after
	// a scan included.
	spent time.Duration
}

// readShare bounds the time the checker spends reading: after a read that
// took t it waits at least readShare × t, so that at most about 1/readShare
// of a CPU goes to finding drift however large the table. At 10,000
// Services × 10 endpoints a whole read takes seconds under emulation: read
// every 30 s it was most of the agent's idle cost, and at a twentieth of a
// CPU it still cost three times what kube-proxy's nftables mode spends at
// rest (issue 12). A hundredth keeps the drift check below that, and
// repairs within 101 reads' time, which is still well inside the hour
// nftables mode takes to rewrite what someone else changed (its full
// sync). A read under slowRead costs little however often it comes (a
// small table, or the rules check's iptables-save on a slow machine):
// it waits fastReadShare × t, so that a short --ipvs-sync-period still
// repairs within seconds. A table that reads in under Period/readShare
// keeps the Period.
const (
	readShare     = 100
	fastReadShare = 20
	slowRead      = time.Second
)

// Run reads the kernel every Period until ctx ends, the first time as soon
// as the first sync has ended: that read finds at once anything that
// fought the start (another tool still programming the table during a
// migration), and learns what a read of this kernel costs before the agent
// is at rest, so that the budget spaces the reads after it (at 10,000
// Services the first read Period after the start was the largest cost of
// the agent's first idle minute, issue 12). A read
// starts Period after the one before it was folded, or readShare times
// the last read's time if that is longer (reading and checking the rules
// only: not the wait for the sync loop to fold it, which is the minimum
// sync interval's, not the kernel's), so that reads never pile up and
// a kernel slow to read costs a bounded share of a CPU; the bound
// stretches with the read.
func (d *DriftChecker) Run(ctx context.Context) {
	if !d.waitFirstSync(ctx) {
		return
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		d.read(ctx)
		took := d.spent
		next := d.pause(took)
		if next > d.Period {
			d.log().Info("drift check: the next read waits longer than the sync period, the kernel being slow to read",
				zap.Duration("took", took), zap.Duration("period", d.Period), zap.Duration("next", next))
		}
		timer.Reset(next)
	}
}

// pause is how long the checker waits after a read that took took.
func (d *DriftChecker) pause(took time.Duration) time.Duration {
	if took < slowRead {
		return max(d.Period, fastReadShare*took)
	}
	return max(d.Period, readShare*took)
}

// waitFirstSync waits until a sync has ended; false if ctx ended first.
func (d *DriftChecker) waitFirstSync(ctx context.Context) bool {
	tick := time.NewTicker(max(d.Period/30, 10*time.Millisecond))
	defer tick.Stop()
	for d.Rec.View().Last.Time.IsZero() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

// read reads the kernel, hands the read to the sync loop and waits until
// it is folded. It scans first: when the kernel agrees with the cache (the
// common case by far) that is all, and nothing of it was copied. When the
// fold found the scan's digests differ, it reads the kernel whole at once
// and hands that, which the fold compares entry by entry. It returns the
// last read, nil if one failed (a doubtful read is dropped: it never
// drives a repair, let alone a prune).
func (d *DriftChecker) read(ctx context.Context) *driftRead {
	d.spent = 0
	rd := d.readOnce(ctx, d.scan)
	if rd == nil || ctx.Err() != nil || !rd.wantWhole {
		return rd // (ended before the fold: wantWhole is not to be read)
	}
	d.log().Info("drift check: the kernel differs from what the agent holds; reading it whole to repair it")
	return d.readOnce(ctx, d.observe)
}

// readOnce makes one read with take, checks the rules, hands the read to
// the sync loop and waits until it is folded.
func (d *DriftChecker) readOnce(ctx context.Context, take func(context.Context) (*driftRead, error)) *driftRead {
	m := d.Rec.drift
	cfg := m.begin()
	began := time.Now()
	rd, err := take(ctx)
	read := time.Since(began)
	if err == nil && cfg != nil {
		var ok bool
		ok, err = d.Reader.ShimInPlace(ctx, *cfg)
		rd.rulesMissing = !ok
	}
	d.spent += time.Since(began)
	d.log().Log(logv.V(logv.Sync), "drift check read the kernel", zap.Bool("whole", err == nil && rd.scan == nil),
		zap.Duration("table", read), zap.Duration("rules", time.Since(began)-read))
	if err != nil {
		m.abort()
		if ctx.Err() == nil {
			d.log().Warn("drift check: read the kernel", zap.Error(err))
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

// observe reads the kernel whole, with the digests of its table and sets.
func (d *DriftChecker) observe(ctx context.Context) (*driftRead, error) {
	obs, err := d.Reader.Observe(ctx)
	if err != nil {
		return nil, err
	}
	return &driftRead{obs: obs, sets: membersDigest(obs.State.Sets), table: tableDigest(obs.State.Services),
		done: make(chan struct{})}, nil
}

// scan reads the kernel into digests, keeping only what the fold needs to
// take the syncs' changes out of them, and the link's addresses.
func (d *DriftChecker) scan(ctx context.Context) (*driftRead, error) {
	sc := &scanned{perVS: make(map[model.VSKey]digest, d.lastVS), members: make([]uint64, 0, d.lastMembers)}
	rd := &driftRead{obs: dataplane.Observation{State: model.State{Addrs: map[netip.Addr]struct{}{}}}, scan: sc,
		done: make(chan struct{})}
	count := func(k model.VSKey, h uint64) {
		rd.table.count(h, 1)
		part := sc.perVS[k]
		part.count(h, 1)
		sc.perVS[k] = part
	}
	err := d.Reader.Scan(ctx, dataplane.Visitor{
		Service: func(vs model.VirtualServer) { count(vs.Key, vsHash(vs)) },
		Real:    func(k model.VSKey, rs model.RealServer) { count(k, realHash(k, rs)) },
		Addr:    func(a netip.Addr) { rd.obs.State.Addrs[a] = struct{}{} },
		Member: func(e model.SetEntry) {
			h := memberHash(e)
			rd.sets.count(h, 1)
			sc.members = append(sc.members, h)
		},
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(sc.members)
	d.lastVS, d.lastMembers = len(sc.perVS), len(sc.members)
	return rd, nil
}

func (d *DriftChecker) log() *zap.Logger {
	if d.Log == nil {
		return zap.NewNop()
	}
	return d.Log
}
