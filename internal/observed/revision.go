package observed

import (
	"net/netip"
	"sync"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Revision counts the cache's writes. Every write to a key (a virtual
// server, a bound address, a set member) gives it the next revision; a
// read of the kernel records the revision it began at (Begin), and its
// fold treats apart exactly the keys whose revision moved past that: the
// cache wrote them after the read began.
//
// The kernel accepts an operation before the cache folds it, so a write
// whose revision is at most a read's began in the kernel before the read
// did, and the read holds it.
type Revision uint64

// revisions are the keys' revisions, and what was written to each virtual
// server, while a read is open. Only what a read open now could compare
// with is kept: with no read open every write is older than any read to
// come, and it is all let go of.
type revisions struct {
	mu    sync.Mutex
	now   Revision
	floor Revision // the last Load's: reads begun before it are stale
	open  int      // reads begun and not yet folded or dropped
	moved keys
	logs  map[model.VSKey]*vsLog
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

// vsLog is what the cache wrote to one virtual server while a read was
// open: the operations the kernel accepted, in order, from the value
// before the first of them. A fold replays them onto what a read found
// (rebase), so that a virtual server the syncs keep writing (a busy
// Service) is still compared with the kernel, not skipped read after read.
type vsLog struct {
	key model.VSKey
	// base is the cached value before the first operation logged (nil:
	// none), known unless the log began with a fold's write; the cache
	// never changes it (it gave up owning it).
	base      *model.Service
	baseKnown bool
	ops       []logged
	// unsure is the revision of the last write that cannot be replayed
	// (an operation that failed, which the kernel may or may not have
	// made, or a fold's own); a read begun before it is not replayed.
	unsure Revision
}

type logged struct {
	rev Revision
	op  model.Op
}

func (r *revisions) reset() {
	r.moved = newKeys()
	r.logs = map[model.VSKey]*vsLog{}
}

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

// write gives the key op writes the next revision and, while a read is
// open, logs a virtual server's operation (sure: the kernel accepted it)
// from have, the cached value before it. It tells whether have became a
// log's base, which the cache must then never change.
func (r *revisions) write(op model.Op, have *model.Service, sure bool) (based bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now++
	if r.open == 0 {
		return false
	}
	switch op.Target() {
	case model.TargetAddr:
		r.moved.addrs[op.Addr] = r.now
		return false
	case model.TargetMember:
		r.moved.sets[op.Entry] = r.now
		return false
	}
	k := op.VS.Key
	r.moved.vs[k] = r.now
	l, ok := r.logs[k]
	if !ok {
		l = &vsLog{key: k, base: have, baseKnown: true}
		r.logs[k] = l
		based = have != nil
	}
	if sure {
		l.ops = append(l.ops, logged{rev: r.now, op: op})
	} else {
		l.unsure = r.now
	}
	return based
}

// touchKey is write for the fold's own writes, which are no operations
// of the kernel: a virtual server's log cannot be replayed past them.
func touchKey[K comparable](r *revisions, m func(*keys) map[K]Revision, k K) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now++
	if r.open == 0 {
		return
	}
	m(&r.moved)[k] = r.now
	if vs, ok := any(k).(model.VSKey); ok {
		if l, ok := r.logs[vs]; ok {
			l.unsure = r.now
		} else {
			r.logs[vs] = &vsLog{key: vs, unsure: r.now}
		}
	}
}

// since copies out the keys written after rev, with the logs of the
// virtual servers among them, and tells whether a Load came after it
// (then the read is stale and nothing else matters). The logs are only
// ever appended to by the goroutine that folds.
func (r *revisions) since(rev Revision) (keys, map[model.VSKey]*vsLog, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rev < r.floor {
		return keys{}, nil, true
	}
	out := newKeys()
	copyAfter(out.vs, r.moved.vs, rev)
	copyAfter(out.addrs, r.moved.addrs, rev)
	copyAfter(out.sets, r.moved.sets, rev)
	logs := make(map[model.VSKey]*vsLog, len(out.vs))
	for k := range out.vs {
		if l, ok := r.logs[k]; ok {
			logs[k] = l
		}
	}
	return out, logs, false
}

func copyAfter[K comparable](dst, src map[K]Revision, rev Revision) {
	for k, v := range src {
		if v > rev {
			dst[k] = v
		}
	}
}

// replayable tells whether every write after since was an operation the
// kernel accepted.
func (l *vsLog) replayable(since Revision) bool { return l != nil && l.unsure <= since }

// rebase is what read (the virtual server as a read begun at since found
// it; nil: absent) becomes with the operations written after since
// replayed onto it: the kernel as it is now, unless someone else changed
// it after the read. Each operation sets or removes a whole value, so
// replaying one the read already holds changes nothing.
func (l *vsLog) rebase(since Revision, read *model.Service) *model.Service {
	st := model.State{Services: map[model.VSKey]*model.Service{}}
	if read != nil {
		st.Services[l.key] = read.Clone()
	}
	for _, w := range l.ops {
		if w.rev > since {
			w.op.ApplyTo(&st)
		}
	}
	return st.Services[l.key]
}

// explains tells whether a scan's digest of the virtual server (part; in:
// it held one) is the value it had at the read's beginning or after one of
// the operations written since: then the scan holds no evidence of anyone
// else's change. Without a base (the log began with a fold's write) it
// cannot tell, and the scan is trusted there.
func (l *vsLog) explains(since Revision, part Digest, in bool) bool {
	if !l.baseKnown {
		return true
	}
	rp := newReplay(l.key, l.base)
	i := 0
	for ; i < len(l.ops) && l.ops[i].rev <= since; i++ {
		rp.apply(l.ops[i].op)
	}
	if rp.is(part, in) {
		return true
	}
	for ; i < len(l.ops); i++ {
		rp.apply(l.ops[i].op)
		if rp.is(part, in) {
			return true
		}
	}
	return false
}

// replay is one virtual server as a log's operations rebuild it, its
// digest kept in step operation by operation. A real server's operation
// moves the digest by that real server's hash alone, so comparing a scan
// with every value a busy virtual server took (thousands of operations
// during one scan of a Service of thousands of endpoints) costs a hash an
// operation, not a hash of every real server an operation.
type replay struct {
	key    model.VSKey
	st     model.State
	digest Digest
}

// newReplay starts from base (nil: the virtual server absent), copied.
func newReplay(key model.VSKey, base *model.Service) *replay {
	rp := &replay{key: key, st: model.State{Services: map[model.VSKey]*model.Service{}}}
	if base != nil {
		rp.st.Services[key] = base.Clone()
		rp.digest = serviceDigest(base)
	}
	return rp
}

// apply replays one operation of the virtual server.
func (rp *replay) apply(op model.Op) {
	svc, ok := rp.st.Services[rp.key]
	switch op.Kind {
	case model.AddReal, model.UpdateReal, model.DeleteReal:
		if !ok {
			return // ApplyTo does nothing either
		}
		if old, had := svc.Reals.Get(op.RS.Addr); had {
			rp.digest.count(RealHash(rp.key, old), -1)
		}
		if op.Kind != model.DeleteReal {
			rp.digest.count(RealHash(rp.key, op.RS), 1)
		}
		op.ApplyTo(&rp.st)
	default:
		// A virtual server's own operation: rare, counted afresh.
		op.ApplyTo(&rp.st)
		rp.digest = Digest{}
		if svc, ok := rp.st.Services[rp.key]; ok {
			rp.digest = serviceDigest(svc)
		}
	}
}

// is tells whether the replayed value is the one a scan digested as part
// (in: the scan held the virtual server).
func (rp *replay) is(part Digest, in bool) bool {
	_, ok := rp.st.Services[rp.key]
	return ok == in && (!ok || rp.digest == part)
}
