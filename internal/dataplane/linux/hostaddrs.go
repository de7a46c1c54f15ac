//go:build linux

package linux

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
)

// WatchHostAddrs follows the node's own addresses: those keep accepts, of
// every link but dataplane.LinkName (whose addresses are the VIPs). It
// calls report with them, sorted, once at start and then after each change,
// until ctx ends; report runs on the watcher's goroutine.
//
// It listens to the kernel's address notifications rather than re-reading
// the addresses on every sync, as kube-proxy does: a change reaches the
// NodePorts at once, not at the next sync (which, with nothing else
// changing, is the periodic resync), and a quiet node costs nothing. A
// notification about an address keep refuses (a new pod veth's IPv6
// link-local address) or one on LinkName (every VIP bound or unbound) is
// dropped after decoding it; any other makes it re-read the addresses, one
// dump for a whole burst. A subscription that breaks (a full socket buffer
// loses notifications) is renewed and the addresses re-read, so nothing
// missed stays missed.
func WatchHostAddrs(ctx context.Context, keep func(netip.Addr) bool, log *zap.Logger, report func([]netip.Addr)) {
	w := addrWatcher{keep: keep, log: log.Named("hostaddrs"), report: report, links: map[int]string{}}
	for ctx.Err() == nil {
		w.follow(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second): // a broken subscription is renewed, not spun on
		}
	}
}

type addrWatcher struct {
	keep   func(netip.Addr) bool
	log    *zap.Logger
	report func([]netip.Addr)
	links  map[int]string // link index -> name, as of the last read
	last   []netip.Addr
	known  bool
}

// follow subscribes, reads the addresses and re-reads them after each
// notification that may change them, until ctx ends or the subscription
// breaks.
func (w *addrWatcher) follow(ctx context.Context) {
	updates, stop, err := subscribeAddrs(ctx, w.log, "address notifications")
	if err != nil {
		w.log.Warn("subscribe to address notifications", zap.Error(err))
		return
	}
	defer stop()
	w.read()
	for {
		select {
		case <-ctx.Done():
			return
		case u, ok := <-updates:
			if !ok {
				return
			}
			if !w.matters(u) && !w.drainMatters(updates) {
				continue
			}
			w.read()
		}
	}
}

// drainMatters takes the notifications already queued and tells whether
// any of them matters: a burst is answered with one read.
func (w *addrWatcher) drainMatters(updates <-chan netlink.AddrUpdate) bool {
	found := false
	for {
		select {
		case u, ok := <-updates:
			if !ok {
				return found
			}
			found = w.matters(u) || found
		default:
			return found
		}
	}
}

// matters tells whether a notification may change what is reported.
func (w *addrWatcher) matters(u netlink.AddrUpdate) bool {
	a, ok := netip.AddrFromSlice(u.LinkAddress.IP)
	if !ok || !w.keep(a.Unmap()) {
		return false
	}
	name, known := w.links[u.LinkIndex]
	return !known || name != dataplane.LinkName
}

// read lists the links and the addresses (one dump each) and reports the
// addresses if they changed.
func (w *addrWatcher) read() {
	addrs, err := w.list()
	if err != nil {
		w.log.Warn("list host addresses", zap.Error(err))
		return
	}
	if w.known && slices.Equal(addrs, w.last) {
		return
	}
	w.last, w.known = addrs, true
	w.log.Info("host addresses", zap.Stringers("addrs", addrs))
	w.report(slices.Clone(addrs))
}

// listTimeout bounds each answer of a read of the links and addresses.
const listTimeout = 30 * time.Second

func (w *addrWatcher) list() ([]netip.Addr, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open rtnetlink socket: %w", err)
	}
	defer h.Close()
	if err := h.SetSocketTimeout(listTimeout); err != nil {
		return nil, fmt.Errorf("set rtnetlink socket timeout: %w", err)
	}
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	clear(w.links)
	for _, l := range links {
		w.links[l.Attrs().Index] = l.Attrs().Name
	}
	list, err := h.AddrList(nil, unix.AF_UNSPEC)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range list {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || w.links[a.LinkIndex] == dataplane.LinkName || !w.keep(ip.Unmap()) {
			continue
		}
		out = append(out, ip.Unmap())
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), nil
}

// subscribeAddrs subscribes to the kernel's address announcements, with a
// receive buffer large enough for a burst of binds. stop closes the
// subscription and waits for its receiver to end; receive errors are
// logged as what, except the one closing the subscription at shutdown
// makes (EAGAIN), which is not news.
func subscribeAddrs(ctx context.Context, log *zap.Logger, what string) (<-chan netlink.AddrUpdate, func(), error) {
	updates, done := make(chan netlink.AddrUpdate, 256), make(chan struct{})
	err := netlink.AddrSubscribeWithOptions(updates, done, netlink.AddrSubscribeOptions{
		ReceiveBufferSize: 1 << 20,
		ErrorCallback:     warnWhileRunning(ctx, log, what),
	})
	return updates, stopping(done, updates, err), err
}
