package observed

import (
	"net/netip"
	"sync"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Revision counts the cache's writes. Every write to a key (a virtual
// server, a bound address, a set member) gives it the next revision; a
// read of the kernel records the revision it began at (Begin), and its
// fold skips exactly the keys whose revision moved past that: the cache is
// newer there than the read.
//
// The kernel accepts an operation before the cache folds it, so a write
// whose revision is at most a read's began in the kernel before the read
// did, and the read holds it.
type Revision uint64

// revisions are the keys' revisions. Only the revisions that a read open
// now could compare with are kept: with no read open every write is older
// than any read to come, and the maps are let go of.
type revisions struct {
	mu    sync.Mutex
	now   Revision
	floor Revision // the last Load's: reads begun before it are stale
	open  int      // reads begun and not yet folded or dropped
	moved keys
}

// keys are some virtual servers, addresses and set members, each with a
// revision.
type keys struct {
	vs    map[model.VSKey]Revision
	addrs map[netip.Addr]Revision
	sets  map[model.SetEntry]Revision
}

func newKeys() keys {
	return keys{vs: map[model.VSKey]Revision{}, addrs: map[netip.Addr]Revision{}, sets: map[model.SetEntry]Revision{}}
}

func (r *revisions) reset() { r.moved = newKeys() }

// Begin opens a read of the kernel and returns the revision it begins at.
// Every Begin is closed by one Fold or Drop. Safe from any goroutine.
func (c *Cache) Begin() Revision {
	r := &c.revs
	r.mu.Lock()
	defer r.mu.Unlock()
	r.open++
	return r.now
}

// Drop closes a read that will not be folded (it failed, or a whole read
// made it stale). Safe from any goroutine.
func (c *Cache) Drop() {
	r := &c.revs
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open > 0 {
		r.open--
	}
	if r.open == 0 && (len(r.moved.vs) > 0 || len(r.moved.addrs) > 0 || len(r.moved.sets) > 0) {
		r.reset()
	}
}

// load makes every read open now stale.
func (r *revisions) load() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now++
	r.floor = r.now
}

// touch gives the keys op writes the next revision.
func (r *revisions) touch(op model.Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now++
	if r.open == 0 {
		return
	}
	switch op.Kind {
	case model.BindAddr, model.UnbindAddr:
		r.moved.addrs[op.Addr] = r.now
	case model.AddSetEntry, model.DeleteSetEntry:
		r.moved.sets[op.Entry] = r.now
	default:
		r.moved.vs[op.VS.Key] = r.now
	}
}

// touchKey is touch for the fold's own writes.
func touchKey[K comparable](r *revisions, m func(*keys) map[K]Revision, k K) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now++
	if r.open > 0 {
		m(&r.moved)[k] = r.now
	}
}

// since copies out the keys written after rev, and tells whether a Load
// came after it (then the read is stale and nothing else matters).
func (r *revisions) since(rev Revision) (keys, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rev < r.floor {
		return keys{}, true
	}
	out := newKeys()
	copyAfter(out.vs, r.moved.vs, rev)
	copyAfter(out.addrs, r.moved.addrs, rev)
	copyAfter(out.sets, r.moved.sets, rev)
	return out, false
}

func copyAfter[K comparable](dst, src map[K]Revision, rev Revision) {
	for k, v := range src {
		if v > rev {
			dst[k] = v
		}
	}
}
