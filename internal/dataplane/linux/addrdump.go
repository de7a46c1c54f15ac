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

// dumpAddrs appends the addresses of the link with index ifindex to out,
// but IPv6 link-local ones: one dump of every link's addresses (the kernel
// filters by link only for a socket that asks for strict checks), each
// decoded in place, as a read of ten thousand VIPs and more wants.
func dumpAddrs(ctx context.Context, s *socket, ifindex int32, out []netip.Addr) ([]netip.Addr, error) {
	req := make([]byte, unix.SizeofIfAddrmsg) // every family, every link
	err := s.query(ctx, unix.RTM_GETADDR, unix.NLM_F_DUMP, req, func(m netlink.Message) error {
		if m.Header.Type != unix.RTM_NEWADDR || len(m.Data) < unix.SizeofIfAddrmsg ||
			int32(binary.NativeEndian.Uint32(m.Data[4:8])) != ifindex {
			return nil
		}
		ip, err := ifaAddr(m.Data[unix.SizeofIfAddrmsg:])
		if err != nil {
			return err
		}
		if !(ip.Is6() && ip.IsLinkLocalUnicast()) {
			out = append(out, ip)
		}
		return nil
	})
	return out, err
}

// ifaAddr is the address of one RTM_NEWADDR's attributes: its local
// address where it has one (the other end's on a point-to-point link is
// IFA_ADDRESS), else IFA_ADDRESS.
func ifaAddr(attrs []byte) (netip.Addr, error) {
	var local, addr []byte
	err := walkAttrs(attrs, func(typ uint16, v []byte) error {
		switch typ {
		case unix.IFA_LOCAL:
			local = v
		case unix.IFA_ADDRESS:
			addr = v
		}
		return nil
	})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("decode address: %w", err)
	}
	if local != nil {
		addr = local
	}
	ip, ok := netip.AddrFromSlice(addr)
	if !ok {
		return netip.Addr{}, fmt.Errorf("address of %d bytes", len(addr))
	}
	return ip.Unmap(), nil
}
