package linux

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// Sets are read with the package's own decoder on its own socket: a read of
// the sets is a dump of at least one member per endpoint, made by every
// rescan, and this decoder walks each answer in place as it arrives,
// building nothing per attribute.

// More of ipset's netlink protocol (the rest is in shim_batch.go).
const (
	ipsetCmdList         = 7
	ipsetAttrFlags       = 6      // IPSET_ATTR_FLAGS, at command level
	ipsetAttrADT         = 8      // IPSET_ATTR_ADT: the members, each an IPSET_ATTR_DATA
	ipsetAttrCIDR2       = 21     // IPSET_ATTR_CIDR2
	ipsetFlagListSetName = 1 << 1 // IPSET_FLAG_LIST_SETNAME
	ipsetFlagListHeader  = 1 << 2 // IPSET_FLAG_LIST_HEADER
	ipsetAttrTypeName    = 3      // IPSET_ATTR_TYPENAME
	ipsetAttrFamily      = 5      // IPSET_ATTR_FAMILY
	ipsetAttrMaxElem     = 19     // IPSET_ATTR_MAXELEM, in the header's IPSET_ATTR_DATA
	ipsetAttrCadtFlags   = 8      // IPSET_ATTR_CADT_FLAGS, in the header's IPSET_ATTR_DATA
	ipsetFlagWithSkbInfo = 1 << 6 // IPSET_FLAG_WITH_SKBINFO
	ipsetAttrSkbMark     = 27     // IPSET_ATTR_SKBMARK: mark << 32 | mask, in network byte order
	nfgenmsgLen          = 4
	nlaHeaderLen         = 4
	nlaTypeMask          = 0x3fff // without NLA_F_NESTED and NLA_F_NET_BYTEORDER
)

// ipsetNames lists the names of the kernel's sets, without their members,
// as `ipset list -n` does: listing every set whole to learn the names
// would read every member of every set (a cost that grows with the sets,
// for a list of a few names) and name a large set once per message it
// spans.
func ipsetNames(ctx context.Context) ([]string, error) {
	ae := netlink.NewAttributeEncoder()
	ae.Uint8(ipsetAttrProto, ipsetProtocol)
	// The command-level flags travel in network byte order.
	ae.Bytes(ipsetAttrFlags|unix.NLA_F_NET_BYTEORDER, binary.BigEndian.AppendUint32(nil, ipsetFlagListSetName))
	var names []string
	seen := map[string]bool{}
	err := ipsetDump(ctx, ae, func(m netlink.Message) error {
		return eachNfnlAttr(m, func(typ uint16, v []byte) error {
			if name := cString(v); typ == ipsetAttrName && !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return names, nil
}

// ipsetHeader reads a set's type, family and maxelem, without its members
// (`ipset list -t`). A missing set is an error wrapping ENOENT.
func ipsetHeader(ctx context.Context, name string) (setHeader, error) {
	ae := netlink.NewAttributeEncoder()
	ae.Uint8(ipsetAttrProto, ipsetProtocol)
	ae.String(ipsetAttrName, name)
	ae.Bytes(ipsetAttrFlags|unix.NLA_F_NET_BYTEORDER, binary.BigEndian.AppendUint32(nil, ipsetFlagListHeader))
	var h setHeader
	err := ipsetDump(ctx, ae, func(m netlink.Message) error {
		return eachNfnlAttr(m, func(typ uint16, v []byte) error {
			switch {
			case typ == ipsetAttrTypeName:
				h.typ = cString(v)
			case typ == ipsetAttrFamily && len(v) >= 1:
				h.family = v[0]
			case typ == ipsetAttrData:
				return walkAttrs(v, func(typ uint16, v []byte) error {
					if typ == ipsetAttrMaxElem && len(v) >= 4 {
						h.maxElem = binary.BigEndian.Uint32(v) // sent in network byte order
					}
					if typ == ipsetAttrCadtFlags && len(v) >= 4 {
						h.skbInfo = binary.BigEndian.Uint32(v)&ipsetFlagWithSkbInfo != 0
					}
					return nil
				})
			}
			return nil
		})
	})
	if err != nil {
		return setHeader{}, err
	}
	if h.typ == "" {
		return setHeader{}, fmt.Errorf("the kernel's answer for ipset %s names no type", name)
	}
	return h, nil
}

// ipsetMembers calls each with every member of one of the shim's sets,
// as it decodes them: a read of 100,000 members builds no list of them. A
// missing set is an error wrapping ENOENT.
func ipsetMembers(ctx context.Context, def shim.SetDef, each func(model.SetEntry)) error {
	ae := netlink.NewAttributeEncoder()
	ae.Uint8(ipsetAttrProto, ipsetProtocol)
	ae.String(ipsetAttrName, def.Name)
	return ipsetDump(ctx, ae, func(m netlink.Message) error {
		return eachNfnlAttr(m, func(typ uint16, v []byte) error {
			if typ != ipsetAttrADT {
				return nil
			}
			return walkAttrs(v, func(typ uint16, v []byte) error {
				if typ != ipsetAttrData {
					return nil
				}
				e, err := decodeMember(def, v)
				if err != nil {
					return fmt.Errorf("read member of ipset %s: %w", def.Name, err)
				}
				each(e)
				return nil
			})
		})
	})
}

// rawMember is what a member's attributes hold.
type rawMember struct {
	ip, ip2        netip.Addr
	port           uint16
	proto, cidr2   uint8
	hasPort, hasL4 bool
	mark           uint32
}

// decodeMember reads one member (the attributes inside IPSET_ATTR_DATA).
func decodeMember(def shim.SetDef, b []byte) (model.SetEntry, error) {
	var m rawMember
	err := walkAttrs(b, func(typ uint16, v []byte) error {
		var err error
		switch typ {
		case ipsetAttrIP:
			m.ip, err = decodeIPSetAddr(v)
		case ipsetAttrIP2:
			m.ip2, err = decodeIPSetAddr(v)
		case ipsetAttrPort:
			if len(v) < 2 {
				return errors.New("short port attribute")
			}
			m.port, m.hasPort = binary.BigEndian.Uint16(v), true
		case ipsetAttrL4:
			if len(v) < 1 {
				return errors.New("short protocol attribute")
			}
			m.proto, m.hasL4 = v[0], true
		case ipsetAttrCIDR2:
			if len(v) < 1 {
				return errors.New("short cidr2 attribute")
			}
			m.cidr2 = v[0]
		case ipsetAttrSkbMark:
			if len(v) < 8 {
				return errors.New("short skbmark attribute")
			}
			m.mark = uint32(binary.BigEndian.Uint64(v) >> 32)
		}
		return err
	})
	if err != nil {
		return model.SetEntry{}, err
	}
	return m.entry(def)
}

// entry is the member as the shim's model has it.
func (m rawMember) entry(def shim.SetDef) (model.SetEntry, error) {
	if !m.ip.IsValid() {
		return model.SetEntry{}, errors.New("member lacks its address")
	}
	if def.Type == shim.HashIP {
		return model.NewSetEntry(def.Name, m.ip, 0, 0), nil
	}
	if !m.hasPort || !m.hasL4 {
		return model.SetEntry{}, fmt.Errorf("member %s lacks a port or protocol", m.ip)
	}
	e := model.NewSetEntry(def.Name, m.ip, model.Protocol(m.proto), m.port)
	switch def.Type {
	case shim.HashIPPortIP, shim.HashIPPortNet:
		if !m.ip2.IsValid() {
			return model.SetEntry{}, fmt.Errorf("member %s lacks its second address", m.ip)
		}
		if def.Type == shim.HashIPPortIP {
			e = e.WithAddr2(m.ip2)
		} else {
			e = e.WithNet(netip.PrefixFrom(m.ip2, int(m.cidr2)))
		}
	}
	if def.SkbInfo {
		e = e.WithSkbMark(m.mark)
	}
	return e, nil
}

// decodeIPSetAddr reads a nested IPSET_ATTR_IP / IP2: one IPv4 or IPv6
// address, in network byte order.
func decodeIPSetAddr(b []byte) (netip.Addr, error) {
	var a netip.Addr
	err := walkAttrs(b, func(typ uint16, v []byte) error {
		var ok bool
		switch typ {
		case ipsetAttrIPv4, ipsetAttrIPv6:
			a, ok = netip.AddrFromSlice(v)
			if !ok {
				return fmt.Errorf("address of %d bytes", len(v))
			}
		}
		return nil
	})
	return a.Unmap(), err
}

// ipsetDump sends one ipset list request (a dump) and hands each answer to
// each as it arrives, bounded by ctx.
func ipsetDump(ctx context.Context, ae *netlink.AttributeEncoder, each func(netlink.Message) error) error {
	attrs, err := ae.Encode()
	if err != nil {
		return fmt.Errorf("encode ipset list request: %w", err)
	}
	// nfgenmsg as ipset(8) sends it: family AF_INET, version 0, res_id 0.
	data := append([]byte{unix.AF_INET, 0, 0, 0}, attrs...)
	return netfilterQuery(ctx, nfnlSubsysIPSet<<8|ipsetCmdList, unix.NLM_F_DUMP, data, each)
}

// netfilterQuery sends one nfnetlink request on a socket of its own and
// hands each answer (every part of a dump) to each, bounded by ctx (or by
// defaultGenlTimeout when it has no deadline).
func netfilterQuery(ctx context.Context, typ, flags uint16, data []byte, each func(netlink.Message) error) error {
	s, err := openSocket(unix.NETLINK_NETFILTER)
	if err != nil {
		return fmt.Errorf("dial netfilter netlink: %w", err)
	}
	defer s.close()
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()
	return s.query(ctx, typ, flags, data, each)
}

// eachNfnlAttr calls fn on each top-level attribute of one nfnetlink answer
// (after its nfgenmsg).
func eachNfnlAttr(m netlink.Message, fn func(typ uint16, v []byte) error) error {
	if len(m.Data) < nfgenmsgLen {
		return fmt.Errorf("short nfnetlink message (%d bytes)", len(m.Data))
	}
	return walkAttrs(m.Data[nfgenmsgLen:], fn)
}

// walkAttrs calls fn on each netlink attribute in b, its type without
// flags, in place: no copy, no allocation.
func walkAttrs(b []byte, fn func(typ uint16, v []byte) error) error {
	for len(b) >= nlaHeaderLen {
		l := int(binary.NativeEndian.Uint16(b))
		if l < nlaHeaderLen || l > len(b) {
			return fmt.Errorf("malformed netlink attribute (length %d of %d bytes)", l, len(b))
		}
		if err := fn(binary.NativeEndian.Uint16(b[2:])&nlaTypeMask, b[nlaHeaderLen:l]); err != nil {
			return err
		}
		b = b[min((l+3)&^3, len(b)):]
	}
	return nil
}

// cString is a NUL-terminated netlink string.
func cString(b []byte) string { return strings.TrimRight(string(b), "\x00") }
