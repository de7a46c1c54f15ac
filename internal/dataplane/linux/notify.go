//go:build linux

package linux

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"time"

	mdnetlink "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
)

var _ dataplane.Notifier = (*Dataplane)(nil)

// LinkAddrs reads the link's addresses alone: one dump, on the reader's
// own sockets.
func (d *Dataplane) LinkAddrs(ctx context.Context) (map[netip.Addr]struct{}, error) {
	out := map[netip.Addr]struct{}{}
	err := d.do(ctx, "read the link's addresses", func(_ context.Context, h *handles) error {
		list, err := d.listAddrs(ctx, h)
		for _, a := range list {
			out[a] = struct{}{}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Watch follows kernel announcements until ctx ends: rtnetlink's address
// group (RTNLGRP_IPV4_IFADDR and RTNLGRP_IPV6_IFADDR), of which it reports
// the changes on the link; where VIPs are bound as local routes, its route
// group (RTNLGRP_IPV4_ROUTE and RTNLGRP_IPV6_ROUTE), of which it reports
// the changes to the agent's local routes (as AddrsChanged); and nftables'
// monitor group (NFNLGRP_NFTABLES on NETLINK_NETFILTER), of which it
// reports the changes to the tables iptables-nft keeps the shim's rules
// in. Legacy iptables announces nothing: its rules are checked by the
// periodic rescan alone. The agent's own writes are announced as well; reading
// them back finds nothing to repair.
//
// A subscription to addresses or routes, once open, reports the VIPs
// changed: what changed before it (or while a broken one was renewed) was
// not announced.
func (d *Dataplane) Watch(ctx context.Context, report func(dataplane.Event)) {
	var wg sync.WaitGroup
	wg.Go(func() { renewing(ctx, func(bool) { d.followAddrs(ctx, report) }) })
	wg.Go(func() { renewing(ctx, func(renewed bool) { d.followRules(ctx, renewed, report) }) })
	if d.localRoutes {
		wg.Go(func() { renewing(ctx, func(bool) { d.followRoutes(ctx, report) }) })
	}
	wg.Wait()
}

// FollowsAddrs tells whether Watch's subscriptions to every announcement
// of the link's VIPs are open: addresses and, where VIPs are bound as
// local routes, routes and links.
func (d *Dataplane) FollowsAddrs() bool {
	return d.addrsFollowed.Load() > 0 && (!d.localRoutes || d.routesFollowed.Load() > 0)
}

// renewing runs follow until ctx ends, again a second after it returns
// (a subscription that broke: a full socket buffer loses announcements),
// telling it whether it follows a broken one.
func renewing(ctx context.Context, follow func(renewed bool)) {
	for renewed := false; ctx.Err() == nil; renewed = true {
		follow(renewed)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// followAddrs reports every address announcement about the link until
// ctx ends or the subscription breaks. An open subscription first reports
// the addresses changed: announcements before it were not heard.
func (d *Dataplane) followAddrs(ctx context.Context, report func(dataplane.Event)) {
	updates, stop, err := subscribeAddrs(ctx, d.log, "address announcements")
	if err != nil {
		d.log.Warn("subscribe to address announcements", zap.Error(err))
		return
	}
	defer stop()
	d.addrsFollowed.Add(1)
	defer d.addrsFollowed.Add(-1)
	report(dataplane.AddrsChanged)
	link := linkIndex{name: d.linkName, known: map[int]bool{}}
	for {
		select {
		case <-ctx.Done():
			return
		case u, ok := <-updates:
			if !ok {
				return
			}
			ip, _ := netip.AddrFromSlice(u.LinkAddress.IP)
			if ip.Is6() && ip.IsLinkLocalUnicast() { // the kernel's, on any up link
				continue
			}
			if link.is(u.LinkIndex) {
				report(dataplane.AddrsChanged)
			}
		}
	}
}

// followRoutes reports every announcement of one of the agent's local
// routes (see routeEncoder) through the link, and the link's deletion,
// until ctx ends or a subscription breaks, as a change of the link's VIPs.
// The link's deletion takes its routes without a route announcement (the
// kernel flushes them silently), so it is followed in the link group
// (RTNLGRP_LINK). Open subscriptions first report the VIPs changed.
func (d *Dataplane) followRoutes(ctx context.Context, report func(dataplane.Event)) {
	routes, stopRoutes, err := subscribeRoutes(ctx, d.log)
	if err != nil {
		d.log.Warn("subscribe to route announcements", zap.Error(err))
		return
	}
	defer stopRoutes()
	links, stopLinks, err := subscribeLinks(ctx, d.log)
	if err != nil {
		d.log.Warn("subscribe to link announcements", zap.Error(err))
		return
	}
	defer stopLinks()
	d.routesFollowed.Add(1)
	defer d.routesFollowed.Add(-1)
	report(dataplane.AddrsChanged)
	link := linkIndex{name: d.linkName, known: map[int]bool{}}
	for {
		select {
		case <-ctx.Done():
			return
		case u, ok := <-routes:
			if !ok {
				return
			}
			if u.Route.Protocol == rtprotKubeIPVS && u.Route.Type == unix.RTN_LOCAL && link.is(u.LinkIndex) {
				report(dataplane.AddrsChanged)
			}
		case u, ok := <-links:
			if !ok {
				return
			}
			if u.Header.Type == unix.RTM_DELLINK && u.Attrs().Name == d.linkName {
				report(dataplane.AddrsChanged)
			}
		}
	}
}

// subscribeRoutes subscribes to the kernel's IPv4 and IPv6 route
// announcements; stop closes the subscription and waits for its receiver.
func subscribeRoutes(ctx context.Context, log *zap.Logger) (<-chan netlink.RouteUpdate, func(), error) {
	updates, done := make(chan netlink.RouteUpdate, 256), make(chan struct{})
	err := netlink.RouteSubscribeWithOptions(updates, done, netlink.RouteSubscribeOptions{
		ReceiveBufferSize: 1 << 20,
		ErrorCallback:     warnWhileRunning(ctx, log, "route announcements"),
	})
	return updates, stopping(done, updates, err), err
}

// subscribeLinks subscribes to the kernel's link announcements; stop
// closes the subscription and waits for its receiver.
func subscribeLinks(ctx context.Context, log *zap.Logger) (<-chan netlink.LinkUpdate, func(), error) {
	updates, done := make(chan netlink.LinkUpdate, 64), make(chan struct{})
	err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{
		ErrorCallback: warnWhileRunning(ctx, log, "link announcements"),
	})
	return updates, stopping(done, updates, err), err
}

// warnWhileRunning logs a subscription's receive errors as what, but the
// one its own closing makes (EAGAIN, at shutdown or when a follower renews
// its subscriptions). An overflow is news, not trouble: every follower
// subscribes again and reads afresh what it follows, and a large start
// (tens of thousands of VIPs bound at once) overflows any buffer of a
// reasonable size.
func warnWhileRunning(ctx context.Context, log *zap.Logger, what string) func(error) {
	return func(err error) {
		switch {
		case ctx.Err() != nil, closing(err):
		case overflowed(err):
			log.Info(what+" came faster than they were read: subscribing again and reading afresh", zap.Error(err))
		default:
			log.Warn(what, zap.Error(err))
		}
	}
}

// closing tells whether a receive ended because the subscription's socket
// was closed under it (EAGAIN).
func closing(err error) bool { return hasErrno(err, unix.EAGAIN) }

// overflowed tells whether a subscription broke because its socket's
// receive buffer overflowed (ENOBUFS).
func overflowed(err error) bool { return hasErrno(err, unix.ENOBUFS) }

// hasErrno tells whether err is errno, wrapped or, as the netlink library
// hands a subscription's receive errors over, as text.
func hasErrno(err error, errno unix.Errno) bool {
	return errors.Is(err, errno) || strings.Contains(err.Error(), errno.Error())
}

// stopping is the stop of a subscription whose receiver ends when done
// closes and then closes updates; a subscription that failed has no
// receiver, and its stop only closes done.
func stopping[T any](done chan struct{}, updates <-chan T, err error) func() {
	if err != nil {
		close(done)
		return func() {}
	}
	return func() {
		close(done)
		for range updates { // let the receiver see its socket closed and end
		}
	}
}

// linkIndex tells whether an interface index is the link's, looking the
// link up by name the first time an index is seen: the link, deleted and
// made again, has a new index.
type linkIndex struct {
	name  string
	known map[int]bool
}

func (l *linkIndex) is(index int) bool {
	ours, seen := l.known[index]
	if seen {
		return ours
	}
	link, err := netlink.LinkByName(l.name)
	if err != nil {
		// Not there (deleted, its addresses with it): the announcement
		// may be about it, and a read costs one dump.
		return true
	}
	ours = link.Attrs().Index == index
	l.known[index] = ours
	return ours
}

// followRules reports every nftables announcement about the tables
// iptables-nft keeps the shim's rules in, until ctx ends or the
// subscription breaks.
func (d *Dataplane) followRules(ctx context.Context, renewed bool, report func(dataplane.Event)) {
	c, err := mdnetlink.Dial(unix.NETLINK_NETFILTER, &mdnetlink.Config{Groups: 1 << (unix.NFNLGRP_NFTABLES - 1)})
	if err != nil {
		d.log.Warn("subscribe to nftables announcements", zap.Error(err))
		return
	}
	if err := c.SetReadBuffer(1 << 20); err != nil {
		d.log.Warn("size the nftables announcements' buffer", zap.Error(err))
	}
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer func() {
		if stop() {
			_ = c.Close()
		}
	}()
	if renewed {
		report(dataplane.RulesChanged)
	}
	for {
		msgs, err := c.Receive()
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("nftables announcements", zap.Error(err))
			}
			return
		}
		for _, m := range msgs {
			if aboutShimTables(m) {
				report(dataplane.RulesChanged)
				break
			}
		}
	}
}

// nf_tables.h's message types that announce a table, chain or rule made
// or deleted, and the attribute all three carry first: the table's name.
const (
	nftMsgNewTable = 0
	nftMsgDelTable = 2
	nftMsgNewChain = 3
	nftMsgDelChain = 5
	nftMsgNewRule  = 6
	nftMsgDelRule  = 8
	nftaTableName  = 1
)

// aboutShimTables tells whether an nftables announcement is about a table,
// chain or rule of the IPv4 or IPv6 nat, filter or mangle table: where
// iptables-nft keeps the shim's rules and jumps. Sets, objects, other
// families and the generation's own announcement are not.
func aboutShimTables(m mdnetlink.Message) bool {
	if m.Header.Type>>8 != nfnlSubsysNFTables || len(m.Data) < nfgenmsgLen {
		return false
	}
	switch m.Header.Type & 0xff {
	case nftMsgNewTable, nftMsgDelTable, nftMsgNewChain, nftMsgDelChain, nftMsgNewRule, nftMsgDelRule:
	default:
		return false
	}
	if family := m.Data[0]; family != unix.AF_INET && family != unix.AF_INET6 {
		return false
	}
	found := false
	_ = eachNfnlAttr(m, func(typ uint16, v []byte) error {
		if typ == nftaTableName && !found {
			switch cString(v) {
			case "nat", "filter", "mangle":
				found = true
			}
		}
		return nil
	})
	return found
}
