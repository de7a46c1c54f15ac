//go:build linux

package linux

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLocalRouteReadBack: a local route as the agent encodes it is read
// back as its VIP, for both families, and a route that differs from it in
// any field the read checks (protocol, type, table, link, prefix) is not
// a VIP: the kernel's local route of an address, another daemon's route,
// a route through another link.
func TestLocalRouteReadBack(t *testing.T) {
	const link = 7
	for _, vip := range []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00::a")} {
		var e routeEncoder
		r := e.change(link, true, vip)
		if r.typ != unix.RTM_NEWROUTE || r.flags != unix.NLM_F_CREATE|unix.NLM_F_EXCL {
			t.Errorf("%s: bind is type %d flags %#x, want RTM_NEWROUTE, create exclusive", vip, r.typ, r.flags)
		}
		if d := e.change(link, false, vip); d.typ != unix.RTM_DELROUTE {
			t.Errorf("%s: unbind is type %d, want RTM_DELROUTE", vip, d.typ)
		}
		got, ok, err := localRouteVIP(r.data, link)
		if err != nil || !ok || got != vip {
			t.Errorf("%s: read back as %s, %v, %v", vip, got, ok, err)
		}
		changed := func(name string, mutate func(b []byte) []byte) {
			b := mutate(append([]byte(nil), r.data...))
			if got, ok, err := localRouteVIP(b, link); ok || err != nil {
				t.Errorf("%s with %s: read as VIP %s (%v)", vip, name, got, err)
			}
		}
		changed("the kernel's protocol", func(b []byte) []byte { b[5] = unix.RTPROT_KERNEL; return b })
		changed("type unicast", func(b []byte) []byte { b[7] = unix.RTN_UNICAST; return b })
		changed("the main table", func(b []byte) []byte { b[4] = unix.RT_TABLE_MAIN; return b })
		changed("the main table named by attribute", func(b []byte) []byte {
			b[4] = unix.RT_TABLE_COMPAT
			return appendAttrU32(b, unix.RTA_TABLE, unix.RT_TABLE_MAIN)
		})
		changed("a shorter prefix", func(b []byte) []byte { b[1] = 24; return b })
		if _, ok, _ := localRouteVIP(r.data, link+1); ok {
			t.Errorf("%s: read as a VIP of another link", vip)
		}
		named := appendAttrU32(append([]byte(nil), r.data...), unix.RTA_TABLE, unix.RT_TABLE_LOCAL)
		if got, ok, err := localRouteVIP(named, link); !ok || err != nil || got != vip {
			t.Errorf("%s with the local table named by attribute: %s, %v, %v", vip, got, ok, err)
		}
	}
	if _, _, err := localRouteVIP([]byte{2, 32}, link); err == nil {
		t.Error("a truncated route message read without an error")
	}
}

func appendAttrU32(b []byte, typ uint16, v uint32) []byte {
	b = binary.NativeEndian.AppendUint16(b, 8)
	b = binary.NativeEndian.AppendUint16(b, typ)
	return binary.NativeEndian.AppendUint32(b, v)
}

// TestDumpLocalRoutesAccepted: this kernel takes the filtered dump as the
// strict socket sends it, for both families (a header it found malformed
// would fail it with EINVAL), and the loopback link has no VIP routes.
func TestDumpLocalRoutesAccepted(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatalf("the loopback link: %v", err)
	}
	s := newStrictSocket(unix.NETLINK_ROUTE)
	defer s.close()
	got, err := dumpLocalRoutes(t.Context(), s, int32(lo.Index), nil)
	if err != nil {
		t.Fatalf("dump: %v", err)
	}
	if len(got) != 0 {
		t.Errorf("VIP routes through lo: %v", got)
	}
}
