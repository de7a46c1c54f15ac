// Package rescan finds drift: what anyone else changed in the kernel
// (ipvsadm -D, an address deleted, a set member removed, the rules
// flushed). A Checker reads the kernel once a period on its own sockets,
// beside the syncs, and what the kernel announces changed as soon as it
// is announced, and hands each read over through a Mailbox to the sync
// loop, which folds it into the observed cache (observed.Cache.Fold) and
// repairs what differs. It only reads the kernel; it never writes it nor
// the cache, and a sync never waits for a read.
package rescan

import (
	"sync"

	"github.com/kube-ipvs/kube-ipvs/internal/observed"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// Read is one read handed over: the kernel as read, whether the netfilter
// rules were in place, and what the fold asks of the checker.
type Read struct {
	*observed.Read
	// RulesMissing: the netfilter rules were not as the shim
	// configuration last ensured has them.
	RulesMissing bool
	// WantWhole is set by the fold: a scan's digests differ from the
	// cache's, and the checker reads the kernel whole at once.
	WantWhole bool
	done      chan struct{} // closed once the sync loop folded or dropped it
}

// NewRead wraps a read of the kernel for handing over.
func NewRead(rd *observed.Read) *Read { return &Read{Read: rd, done: make(chan struct{})} }

// Done tells the checker that the sync loop is done with the read (folded
// and applied, or dropped).
func (rd *Read) Done() { close(rd.done) }

// Mailbox is where the checker and the sync loop meet; it is the only
// state both touch, with the cache's Begin and Drop.
type Mailbox struct {
	cache *observed.Cache

	mu      sync.Mutex
	pending *Read
	shim    *shim.Config // the shim configuration last ensured

	wake       chan struct{} // the sync loop's cue to sync (and so fold)
	synced     chan struct{} // closed when the first sync has ended
	syncedOnce sync.Once
}

// NewMailbox returns the mailbox of reads folded into cache.
func NewMailbox(cache *observed.Cache) *Mailbox {
	return &Mailbox{cache: cache, wake: make(chan struct{}, 1), synced: make(chan struct{})}
}

// Begin opens a read: it returns the cache's revision now, which the read
// records, and the shim configuration to check the rules against (nil:
// none ensured yet). Every Begin is followed by one Hand or Abort.
func (m *Mailbox) Begin() (*shim.Config, observed.Revision) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending != nil { // handed and never taken: superseded
		m.cache.Drop()
		m.pending.Done()
		m.pending = nil
	}
	return m.shim, m.cache.Begin()
}

// Abort closes a read that failed.
func (m *Mailbox) Abort() { m.cache.Drop() }

// Hand leaves a finished read for the sync loop and wakes it.
func (m *Mailbox) Hand(rd *Read) {
	m.mu.Lock()
	m.pending = rd
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Take hands the sync loop the finished read, if any. The sync loop folds
// it (observed.Cache.Fold) or drops it (observed.Cache.Drop), then calls
// its Done.
func (m *Mailbox) Take() *Read {
	m.mu.Lock()
	defer m.mu.Unlock()
	rd := m.pending
	m.pending = nil
	return rd
}

// Ensured records the shim configuration the rules were last written for.
func (m *Mailbox) Ensured(cfg shim.Config) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.shim = &cfg
}

// Wake is the sync loop's cue that a read waits to be folded: it should
// sync (incrementally) soon.
func (m *Mailbox) Wake() <-chan struct{} { return m.wake }

// SyncEnded tells the checker a sync has ended: it reads from then on.
func (m *Mailbox) SyncEnded() { m.syncedOnce.Do(func() { close(m.synced) }) }
