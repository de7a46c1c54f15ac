//go:build linux

package linux

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// dumpLocalRoutes appends the VIPs bound as the agent's local routes
// through the link with index ifindex (see routeEncoder): one dump per
// family, which the kernel filters itself to the local table, the agent's
// protocol, local routes and the link, because s asks for strict checks.
// A family the kernel lacks answers nothing or, where it falls back to
// every family, what the other dump gives as well; the caller drops
// duplicates.
func dumpLocalRoutes(ctx context.Context, s *socket, ifindex int32, out []netip.Addr) ([]netip.Addr, error) {
	for _, family := range []uint8{afInet, afInet6} {
		var a attrBuf
		a.b = make([]byte, unix.SizeofRtMsg, unix.SizeofRtMsg+8)
		a.b[0], a.b[4], a.b[5], a.b[7] = family, unix.RT_TABLE_LOCAL, rtprotKubeIPVS, unix.RTN_LOCAL
		a.u32(unix.RTA_OIF, uint32(ifindex))
		err := s.query(ctx, unix.RTM_GETROUTE, unix.NLM_F_DUMP, a.b, func(m netlink.Message) error {
			if m.Header.Type != unix.RTM_NEWROUTE {
				return nil
			}
			ip, ok, err := localRouteVIP(m.Data, ifindex)
			if ok {
				out = append(out, ip)
			}
			return err
		})
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// localRouteVIP is the VIP of one route of a dump, and whether it is one:
// a host route of the agent's protocol and of type local, in the local
// table, through the link with index ifindex. The kernel's filter is
// checked again here, so that a kernel that ignores part of it (one
// without strict checks) yields no stranger's route.
func localRouteVIP(rtm []byte, ifindex int32) (netip.Addr, bool, error) {
	if len(rtm) < unix.SizeofRtMsg {
		return netip.Addr{}, false, fmt.Errorf("route message of %d bytes", len(rtm))
	}
	dstLen, table, proto, typ := rtm[1], uint32(rtm[4]), rtm[5], rtm[7]
	if proto != rtprotKubeIPVS || typ != unix.RTN_LOCAL {
		return netip.Addr{}, false, nil
	}
	var dst []byte
	oif := int32(-1)
	err := walkAttrs(rtm[unix.SizeofRtMsg:], func(t uint16, v []byte) error {
		switch {
		case t == unix.RTA_DST:
			dst = v
		case t == unix.RTA_OIF && len(v) == 4:
			oif = int32(binary.NativeEndian.Uint32(v))
		case t == unix.RTA_TABLE && len(v) == 4:
			table = binary.NativeEndian.Uint32(v)
		}
		return nil
	})
	if err != nil {
		return netip.Addr{}, false, fmt.Errorf("decode route: %w", err)
	}
	ip, ok := netip.AddrFromSlice(dst)
	if !ok || table != unix.RT_TABLE_LOCAL || oif != ifindex || int(dstLen) != ip.BitLen() {
		return netip.Addr{}, false, nil
	}
	return ip.Unmap(), true, nil
}
