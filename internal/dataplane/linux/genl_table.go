//go:build linux

package linux

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/internal/ipvstable"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// The table read (Observe, Scan, Conns) decodes the IPVS answers in place,
// keeping only what the model holds of a service or destination: it runs on
// every rescan over the whole table, a hundred thousand destinations and
// more, where decoding each answer's counters and rates (what ipvsadm
// shows, genl_ipvs.go) would cost more than the kernel's answering.

// eachEntry calls fn on the payload of every attribute typ of one generic
// netlink answer; an answer without one is an error.
func eachEntry(data []byte, typ uint16, fn func(v []byte) error) error {
	if len(data) < genlHeaderLen {
		return fmt.Errorf("short generic netlink message (%d bytes)", len(data))
	}
	found := false
	err := walkAttrs(data[genlHeaderLen:], func(t uint16, v []byte) error {
		if t != typ {
			return nil
		}
		found = true
		return fn(v)
	})
	if err == nil && !found {
		err = fmt.Errorf("reply without attribute %d", typ)
	}
	return err
}

// tableService reads a dumped service (the attributes inside
// IPVS_CMD_ATTR_SERVICE) as the model has it. A fwmark service has no
// protocol, address or port; its key keeps the family as the unspecified
// address.
func tableService(b []byte) (model.VirtualServer, error) {
	var vs model.VirtualServer
	var af, proto, port uint16
	var mark uint32
	var rawAddr []byte
	err := walkAttrs(b, func(typ uint16, v []byte) error {
		switch typ {
		case svcAttrAF:
			return u16(v, &af)
		case svcAttrProtocol:
			return u16(v, &proto)
		case svcAttrAddr:
			rawAddr = v
		case svcAttrPort:
			if len(v) != 2 {
				return fmt.Errorf("service port of %d bytes", len(v))
			}
			port = binary.BigEndian.Uint16(v)
		case svcAttrFWMark:
			return u32(v, &mark)
		case svcAttrSchedName:
			vs.Scheduler = model.Scheduler(cString(v))
		case svcAttrFlags:
			if len(v) != 8 {
				return fmt.Errorf("service flags of %d bytes, want 8", len(v))
			}
			vs.Flags = model.Flags(binary.NativeEndian.Uint32(v[:4]) & binary.NativeEndian.Uint32(v[4:]))
		case svcAttrTimeout:
			return u32(v, &vs.Timeout)
		}
		return nil
	})
	if err != nil {
		return vs, fmt.Errorf("decode service: %w", err)
	}
	if af != ipvstable.AFInet && af != ipvstable.AFInet6 {
		return vs, fmt.Errorf("service with address family %d", af)
	}
	if mark != 0 {
		vs.Key = model.VSKey{FWMark: mark, Addr: netip.IPv4Unspecified()}
		if af == ipvstable.AFInet6 {
			vs.Key.Addr = netip.IPv6Unspecified()
		}
		return vs, nil
	}
	addr := decodeAddr(af, rawAddr)
	if !addr.IsValid() {
		return vs, fmt.Errorf("service %d:%d without a valid address", proto, port)
	}
	vs.Key = model.NewVSKey(model.Protocol(proto), addr, port)
	return vs, nil
}

// tableDest reads a dumped destination (the attributes inside
// IPVS_CMD_ATTR_DEST) as the model has it, with its connection counters;
// a destination without its own family (older kernels) has its service's.
func tableDest(b []byte, svcAF uint16) (realRead, error) {
	var r realRead
	af := svcAF
	var port uint16
	var fwd, weight uint32
	var rawAddr []byte
	err := walkAttrs(b, func(typ uint16, v []byte) error {
		switch typ {
		case destAttrAddr:
			rawAddr = v
		case destAttrPort:
			if len(v) != 2 {
				return fmt.Errorf("destination port of %d bytes", len(v))
			}
			port = binary.BigEndian.Uint16(v)
		case destAttrFwdMethod:
			return u32(v, &fwd)
		case destAttrWeight:
			return u32(v, &weight)
		case destAttrActiveConns:
			return u32(v, &r.c.Active)
		case destAttrInactConns:
			return u32(v, &r.c.Inactive)
		case destAttrAddrFamily:
			return u16(v, &af)
		}
		return nil
	})
	if err != nil {
		return r, fmt.Errorf("decode destination: %w", err)
	}
	addr := decodeAddr(af, rawAddr)
	if !addr.IsValid() {
		return r, fmt.Errorf("real server port %d: address family %d without a valid address", port, af)
	}
	r.rs = model.RealServer{Addr: netip.AddrPortFrom(addr, port), Weight: int(int32(weight)), Forward: model.Forwarding(fwd & fwdMask)}
	return r, nil
}

var errShortAttr = errors.New("attribute shorter than its type")

func u16(v []byte, dst *uint16) error {
	if len(v) < 2 {
		return errShortAttr
	}
	*dst = binary.NativeEndian.Uint16(v)
	return nil
}

func u32(v []byte, dst *uint32) error {
	if len(v) < 4 {
		return errShortAttr
	}
	*dst = binary.NativeEndian.Uint32(v)
	return nil
}
