package fake

import (
	"context"
	"maps"
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
)

var _ dataplane.Notifier = (*Fake)(nil)

// Watch announces, as the kernel does, every change to the link's
// addresses and every write or removal of the rules, whoever made it (a
// test's Do or FlushRules as much as Apply or EnsureShim), until ctx ends.
// report is called with the fake locked: it must not call the fake. Like
// the kernel's subscriptions, it first reports the addresses changed: what
// changed before it was not announced.
func (f *Fake) Watch(ctx context.Context, report func(dataplane.Event)) {
	f.mu.Lock()
	if f.watchers == nil {
		f.watchers = map[int]func(dataplane.Event){}
	}
	id := f.nextWatcher
	f.nextWatcher++
	f.watchers[id] = report
	report(dataplane.AddrsChanged)
	f.mu.Unlock()
	<-ctx.Done()
	f.mu.Lock()
	delete(f.watchers, id)
	f.mu.Unlock()
}

// FollowsAddrs tells whether a Watch is under way: the fake announces every
// change from the moment it is.
func (f *Fake) FollowsAddrs() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.watchers) > 0
}

// announce tells every watcher of ev. The caller holds f.mu.
func (f *Fake) announce(ev dataplane.Event) {
	for _, report := range f.watchers {
		report(ev)
	}
}

// LinkAddrs returns the link's addresses alone.
func (f *Fake) LinkAddrs(ctx context.Context) (map[netip.Addr]struct{}, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "LinkAddrs", nil); err != nil {
		return nil, err
	}
	return maps.Clone(f.addrs), nil
}
