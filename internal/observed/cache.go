// Package observed is the agent's copy of the kernel's state (the observed
// cache) and its only writer: the operations applied to the kernel and the
// reads of the kernel are folded into it here, and nowhere else. It keeps
// the digests of its IPVS table and set members in step with every write,
// copies a virtual server before it changes one it may have handed out
// (callers never copy), and gives every key a revision so that a read of
// the kernel made beside the writes folds only what no write changed since
// the read began.
package observed

import (
	"maps"
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Cache is the observed state. It is written from one goroutine (the sync
// loop's); Begin and Drop, which open and close a read of the kernel, are
// safe from any.
//
// What its readers get is shared, never copied: the maps of State and the
// services of State and Service are the cache's, to read and not to
// change. A service once handed out is never changed in place afterwards:
// the next write to it replaces it with a changed copy. The services the
// cache made or copied since it last handed them out are changed in
// place, so a cold start that adds a virtual server and then its real
// servers copies nothing.
type Cache struct {
	state model.State
	// conns are the counters of the real servers held, by virtual server:
	// a read of one virtual server's counters is taken over whole when it
	// covers exactly the real servers held (NoteConns).
	conns map[model.VSKey]map[netip.AddrPort]model.Conns
	// table and sets digest state.Services and state.Sets.
	table, sets Digest
	// owned holds, for each service the cache may change in place, the
	// generation it was made or copied in; handing out the whole state
	// starts a new generation, so that none is owned any more.
	owned map[model.VSKey]uint64
	gen   uint64
	revs  revisions
}

// New returns an empty cache.
func New() *Cache {
	c := &Cache{state: model.NewState(), conns: map[model.VSKey]map[netip.AddrPort]model.Conns{}, owned: map[model.VSKey]uint64{}, gen: 1}
	c.revs.reset()
	return c
}

// Load makes a whole read of the kernel, made by the sync loop itself, the
// cache. Every read begun before it is stale from now on (Fold drops it).
func (c *Cache) Load(obs dataplane.Observation) {
	c.state, c.conns = obs.State, map[model.VSKey]map[netip.AddrPort]model.Conns{}
	for ref, n := range obs.Conns {
		c.setConn(ref, n)
	}
	c.sets, c.table = MembersDigest(c.state.Sets), TableDigest(c.state.Services)
	c.gen++
	clear(c.owned)
	c.revs.load()
}

// Reserve sizes the cache's maps for what is about to be applied when it
// holds next to nothing of it (a cold start, which fills it from empty or
// from the few entries served first): maps grown from empty to 10,000
// virtual servers and 130,000 set members rehash a dozen times.
func (c *Cache) Reserve(services, addrs, sets int) {
	held := len(c.state.Services) + len(c.state.Addrs) + len(c.state.Sets)
	if held*reserveShare >= services+addrs+sets {
		return
	}
	sized := model.SizedState(services, addrs, sets)
	maps.Copy(sized.Services, c.state.Services)
	maps.Copy(sized.Addrs, c.state.Addrs)
	maps.Copy(sized.Sets, c.state.Sets)
	c.state = sized
}

// reserveShare: Reserve sizes a cache holding under 1/reserveShare of what
// is coming; one that holds more (a sync's few changes, or a table whose
// adds keep failing) is not copied again.
const reserveShare = 16

// State is the whole observed state, to read: its maps and services are
// the cache's and must not be changed. The maps change with the next
// write; a service in them never does (see Cache).
func (c *Cache) State() model.State {
	c.gen++
	return c.state
}

// Service is the observed virtual server k, to read (see Cache).
func (c *Cache) Service(k model.VSKey) (*model.Service, bool) {
	svc, ok := c.state.Services[k]
	if ok {
		delete(c.owned, k)
	}
	return svc, ok
}

// HasMember tells whether e is in its set.
func (c *Cache) HasMember(e model.SetEntry) bool {
	_, ok := c.state.Sets[e]
	return ok
}

// Conns lists the connection counters of the real servers the cache
// holds, in a map of its own: it walks them all (Conn reads one).
func (c *Cache) Conns() map[dataplane.RealRef]model.Conns {
	out := map[dataplane.RealRef]model.Conns{}
	for k, m := range c.conns {
		for rs, n := range m {
			if ref := (dataplane.RealRef{VS: k, RS: rs}); c.holds(ref) {
				out[ref] = n
			}
		}
	}
	return out
}

// Conn is one real server's connection counters, if known.
func (c *Cache) Conn(ref dataplane.RealRef) (model.Conns, bool) {
	n, ok := c.conns[ref.VS][ref.RS]
	if !ok || !c.holds(ref) {
		return model.Conns{}, false
	}
	return n, true
}

// holds tells whether the cache holds the real server ref.
func (c *Cache) holds(ref dataplane.RealRef) bool {
	svc, ok := c.state.Services[ref.VS]
	return ok && svc.Reals.Has(ref.RS)
}

func (c *Cache) setConn(ref dataplane.RealRef, n model.Conns) {
	m := c.conns[ref.VS]
	if m == nil {
		m = map[netip.AddrPort]model.Conns{}
		c.conns[ref.VS] = m
	}
	m[ref.RS] = n
}

func (c *Cache) forgetConn(ref dataplane.RealRef) {
	m := c.conns[ref.VS]
	delete(m, ref.RS)
	if len(m) == 0 {
		delete(c.conns, ref.VS)
	}
}

// NoteConns records counters read for virtual server k, a read of all its
// real servers, taken over as it is: the caller must not use it after.
// The kernel may hold real servers the cache does not (someone else's);
// their counters are kept but never answered (Conn and Conns answer for
// the real servers held), so a read is not checked against the cache
// real server by real server. The next read of k replaces it whole, so
// what it holds is bounded by what the kernel held.
func (c *Cache) NoteConns(k model.VSKey, conns map[netip.AddrPort]model.Conns) {
	if _, ok := c.state.Services[k]; !ok {
		return
	}
	if len(conns) == 0 {
		delete(c.conns, k)
		return
	}
	c.conns[k] = conns
}

// Apply folds one operation the kernel accepted into the cache: the
// state, the digests, the connection counters and the key's revision.
// want is the desired virtual server of the operation's key (nil: none):
// a virtual server's real servers are sized as it lists them at the first
// one added, and once the kernel holds exactly want the cache holds want
// itself rather than a second copy (want is never changed by the cache).
func (c *Cache) Apply(op model.Op, want *model.Service) {
	if c.revs.write(op, c.state.Services[op.VS.Key], true) {
		delete(c.owned, op.VS.Key) // the log's base: never changed
	}
	c.own(op)
	switch op.Target() {
	case model.TargetMember:
		c.sumMember(op)
	case model.TargetAddr:
	default:
		c.sumTable(op)
	}
	if op.Kind == model.AddReal {
		c.sizeReals(op.VS.Key, want)
	}
	c.forgetConns(op)
	op.ApplyTo(&c.state)
	if op.Kind == model.AddReal || op.Kind == model.UpdateReal || op.Kind == model.AddService {
		c.shareIfDone(op.VS.Key, want)
	}
}

// ApplyAll folds operations the kernel accepted, in order, as Apply would
// one by one; want holds the desired virtual servers (nil: none).
// A run of real-server operations on one virtual server in increasing
// order of address (a plan's) changes its list in one pass
// (model.Reals.Merge): one by one, each would shift the list, a cost of
// the virtual server's size per real server added or removed.
func (c *Cache) ApplyAll(ops []model.Op, want map[model.VSKey]*model.Service) {
	for len(ops) > 0 {
		n := realRun(ops)
		if n < 2 {
			c.Apply(ops[0], want[ops[0].VS.Key])
			ops = ops[1:]
			continue
		}
		c.applyReals(ops[:n], want[ops[0].VS.Key])
		ops = ops[n:]
	}
}

// realRun is how many of the first operations are real-server operations
// on one virtual server with increasing addresses.
func realRun(ops []model.Op) int {
	n := 0
	for n < len(ops) && onReal(ops[n].Kind) && ops[n].VS.Key == ops[0].VS.Key &&
		(n == 0 || ops[n-1].RS.Addr.Compare(ops[n].RS.Addr) < 0) {
		n++
	}
	return n
}

func onReal(k model.OpKind) bool {
	return k == model.AddReal || k == model.UpdateReal || k == model.DeleteReal
}

// applyReals is Apply for a run of realRun: the bookkeeping of each
// operation is Apply's (its addresses being distinct, each sees the real
// server it changes as it was), and the list changes once at the end.
func (c *Cache) applyReals(run []model.Op, want *model.Service) {
	k := run[0].VS.Key
	for _, op := range run {
		if c.revs.write(op, c.state.Services[k], true) {
			delete(c.owned, k)
		}
		c.own(op)
		c.sumTable(op)
		if op.Kind == model.AddReal {
			c.sizeReals(k, want)
		}
		c.forgetConns(op)
	}
	svc, ok := c.state.Services[k]
	if !ok {
		return
	}
	svc.Reals.Merge(run)
	c.shareIfDone(k, want)
}

// Tried records an operation that failed: the kernel may or may not have
// made it, so a read begun before it is not trusted on its key either.
func (c *Cache) Tried(op model.Op) {
	if c.revs.write(op, c.state.Services[op.VS.Key], false) {
		delete(c.owned, op.VS.Key)
	}
}

// Share makes the cache hold want itself for virtual server k where the
// kernel holds exactly that, rather than a copy: from then on the two
// differ only where a sync could not bring the kernel in step.
func (c *Cache) Share(k model.VSKey, want *model.Service) {
	if have, ok := c.state.Services[k]; ok && want != nil && have != want && have.Equal(want) {
		c.state.Services[k] = want
		delete(c.owned, k)
	}
}

// shareIfDone shares want as soon as an operation leaves the kernel's copy
// equal to it, rather than at the end of the sync: a cold start adds
// 10,000 virtual servers before their real servers, and would hold their
// copies whole until its plan is done. Equality is checked only when the
// counts match, so a large virtual server is compared once, not at each
// real server.
func (c *Cache) shareIfDone(k model.VSKey, want *model.Service) {
	if have, ok := c.state.Services[k]; ok && want != nil && have.Reals.Len() == want.Reals.Len() {
		c.Share(k, want)
	}
}

// own copies the virtual server op is about to change unless the cache
// owns it (see Cache); a virtual server created is owned.
func (c *Cache) own(op model.Op) {
	k := op.VS.Key
	switch op.Kind {
	case model.AddService:
		c.owned[k] = c.gen
	case model.DeleteService:
		delete(c.owned, k)
	case model.UpdateService, model.AddReal, model.UpdateReal, model.DeleteReal:
		if svc, ok := c.state.Services[k]; ok && c.owned[k] != c.gen {
			c.state.Services[k] = svc.Clone()
			c.owned[k] = c.gen
		}
	}
}

// sizeReals sizes the real servers of virtual server k as want lists
// them, at the first one added: the rest follow in the same plan. Sized at
// the first real server rather than at the create, so that a cold start
// does not hold 10,000 sized lists at once.
func (c *Cache) sizeReals(k model.VSKey, want *model.Service) {
	if have, ok := c.state.Services[k]; ok && have.Reals.Len() == 0 && want != nil && want.Reals.Len() > 1 {
		have.Reals.Grow(want.Reals.Len())
	}
}

// sumMember counts a set member's add or delete, before it is applied.
func (c *Cache) sumMember(op model.Op) {
	held := c.HasMember(op.Entry)
	switch {
	case op.Kind == model.AddSetEntry && !held:
		c.sets.count(MemberHash(op.Entry), 1)
	case op.Kind == model.DeleteSetEntry && held:
		c.sets.count(MemberHash(op.Entry), -1)
	}
}

// sumTable counts a change to the IPVS table, before it is applied.
func (c *Cache) sumTable(op model.Op) {
	k := op.VS.Key
	svc, ok := c.state.Services[k]
	switch op.Kind {
	case model.AddService:
		if ok {
			c.table.countService(svc, -1) // replaced whole
		}
		c.table.count(VSHash(op.VS), 1)
	case model.DeleteService:
		if ok {
			c.table.countService(svc, -1)
		}
	case model.UpdateService:
		if ok {
			c.table.count(VSHash(svc.VirtualServer), -1)
			c.table.count(VSHash(op.VS), 1)
		}
	case model.AddReal, model.UpdateReal, model.DeleteReal:
		if !ok {
			return
		}
		if old, held := svc.Reals.Get(op.RS.Addr); held {
			c.table.count(RealHash(k, old), -1)
		}
		if op.Kind != model.DeleteReal {
			c.table.count(RealHash(k, op.RS), 1)
		}
	}
}

// forgetConns drops the counters of the real servers an operation removes
// from the kernel or adds to it: a real server deleted or added, or every
// one of a virtual server deleted or replaced whole. Otherwise every endpoint a rollout replaced
// would keep an entry until a full sync, which a healthy agent never runs.
func (c *Cache) forgetConns(op model.Op) {
	k := op.VS.Key
	switch op.Kind {
	case model.DeleteReal, model.AddReal:
		// A counter read before an add was not this real server's.
		c.forgetConn(dataplane.RealRef{VS: k, RS: op.RS.Addr})
	case model.AddService, model.DeleteService:
		delete(c.conns, k)
	}
}

// Digests are the cache's digests of its IPVS table and its set members,
// which every write keeps those of its state (a test's invariant).
func (c *Cache) Digests() (table, sets Digest) { return c.table, c.sets }
