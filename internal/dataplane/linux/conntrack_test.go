//go:build linux

package linux

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// countedTable counts a flow table's dumps per family and the flows of
// each protocol the kernel handed over.
type countedTable struct {
	*ctTable
	dumps  [2]int
	handed map[uint8]int
}

func (c *countedTable) Dump(ctx context.Context, v6 bool, proto uint8, fn func(conntrack.Flow)) error {
	if v6 {
		c.dumps[1]++
	} else {
		c.dumps[0]++
	}
	return c.ctTable.Dump(ctx, v6, proto, func(f conntrack.Flow) {
		c.handed[f.TupleOrig.Proto.Protocol]++
		fn(f)
	})
}

// freshNetns is a network namespace of the test's own, so that its
// conntrack entries are the only ones there. Where a kernel is promised
// (the VM) a missing one fails the test rather than skipping it.
func freshNetns(t testing.TB) netns.NsHandle {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "a conntrack table of the test's own needs root")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		skipOrFail(t, fmt.Sprintf("no network namespaces here: %v", err))
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		skipOrFail(t, fmt.Sprintf("no network namespaces here: %v", err))
	}
	if err := netns.Set(orig); err != nil {
		t.Fatalf("back to the test's network namespace: %v", err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// kernelFilters tells whether the running kernel filters dumps by tuple
// (CTA_FILTER, Linux 5.8).
func kernelFilters(t *testing.T) bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var major, minor int
	fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor)
	return major > 5 || (major == 5 && minor >= 8)
}

// TestClearConntrackReadsEachFamilyOnce: among a thousand other entries, a
// clear of many keys in both families reads each family's table once,
// gets only UDP entries from the kernel where it filters, and deletes
// exactly the entries NATed to removed real servers and those sent to
// frontends while they had no endpoint. Runs natively as root: conntrack
// needs no IPVS.
func TestClearConntrackReadsEachFamilyOnce(t *testing.T) {
	ns := freshNetns(t)
	table, err := openFlowTable(ns)
	if err != nil {
		t.Skipf("no conntrack netlink here: %v", err)
	}
	conn := dialConntrackIn(t, ns)
	counted := &countedTable{ctTable: table, handed: map[uint8]int{}}
	d := testDataplane(time.Minute, func() (*handles, error) {
		return &handles{dialCT: func() (flowTable, error) { return counted, nil }}, nil
	})
	defer d.Close()

	ap := netip.MustParseAddrPort
	nat := func(proto uint8, client, vip, real netip.AddrPort) conntrack.Flow {
		f := conntrack.NewFlow(proto, 0, client.Addr(), vip.Addr(), client.Port(), vip.Port(), 600, 0)
		f.TupleReply.IP.SourceAddress, f.TupleReply.Proto.SourcePort = real.Addr(), real.Port()
		return f
	}
	type entry struct {
		flow    conntrack.Flow
		deleted bool
	}
	var entries []entry
	stale := dataplane.NewStaleFlows(model.UDP)
	// 100 removed real servers with two flows each, and their TCP twins.
	for i := range 100 {
		real := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, 1, byte(i)}), 53)
		stale.AddReal(real)
		for c := range 2 {
			client := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 1, byte(i)}), uint16(40000+c))
			entries = append(entries, entry{nat(syscall.IPPROTO_UDP, client, ap("10.96.0.10:53"), real), true},
				entry{nat(syscall.IPPROTO_TCP, client, ap("10.96.0.10:53"), real), false})
		}
	}
	// 800 UDP flows to real servers that stay, and 300 TCP flows.
	for i := range 800 {
		client := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 2, byte(i)}), uint16(40000+i))
		real := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, 2, byte(i % 50)}), 53)
		entries = append(entries, entry{nat(syscall.IPPROTO_UDP, client, ap("10.96.0.10:53"), real), false})
	}
	for i := range 300 {
		client := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 3, byte(i)}), uint16(40000+i))
		entries = append(entries, entry{nat(syscall.IPPROTO_TCP, client, ap("10.96.0.1:443"), ap("10.244.3.1:6443")), false})
	}
	// Frontends that got their first endpoint, one of each family, and one
	// that did not.
	for _, k := range []netip.AddrPort{ap("10.96.5.1:514"), ap("[fd00:96::5]:514")} {
		stale.AddDest(k)
	}
	for i, fe := range []struct {
		vip     netip.AddrPort
		deleted bool
	}{{ap("10.96.5.1:514"), true}, {ap("[fd00:96::5]:514"), true}, {ap("10.96.5.2:514"), false}} {
		client := ap(fmt.Sprintf("10.0.5.%d:41000", i))
		if fe.vip.Addr().Is6() {
			client = ap(fmt.Sprintf("[fd00::5:%d]:41000", i))
		}
		entries = append(entries, entry{nat(syscall.IPPROTO_UDP, client, fe.vip, fe.vip), fe.deleted})
		// NATed to the first endpoint after the apply: it stays.
		real := ap(fmt.Sprintf("10.244.5.%d:514", i))
		if fe.vip.Addr().Is6() {
			real = ap(fmt.Sprintf("[fd00:244::5:%d]:514", i))
		}
		client = netip.AddrPortFrom(client.Addr(), 42000)
		entries = append(entries, entry{nat(syscall.IPPROTO_UDP, client, fe.vip, real), false})
	}
	// An IPv6 removed real server.
	stale.AddReal(ap("[fd00:244::7]:53"))
	entries = append(entries, entry{nat(syscall.IPPROTO_UDP, ap("[fd00::7]:40000"), ap("[fd00:96::10]:53"), ap("[fd00:244::7]:53")), true})

	want := 0
	for _, e := range entries {
		if err := conn.Create(e.flow); err != nil {
			t.Fatalf("create flow %s: %v", e.flow.TupleOrig, err)
		}
		if e.deleted {
			want++
		}
	}
	n, err := d.ClearConntrack(t.Context(), stale)
	if err != nil || n != want {
		t.Fatalf("clear: got %d, %v; want %d, nil", n, err, want)
	}
	if counted.dumps != [2]int{1, 1} {
		t.Errorf("tables read %v times (IPv4, IPv6), want once each", counted.dumps)
	}
	if kernelFilters(t) && (table.noFilter || counted.handed[syscall.IPPROTO_TCP] > 0) {
		t.Errorf("the kernel handed over %d TCP entries (filter refused: %v); a UDP clear asks for UDP only",
			counted.handed[syscall.IPPROTO_TCP], table.noFilter)
	}
	for _, e := range entries {
		_, err := conn.Get(conntrack.Flow{TupleOrig: e.flow.TupleOrig})
		if e.deleted != (err != nil) {
			t.Errorf("flow %s, reply from %s: want deleted=%v, lookup error %v",
				e.flow.TupleOrig, e.flow.TupleReply.IP.SourceAddress, e.deleted, err)
		}
	}
}

// dialConntrackIn is a conntrack connection of the test's own in ns, to
// make and look up entries.
func dialConntrackIn(tb testing.TB, ns netns.NsHandle) *conntrack.Conn {
	tb.Helper()
	c, err := conntrack.Dial(&netlink.Config{NetNS: int(ns)})
	if err != nil {
		skipOrFail(tb, fmt.Sprintf("no conntrack netlink here: %v", err))
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// skipOrFail skips with the reason, or fails where a kernel is promised
// (KUBE_IPVS_REQUIRE_KERNEL=1, the VM), so that the real-kernel suite can
// never pass by not running. (The external test package has its twin.)
func skipOrFail(tb testing.TB, reason string) {
	tb.Helper()
	if os.Getenv("KUBE_IPVS_REQUIRE_KERNEL") == "1" {
		tb.Fatalf("KUBE_IPVS_REQUIRE_KERNEL=1 but %s", reason)
	}
	tb.Skip(reason)
}
