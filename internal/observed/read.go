package observed

import (
	"net/netip"
	"slices"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
)

// Read is the kernel as a read beside the syncs found it: whole (every
// virtual server, address and set member, with the connection counters),
// or a scan (digests of the table and the sets, what a fold needs to take
// the cache's later writes out of them, and the link's addresses).
type Read struct {
	// Since is the cache's revision when the read began (Cache.Begin).
	Since Revision
	// State is the whole read; a scan's holds the link's addresses alone
	// (a fold compares those one by one, there are few).
	State model.State
	Conns map[dataplane.RealRef]model.Conns
	// table and sets digest the read's IPVS table and set members, taken
	// off the sync loop.
	table, sets Digest
	// perVS and members are what a scan keeps beside its digests: each
	// virtual server's part of the table digest and every member's hash,
	// sorted: a few integers per virtual server and member rather than a
	// copy of the table. nil for a whole read.
	perVS   map[model.VSKey]Digest
	members []uint64
	// partial: the read is of the link's addresses alone (State.Addrs),
	// or of nothing the cache holds (State.Addrs nil).
	partial bool
}

// AddrsRead is a read of the link's addresses alone (nil: none read, as a
// check of the rules alone), begun at since: its fold compares those and
// leaves the table and the set members as the cache holds them. It is
// what the rescan reads when the kernel announced the addresses changed.
func AddrsRead(since Revision, addrs map[netip.Addr]struct{}) *Read {
	return &Read{Since: since, State: model.State{Addrs: addrs}, partial: true}
}

// WholeRead is a whole read of the kernel, begun at since.
func WholeRead(since Revision, obs dataplane.Observation) *Read {
	if obs.State.Addrs == nil { // none bound, not none read: compared
		obs.State.Addrs = map[netip.Addr]struct{}{}
	}
	return &Read{Since: since, State: obs.State, Conns: obs.Conns,
		sets: MembersDigest(obs.State.Sets), table: TableDigest(obs.State.Services)}
}

// Partial tells whether the read is of the link's addresses alone, or of
// nothing the cache holds (AddrsRead).
func (rd *Read) Partial() bool { return rd.partial }

// Scanned tells whether the read is a scan, and how many virtual servers
// and member hashes it kept.
func (rd *Read) Scanned() (scan bool, services, members int) {
	return rd.perVS != nil, len(rd.perVS), len(rd.members)
}

// Scan builds a scan of the kernel from what a dataplane.Reader's Scan
// visits.
type Scan struct {
	rd *Read
	// cur's part of the table digest, summed aside while open.
	cur  model.VSKey
	part Digest
	open bool
}

// NewScan starts a scan begun at since, sized for services virtual
// servers and members set members.
func NewScan(since Revision, services, members int) *Scan {
	return &Scan{rd: &Read{Since: since, State: model.State{Addrs: map[netip.Addr]struct{}{}},
		perVS: make(map[model.VSKey]Digest, services), members: make([]uint64, 0, members)}}
}

// WithoutAddrs leaves the link's addresses out of the scan, for a reader
// that follows their announcements instead: the fold then compares none.
func (s *Scan) WithoutAddrs() *Scan {
	s.rd.State.Addrs = nil
	return s
}

// Visitor is what the reader hands each entry to. A reader hands a virtual
// server's real servers after it, one after the other: their part of the
// digest is summed aside and stored once per virtual server rather than
// once per entry (any order still counts right).
func (s *Scan) Visitor() dataplane.Visitor {
	rd := s.rd
	count := func(k model.VSKey, h uint64) {
		rd.table.count(h, 1)
		if !s.open || k != s.cur {
			s.flush()
			s.cur, s.part, s.open = k, rd.perVS[k], true
		}
		s.part.count(h, 1)
	}
	v := dataplane.Visitor{
		Service: func(vs model.VirtualServer) { count(vs.Key, VSHash(vs)) },
		Real:    func(k model.VSKey, rs model.RealServer) { count(k, RealHash(k, rs)) },
		Member: func(e model.SetEntry) {
			h := MemberHash(e)
			rd.sets.count(h, 1)
			rd.members = append(rd.members, h)
		},
	}
	if rd.State.Addrs != nil {
		v.Addr = func(a netip.Addr) { rd.State.Addrs[a] = struct{}{} }
	}
	return v
}

// flush stores the part summed aside.
func (s *Scan) flush() {
	if s.open {
		s.rd.perVS[s.cur] = s.part
		s.open = false
	}
}

// Read is the finished scan.
func (s *Scan) Read() *Read {
	s.flush()
	slices.Sort(s.rd.members)
	return s.rd
}

// vsPart is the read's digest of virtual server k and its real servers.
func (rd *Read) vsPart(k model.VSKey) (Digest, bool) {
	if rd.perVS != nil {
		d, ok := rd.perVS[k]
		return d, ok
	}
	svc, ok := rd.State.Services[k]
	if !ok {
		return Digest{}, false
	}
	return serviceDigest(svc), true
}

// hasMember tells whether the read holds member e.
func (rd *Read) hasMember(e model.SetEntry) bool {
	if rd.perVS != nil {
		_, ok := slices.BinarySearch(rd.members, MemberHash(e))
		return ok
	}
	_, ok := rd.State.Sets[e]
	return ok
}

// Folded is what a Fold did.
type Folded struct {
	// Stale: the cache was loaded whole since the read began; nothing
	// was folded.
	Stale bool
	// Whole: a scan's digests differ from the cache's on what no write
	// changed since it began, or hold a virtual server written since as
	// no write left it. A scan tells that something differs, not what: a
	// whole read is wanted, and only the addresses were folded.
	Whole bool
	// Drifted counts the virtual servers, addresses and set members that
	// differed and were folded.
	Drifted int
}

// Fold folds a read of the kernel and closes it (see Begin): every virtual
// server, address and set member whose revision did not move since the
// read began and that differs from the cache becomes the read's, and joins
// scope, so that the sync repairs what someone else changed. What agrees
// costs a comparison and no more: the virtual servers and the set members
// are compared one by one only when the digests of the read and the cache
// differ on what did not move.
//
// A virtual server the cache wrote since the read began is not skipped
// but rebased: the operations written since are replayed onto what the
// read found, and what that yields is compared with the cache. So drift
// on a virtual server the syncs keep writing (a busy Service, whose
// endpoints change during every read) is repaired all the same. Only one
// written with an operation that failed (which the kernel may or may not
// have made) waits for a read that nothing writes it during.
func (c *Cache) Fold(rd *Read, scope plan.Scope) Folded {
	defer c.Drop()
	moved, logs, stale := c.revs.since(rd.Since)
	if stale {
		return Folded{Stale: true}
	}
	var f Folded
	if rd.partial {
		if rd.State.Addrs != nil {
			f.Drifted += c.foldAddrs(rd, moved, scope)
		}
		return f
	}
	tableOK, setsOK := c.tableAgrees(rd, moved), c.setsAgree(rd, moved)
	if rd.perVS != nil && (!tableOK || !setsOK || !c.scanExplained(rd, logs)) {
		f.Whole = true
		tableOK, setsOK = true, true
	}
	if !tableOK {
		f.Drifted += c.foldTable(rd, moved, scope)
	}
	if rd.perVS == nil {
		f.Drifted += c.foldRebased(rd, logs, scope)
	}
	if rd.State.Addrs != nil { // nil: a scan that left them out
		f.Drifted += c.foldAddrs(rd, moved, scope)
	}
	if !setsOK {
		f.Drifted += foldSet(c, c.state.Sets, rd.State.Sets, moved.sets, scope.Sets, func(k *keys) map[model.SetEntry]Revision { return k.sets })
		c.sets = MembersDigest(c.state.Sets)
	}
	return f
}

// foldAddrs folds the read's addresses one by one: there are few.
func (c *Cache) foldAddrs(rd *Read, moved keys, scope plan.Scope) int {
	return foldSet(c, c.state.Addrs, rd.State.Addrs, moved.addrs, scope.Addrs, func(k *keys) map[netip.Addr]Revision { return k.addrs })
}

// scanExplained tells whether the scan's digest of every virtual server
// written since it began is one the cache's writes explain (vsLog.explains).
func (c *Cache) scanExplained(rd *Read, logs map[model.VSKey]*vsLog) bool {
	for k, l := range logs {
		if !l.replayable(rd.Since) {
			continue
		}
		part, in := rd.perVS[k]
		if !l.explains(rd.Since, part, in) {
			return false
		}
	}
	return true
}

// foldRebased folds the virtual servers written since the whole read rd
// began, rebased (vsLog.rebase), and tells how many differed.
func (c *Cache) foldRebased(rd *Read, logs map[model.VSKey]*vsLog, scope plan.Scope) int {
	drifted := 0
	for k, l := range logs {
		if !l.replayable(rd.Since) {
			continue
		}
		rebased := l.rebase(rd.Since, rd.State.Services[k])
		if c.adoptValue(k, rebased, rd.Conns, false) {
			scope.Keys[k] = struct{}{}
			drifted++
		}
	}
	return drifted
}

// tableAgrees tells whether the read's virtual servers agree with the
// cache's on every key that did not move: the digests of both, less what
// each holds of the moved keys. A read overlaps the writes of its time (at
// 10,000 Services it takes seconds, and endpoints change every few), so
// comparing whole digests would send nearly every read through the
// entry-by-entry fold, in the sync loop, while a change waits; this costs a
// lookup per moved key.
func (c *Cache) tableAgrees(rd *Read, moved keys) bool {
	read, cached := rd.table, c.table
	for k := range moved.vs {
		if part, ok := rd.vsPart(k); ok {
			read.remove(part)
		}
		if svc, ok := c.state.Services[k]; ok {
			cached.countService(svc, -1)
		}
	}
	return read == cached
}

// setsAgree is tableAgrees for the set members.
func (c *Cache) setsAgree(rd *Read, moved keys) bool {
	read, cached := rd.sets, c.sets
	for e := range moved.sets {
		if rd.hasMember(e) {
			read.count(MemberHash(e), -1)
		}
		if c.HasMember(e) {
			cached.count(MemberHash(e), -1)
		}
	}
	return read == cached
}

// foldTable folds the read's virtual servers one by one.
func (c *Cache) foldTable(rd *Read, moved keys, scope plan.Scope) int {
	drifted := 0
	read := rd.State.Services
	cached, matched := len(c.state.Services), 0
	fold := func(k model.VSKey) {
		if _, ok := moved.vs[k]; ok || !c.adopt(k, rd) {
			return
		}
		scope.Keys[k] = struct{}{}
		drifted++
	}
	for k := range read {
		if _, ok := c.state.Services[k]; ok {
			matched++
		}
		fold(k)
	}
	// Every cached one the read also holds: none can be missing from it,
	// and the fold walks the table once, not twice.
	if matched < cached {
		for k := range c.state.Services {
			if _, ok := read[k]; !ok {
				fold(k)
			}
		}
	}
	return drifted
}

// adopt makes the cached virtual server k and its counters the read's,
// when they differ, and tells whether they did. The read's service is
// shared, not owned: the read is let go of, but its services may be
// published.
func (c *Cache) adopt(k model.VSKey, rd *Read) bool {
	return c.adoptValue(k, rd.State.Services[k], rd.Conns, true)
}

// adoptValue makes have (nil: none) the cached virtual server k, with the
// counters conns holds for its real servers, when it differs, and tells
// whether it did. whole: conns were read with have, and a real server
// they lack has none; otherwise (a rebased value, whose replayed real
// servers the read did not see) such a real server's counters are not
// known.
func (c *Cache) adoptValue(k model.VSKey, have *model.Service, conns map[dataplane.RealRef]model.Conns, whole bool) bool {
	inKernel := have != nil
	cached, inCache := c.state.Services[k]
	if inKernel == inCache && (!inKernel || have.Equal(cached)) {
		return false
	}
	touchKey(&c.revs, func(k *keys) map[model.VSKey]Revision { return k.vs }, k)
	delete(c.owned, k)
	if inCache {
		c.table.countService(cached, -1)
		delete(c.conns, k)
	}
	if !inKernel {
		delete(c.state.Services, k)
		return true
	}
	c.table.countService(have, 1)
	c.state.Services[k] = have
	for _, rs := range have.Reals.All() {
		ref := dataplane.RealRef{VS: k, RS: rs.Addr}
		if n, ok := conns[ref]; ok || whole {
			c.setConn(ref, n)
		}
	}
	return true
}

// foldSet makes the cached set agree with the read, except on the keys
// that moved, and adds what differed to scope.
func foldSet[K comparable](c *Cache, cache, read map[K]struct{}, moved map[K]Revision, scope map[K]struct{}, revs func(*keys) map[K]Revision) int {
	n, cached, matched := 0, len(cache), 0
	fix := func(k K, in bool) {
		if _, ok := moved[k]; ok {
			return
		}
		if in {
			cache[k] = struct{}{}
		} else {
			delete(cache, k)
		}
		touchKey(&c.revs, revs, k)
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
