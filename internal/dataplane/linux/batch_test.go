//go:build linux

package linux_test

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/linux"
)

// TestBatchErrorsTiedToRequests sends hundreds of address binds over
// several windows, some of them repeats that the kernel refuses, to the
// loopback link of a fresh network namespace (no IPVS or dummy link
// needed): each refusal must come back on its own request, and every other
// bind must be made.
func TestBatchErrorsTiedToRequests(t *testing.T) {
	if !isolated(t) {
		return
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	var addrs []netip.Addr
	repeat := map[int]bool{}
	for i := range 600 {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, 99, byte(i / 250), byte(i%250 + 1)}))
		if i%89 == 7 { // the same address again, in the same or the next window
			addrs = append(addrs, addrs[len(addrs)-1-i%3])
			repeat[len(addrs)-1] = true
		}
	}
	addrs = append(addrs, netip.MustParseAddr("fd00:99::1"), netip.MustParseAddr("fd00:99::1"))
	repeat[len(addrs)-1] = true
	// In the VM the namespace is the VM's own: leave its loopback as it was.
	t.Cleanup(func() {
		for _, a := range addrs {
			bits := a.BitLen()
			_ = netlink.AddrDel(lo, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, bits)}})
		}
	})
	errs, err := linux.BindBatch(int32(lo.Attrs().Index), addrs)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		switch {
		case repeat[i] && !errors.Is(e, syscall.EEXIST):
			t.Errorf("bind %d (%s, a repeat): %v, want EEXIST", i, addrs[i], e)
		case !repeat[i] && e != nil:
			t.Errorf("bind %d (%s): %v", i, addrs[i], e)
		}
	}
	list, err := netlink.AddrList(lo, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	held := map[netip.Addr]bool{}
	for _, a := range list {
		ip, _ := netip.AddrFromSlice(a.IP)
		held[ip.Unmap()] = true
	}
	for _, a := range addrs {
		if !held[a] {
			t.Errorf("%s was not bound", a)
		}
	}
}
