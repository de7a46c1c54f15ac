//go:build linux

package linux

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	vnl "github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestDumpAddrsAsTheLibrary: the in-place address dump finds, on every
// link this machine has, the addresses vishvananda/netlink lists for it
// (less IPv6 link-local ones), and none of another link's.
func TestDumpAddrsAsTheLibrary(t *testing.T) {
	s, err := openSocket(unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatalf("open an rtnetlink socket (every Linux kernel has one): %v", err)
	}
	defer s.close()
	ifaces, err := net.Interfaces()
	if err != nil || len(ifaces) == 0 {
		t.Fatalf("this machine's links: %v, %v", ifaces, err)
	}
	found := 0
	for _, ifc := range ifaces {
		link, err := vnl.LinkByIndex(ifc.Index)
		if err != nil {
			t.Fatal(err)
		}
		list, err := vnl.AddrList(link, vnl.FAMILY_ALL)
		if err != nil {
			t.Fatal(err)
		}
		var want []netip.Addr
		for _, a := range list {
			ip, _ := netip.AddrFromSlice(a.IP)
			if ip = ip.Unmap(); !(ip.Is6() && ip.IsLinkLocalUnicast()) {
				want = append(want, ip)
			}
		}
		got, err := dumpAddrs(t.Context(), s, int32(ifc.Index), nil)
		if err != nil {
			t.Fatalf("%s: %v", ifc.Name, err)
		}
		slices.SortFunc(got, netip.Addr.Compare)
		slices.SortFunc(want, netip.Addr.Compare)
		if !slices.Equal(got, want) {
			t.Errorf("%s: %v, the library lists %v", ifc.Name, got, want)
		}
		found += len(got)
	}
	if found == 0 {
		t.Fatal("no address on any link: the comparison proved nothing")
	}
}
