//go:build linux

package linux_test

import (
	"context"
	"errors"
	"maps"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	vnl "github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/linux"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// TestVIPsBoundEitherWay: a dataplane binding addresses and one binding
// local routes, on one link, each read the VIPs the other bound, each can
// unbind them, and each way of binding makes the VIP the node's own: a
// connection to it from the node is delivered locally, in both families
// (IPv6 lets no socket bind an address that is a local route alone, and
// IPVS needs none to). This is
// what lets an agent switch --vip-binding, or take over kube-proxy's
// addresses, with nothing left behind.
func TestVIPsBoundEitherWay(t *testing.T) {
	asAddr := newLinux(t)
	asRoute := newLinuxWith(t, linux.Options{LocalRoutes: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := asAddr.Init(ctx); err != nil {
		t.Fatal(err)
	}
	a4, a6 := netip.MustParseAddr("10.96.77.1"), netip.MustParseAddr("fd00:77::1")
	r4, r6 := netip.MustParseAddr("10.96.77.2"), netip.MustParseAddr("fd00:77::2")
	for _, b := range []struct {
		dp  dataplane.Dataplane
		vip netip.Addr
	}{{asAddr, a4}, {asAddr, a6}, {asRoute, r4}, {asRoute, r6}} {
		if err := applyOne(ctx, b.dp, model.Op{Kind: model.BindAddr, Addr: b.vip}); err != nil {
			t.Fatalf("bind %s: %v", b.vip, err)
		}
	}
	link, err := vnl.LinkByName(dataplane.LinkName)
	if err != nil {
		t.Fatal(err)
	}
	addrs, routes := kernelVIPs(t, link)
	if !slices.Equal(addrs, []netip.Addr{a4, a6}) || !slices.Equal(routes, []netip.Addr{r4, r6}) {
		t.Fatalf("addresses %v and local routes %v on %s; want %v and %v", addrs, routes, dataplane.LinkName, []netip.Addr{a4, a6}, []netip.Addr{r4, r6})
	}
	all := []netip.Addr{a4, r4, a6, r6}
	slices.SortFunc(all, netip.Addr.Compare)
	for name, dp := range map[string]dataplane.Dataplane{"address": asAddr, "local-route": asRoute} {
		if got := linkAddrs(t, ctx, dp); !slices.Equal(got, all) {
			t.Errorf("the %s dataplane reads VIPs %v, want %v", name, got, all)
		}
	}
	for _, vip := range all {
		reachable(t, vip)
	}
	// Each unbinds the other's: the address dataplane the routes, the
	// route dataplane the addresses.
	for _, u := range []struct {
		dp  dataplane.Dataplane
		vip netip.Addr
	}{{asAddr, r4}, {asAddr, r6}, {asRoute, a4}, {asRoute, a6}} {
		if err := applyOne(ctx, u.dp, model.Op{Kind: model.UnbindAddr, Addr: u.vip}); err != nil {
			t.Errorf("unbind %s: %v", u.vip, err)
		}
		if err := applyOne(ctx, u.dp, model.Op{Kind: model.UnbindAddr, Addr: u.vip}); !errors.Is(err, dataplane.ErrNotExist) {
			t.Errorf("unbind %s again: %v, want ErrNotExist", u.vip, err)
		}
	}
	if addrs, routes := kernelVIPs(t, link); len(addrs)+len(routes) != 0 {
		t.Errorf("left on %s: addresses %v, local routes %v", dataplane.LinkName, addrs, routes)
	}
	if got := linkAddrs(t, ctx, asRoute); len(got) != 0 {
		t.Errorf("VIPs read after every unbind: %v", got)
	}

	// DeleteLocalRoutes (cleanup --shim-only) takes the routes alone.
	for _, b := range []struct {
		dp  dataplane.Dataplane
		vip netip.Addr
	}{{asAddr, a4}, {asRoute, r4}, {asRoute, r6}} {
		if err := applyOne(ctx, b.dp, model.Op{Kind: model.BindAddr, Addr: b.vip}); err != nil {
			t.Fatalf("bind %s: %v", b.vip, err)
		}
	}
	gone, err := asAddr.(*linux.Dataplane).DeleteLocalRoutes(ctx)
	if err != nil || !slices.Equal(gone, []netip.Addr{r4, r6}) {
		t.Errorf("DeleteLocalRoutes: %v, %v; want %v", gone, err, []netip.Addr{r4, r6})
	}
	if addrs, routes := kernelVIPs(t, link); !slices.Equal(addrs, []netip.Addr{a4}) || len(routes) != 0 {
		t.Errorf("after DeleteLocalRoutes: addresses %v, local routes %v; want %s alone", addrs, routes, a4)
	}
}

// kernelVIPs reads the link's addresses and the agent's local routes
// through it as iproute2 would show them, not as the dataplane reads them.
func kernelVIPs(t *testing.T, link vnl.Link) (addrs, routes []netip.Addr) {
	t.Helper()
	list, err := vnl.AddrList(link, vnl.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list {
		if ip, _ := netip.AddrFromSlice(a.IP); !ip.IsLinkLocalUnicast() {
			addrs = append(addrs, ip.Unmap())
		}
	}
	rs, err := vnl.RouteListFiltered(vnl.FAMILY_ALL, &vnl.Route{Table: unix.RT_TABLE_LOCAL, Protocol: 243, LinkIndex: link.Attrs().Index},
		vnl.RT_FILTER_TABLE|vnl.RT_FILTER_PROTOCOL|vnl.RT_FILTER_OIF)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		ip, _ := netip.AddrFromSlice(r.Dst.IP)
		routes = append(routes, ip.Unmap())
	}
	return addrs, routes
}

func linkAddrs(t *testing.T, ctx context.Context, dp dataplane.Dataplane) []netip.Addr {
	t.Helper()
	got, err := dp.(dataplane.Notifier).LinkAddrs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return slices.SortedFunc(maps.Keys(got), netip.Addr.Compare)
}

// reachable: a connection from the node to vip is delivered to the node
// itself (a listener on every address of the family takes it), which is
// what IPVS needs of a VIP: its packets reach the local input path, where
// IPVS takes them. It logs the source address the kernel chose.
func reachable(t *testing.T, vip netip.Addr) {
	t.Helper()
	network, any := "tcp4", "0.0.0.0:0"
	if vip.Is6() {
		network, any = "tcp6", "[::]:0"
	}
	l, err := net.Listen(network, any)
	if err != nil {
		t.Fatalf("listen on %s: %v", any, err)
	}
	defer l.Close()
	accepted := make(chan net.Addr, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c.LocalAddr()
		c.Close()
	}()
	dst := netip.AddrPortFrom(vip, uint16(l.Addr().(*net.TCPAddr).Port))
	c, err := net.DialTimeout("tcp", dst.String(), 5*time.Second)
	if err != nil {
		t.Errorf("connect to %s: %v", dst, err)
		return
	}
	defer c.Close()
	if at := <-accepted; at == nil || at.String() != dst.String() {
		t.Errorf("connection to %s accepted at %v", dst, at)
	}
	t.Logf("%s reached from %s", dst, c.LocalAddr())
}
