package dataplane

import (
	"context"
	"net/netip"
)

// Event is what the kernel announced changed, by anyone (the agent's own
// syncs included): the parts of the kernel to read again. Several parts
// may be set at once.
type Event uint8

const (
	// AddrsChanged: an address was added to or removed from LinkName, or
	// the announcements of such changes were lost.
	AddrsChanged Event = 1 << iota
	// RulesChanged: a rule, chain or table changed in one of the
	// iptables-nft tables the shim writes (nat, filter, mangle), or the
	// announcements of such changes were lost.
	RulesChanged
)

// Notifier is a Reader that also follows the kernel's announcements of
// changes, so that the rescan can read again at once, and only the part
// announced, what someone else changed: addresses on LinkName (rtnetlink)
// and iptables-nft rules (the nftables monitor group). The kernel announces
// nothing about the IPVS table, the ipsets' members or legacy iptables
// rules: those are left to the periodic rescan. While nothing changes, a
// Notifier costs nothing but a blocked receive.
type Notifier interface {
	Reader
	// Watch calls report with what each announcement says changed, from
	// the call until ctx ends, on its own goroutine. report must not
	// block. A subscription that breaks is renewed; what it may have missed
	// is reported as changed.
	Watch(ctx context.Context, report func(Event))
	// FollowsAddrs tells whether a Watch follows every announcement about
	// the link's addresses now: from when its subscriptions are open (it
	// then reports AddrsChanged once, for what changed before) until one
	// breaks. While it does, the periodic rescan leaves the addresses to
	// the announcements.
	FollowsAddrs() bool
	// LinkAddrs reads the addresses on LinkName alone (none when the link
	// is missing), as Observe reads them.
	LinkAddrs(ctx context.Context) (map[netip.Addr]struct{}, error)
}
