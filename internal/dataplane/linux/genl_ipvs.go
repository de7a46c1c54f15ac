//go:build linux

package linux

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nlenc"

	"github.com/kube-ipvs/kube-ipvs/internal/ipvsadm"
)

// IPVS generic netlink attributes (include/uapi/linux/ip_vs.h).
const (
	cmdAttrService    = 1
	cmdAttrDest       = 2
	cmdAttrDaemon     = 3
	cmdAttrTimeoutTCP = 4
	cmdAttrTimeoutFin = 5
	cmdAttrTimeoutUDP = 6

	svcAttrAF        = 1
	svcAttrProtocol  = 2
	svcAttrAddr      = 3
	svcAttrPort      = 4
	svcAttrFWMark    = 5
	svcAttrSchedName = 6
	svcAttrFlags     = 7
	svcAttrTimeout   = 8
	svcAttrNetmask   = 9
	svcAttrStats     = 10
	svcAttrPEName    = 11
	svcAttrStats64   = 12

	destAttrAddr         = 1
	destAttrPort         = 2
	destAttrFwdMethod    = 3
	destAttrWeight       = 4
	destAttrUThresh      = 5
	destAttrLThresh      = 6
	destAttrActiveConns  = 7
	destAttrInactConns   = 8
	destAttrPersistConns = 9
	destAttrStats        = 10
	destAttrAddrFamily   = 11
	destAttrStats64      = 12
	destAttrTunType      = 13
	destAttrTunPort      = 14
	destAttrTunFlags     = 15

	daemonAttrState      = 1
	daemonAttrMcastIfn   = 2
	daemonAttrSyncID     = 3
	daemonAttrSyncMaxLen = 4
	daemonAttrMcastGroup = 5
	daemonAttrMcastGrp6  = 6
	daemonAttrMcastPort  = 7
	daemonAttrMcastTTL   = 8

	infoAttrVersion     = 1
	infoAttrConnTabSize = 2

	// nlaTypeMask drops NLA_F_NESTED and NLA_F_NET_BYTEORDER from a type.
	nlaTypeMask = 0x3fff
)

// Info is IPVS_CMD_GET_INFO: version and connection table size.
func (r *IPVSReader) Info(ctx context.Context) (ipvsadm.Info, error) {
	msgs, err := r.execute(ctx, ipvsCmdGetInfo, 0, nil)
	if err != nil {
		return ipvsadm.Info{}, fmt.Errorf("read IPVS info: %w", err)
	}
	var info ipvsadm.Info
	for _, m := range msgs {
		as, err := genlAttrs(m)
		if err != nil {
			return info, fmt.Errorf("read IPVS info: %w", err)
		}
		for _, a := range as {
			switch a.Type & nlaTypeMask {
			case infoAttrVersion:
				info.Version = u32(a.Data)
			case infoAttrConnTabSize:
				info.ConnTabSize = u32(a.Data)
			}
		}
	}
	return info, nil
}

// Timeouts is IPVS_CMD_GET_CONFIG: the tcp, tcpfin and udp timeouts.
func (r *IPVSReader) Timeouts(ctx context.Context) (ipvsadm.Timeouts, error) {
	msgs, err := r.execute(ctx, ipvsCmdGetConfig, 0, nil)
	if err != nil {
		return ipvsadm.Timeouts{}, fmt.Errorf("read IPVS timeouts: %w", err)
	}
	var t ipvsadm.Timeouts
	for _, m := range msgs {
		as, err := genlAttrs(m)
		if err != nil {
			return t, fmt.Errorf("read IPVS timeouts: %w", err)
		}
		for _, a := range as {
			switch a.Type & nlaTypeMask {
			case cmdAttrTimeoutTCP:
				t.TCP = u32(a.Data)
			case cmdAttrTimeoutFin:
				t.TCPFin = u32(a.Data)
			case cmdAttrTimeoutUDP:
				t.UDP = u32(a.Data)
			}
		}
	}
	return t, nil
}

// Services dumps every virtual service, then each one's destinations.
func (r *IPVSReader) Services(ctx context.Context) ([]ipvsadm.Service, error) {
	msgs, err := r.execute(ctx, ipvsCmdGetService, netlink.Dump, nil)
	if err != nil {
		return nil, fmt.Errorf("dump IPVS services: %w", err)
	}
	svcs := make([]ipvsadm.Service, 0, len(msgs))
	for _, m := range msgs {
		nested, err := cmdNested(m, cmdAttrService)
		if err != nil {
			return nil, fmt.Errorf("dump IPVS services: %w", err)
		}
		svc, err := decodeService(nested)
		if err != nil {
			return nil, fmt.Errorf("dump IPVS services: %w", err)
		}
		svcs = append(svcs, svc)
	}
	for i := range svcs {
		if svcs[i].Dests, err = r.dests(ctx, &svcs[i]); err != nil {
			return nil, err
		}
	}
	return svcs, nil
}

// dests dumps one service's destinations.
func (r *IPVSReader) dests(ctx context.Context, svc *ipvsadm.Service) ([]ipvsadm.Dest, error) {
	attrs, err := encodeServiceKey(svc)
	if err != nil {
		return nil, err
	}
	msgs, err := r.execute(ctx, ipvsCmdGetDest, netlink.Dump, attrs)
	if err != nil {
		return nil, fmt.Errorf("dump destinations of %s: %w", svcLabel(svc), err)
	}
	dests := make([]ipvsadm.Dest, 0, len(msgs))
	for _, m := range msgs {
		nested, err := cmdNested(m, cmdAttrDest)
		if err != nil {
			return nil, fmt.Errorf("dump destinations of %s: %w", svcLabel(svc), err)
		}
		dests = append(dests, decodeDest(nested, svc.AF))
	}
	return dests, nil
}

// Daemons dumps the connection-sync daemons (none on most nodes).
func (r *IPVSReader) Daemons(ctx context.Context) ([]ipvsadm.Daemon, error) {
	msgs, err := r.execute(ctx, ipvsCmdGetDaemon, netlink.Dump, nil)
	if err != nil {
		return nil, fmt.Errorf("dump IPVS sync daemons: %w", err)
	}
	var ds []ipvsadm.Daemon
	for _, m := range msgs {
		nested, err := cmdNested(m, cmdAttrDaemon)
		if err != nil {
			return nil, fmt.Errorf("dump IPVS sync daemons: %w", err)
		}
		ds = append(ds, decodeDaemon(nested))
	}
	return ds, nil
}

func svcLabel(s *ipvsadm.Service) string {
	if s.FWMark != 0 {
		return fmt.Sprintf("fwmark %d", s.FWMark)
	}
	return fmt.Sprintf("proto %d %s", s.Protocol, netip.AddrPortFrom(s.Addr, s.Port))
}

// cmdNested finds the nested attribute typ of a reply and splits it.
func cmdNested(m netlink.Message, typ uint16) ([]netlink.Attribute, error) {
	as, err := genlAttrs(m)
	if err != nil {
		return nil, err
	}
	for _, a := range as {
		if a.Type&nlaTypeMask == typ {
			inner, err := netlink.UnmarshalAttributes(a.Data)
			if err != nil {
				return nil, fmt.Errorf("decode nested attribute %d: %w", typ, err)
			}
			return inner, nil
		}
	}
	return nil, fmt.Errorf("reply without attribute %d", typ)
}

// decodeService reads IPVS_CMD_ATTR_SERVICE. The address's and netmask's
// meaning depend on the family, which may come after them, so raw values
// are kept until the end.
func decodeService(as []netlink.Attribute) (ipvsadm.Service, error) {
	var s ipvsadm.Service
	var rawAddr, rawMask []byte
	var stats32, stats64 []byte
	for _, a := range as {
		switch a.Type & nlaTypeMask {
		case svcAttrAF:
			s.AF = u16(a.Data)
		case svcAttrProtocol:
			s.Protocol = u16(a.Data)
		case svcAttrAddr:
			rawAddr = a.Data
		case svcAttrPort:
			s.Port = be16(a.Data)
		case svcAttrFWMark:
			s.FWMark = u32(a.Data)
		case svcAttrSchedName:
			s.Scheduler = cString(a.Data)
		case svcAttrFlags:
			if len(a.Data) >= 8 { // struct ip_vs_flags { flags, mask }
				s.Flags = u32(a.Data[:4]) & u32(a.Data[4:8])
			}
		case svcAttrTimeout:
			s.Timeout = u32(a.Data)
		case svcAttrNetmask:
			rawMask = a.Data
		case svcAttrStats:
			stats32 = a.Data
		case svcAttrPEName:
			s.PEName = cString(a.Data)
		case svcAttrStats64:
			stats64 = a.Data
		}
	}
	if s.AF == 0 {
		return s, fmt.Errorf("service without address family")
	}
	if s.FWMark == 0 {
		s.Addr = decodeAddr(s.AF, rawAddr)
	}
	s.Netmask = decodeNetmask(s.AF, rawMask)
	var err error
	if stats64 != nil {
		s.Stats, err = decodeStats(stats64)
	} else if stats32 != nil {
		s.Stats, err = decodeStats(stats32)
	}
	return s, err
}

// decodeDest reads IPVS_CMD_ATTR_DEST; a destination without its own
// family (older kernels) has its service's.
func decodeDest(as []netlink.Attribute, svcAF uint16) ipvsadm.Dest {
	d := ipvsadm.Dest{AF: svcAF}
	var rawAddr, stats32, stats64 []byte
	for _, a := range as {
		switch a.Type & nlaTypeMask {
		case destAttrAddr:
			rawAddr = a.Data
		case destAttrPort:
			d.Port = be16(a.Data)
		case destAttrFwdMethod:
			d.ConnFlags = u32(a.Data)
		case destAttrWeight:
			d.Weight = int32(u32(a.Data))
		case destAttrUThresh:
			d.UThreshold = u32(a.Data)
		case destAttrLThresh:
			d.LThreshold = u32(a.Data)
		case destAttrActiveConns:
			d.ActiveConns = u32(a.Data)
		case destAttrInactConns:
			d.InactConns = u32(a.Data)
		case destAttrPersistConns:
			d.PersistConns = u32(a.Data)
		case destAttrStats:
			stats32 = a.Data
		case destAttrAddrFamily:
			d.AF = u16(a.Data)
		case destAttrStats64:
			stats64 = a.Data
		case destAttrTunType:
			if len(a.Data) > 0 {
				d.TunType = a.Data[0]
			}
		case destAttrTunPort:
			d.TunPort = be16(a.Data)
		case destAttrTunFlags:
			d.TunFlags = u16(a.Data)
		}
	}
	d.Addr = decodeAddr(d.AF, rawAddr)
	if stats64 != nil {
		d.Stats, _ = decodeStats(stats64)
	} else if stats32 != nil {
		d.Stats, _ = decodeStats(stats32)
	}
	return d
}

// decodeStats reads a STATS or STATS64 nest; each counter is as wide as
// its attribute (4 or 8 bytes).
func decodeStats(b []byte) (ipvsadm.Stats, error) {
	as, err := netlink.UnmarshalAttributes(b)
	if err != nil {
		return ipvsadm.Stats{}, fmt.Errorf("decode stats: %w", err)
	}
	var s ipvsadm.Stats
	fields := [...]*uint64{nil, &s.Conns, &s.InPkts, &s.OutPkts, &s.InBytes, &s.OutBytes,
		&s.CPS, &s.InPPS, &s.OutPPS, &s.InBPS, &s.OutBPS}
	for _, a := range as {
		t := int(a.Type & nlaTypeMask)
		if t <= 0 || t >= len(fields) {
			continue // IPVS_STATS_ATTR_PAD and newer attributes
		}
		switch len(a.Data) {
		case 8:
			*fields[t] = nlenc.Uint64(a.Data)
		case 4:
			*fields[t] = uint64(nlenc.Uint32(a.Data))
		}
	}
	return s, nil
}

func decodeDaemon(as []netlink.Attribute) ipvsadm.Daemon {
	var d ipvsadm.Daemon
	for _, a := range as {
		switch a.Type & nlaTypeMask {
		case daemonAttrState:
			d.State = u32(a.Data)
		case daemonAttrMcastIfn:
			d.MCastIfn = cString(a.Data)
		case daemonAttrSyncID:
			d.SyncID = u32(a.Data)
		case daemonAttrSyncMaxLen:
			d.SyncMaxLen = uint32(u16(a.Data))
		case daemonAttrMcastGroup:
			if len(a.Data) >= 4 {
				d.MCastGroup = netip.AddrFrom4([4]byte(a.Data[:4]))
			}
		case daemonAttrMcastGrp6:
			if len(a.Data) >= 16 && !d.MCastGroup.IsValid() {
				d.MCastGroup = netip.AddrFrom16([16]byte(a.Data[:16]))
			}
		case daemonAttrMcastPort:
			d.MCastPort = u16(a.Data)
		case daemonAttrMcastTTL:
			if len(a.Data) > 0 {
				d.MCastTTL = a.Data[0]
			}
		}
	}
	return d
}

// encodeServiceKey names a service in a request, as the kernel expects it:
// family plus mark, or family, protocol, address and port.
func encodeServiceKey(s *ipvsadm.Service) ([]byte, error) {
	inner := netlink.NewAttributeEncoder()
	inner.Uint16(svcAttrAF, s.AF)
	if s.FWMark != 0 {
		inner.Uint32(svcAttrFWMark, s.FWMark)
	} else {
		var addr [16]byte
		if s.Addr.Is4() {
			a4 := s.Addr.As4()
			copy(addr[:], a4[:])
		} else {
			addr = s.Addr.As16()
		}
		inner.Uint16(svcAttrProtocol, s.Protocol)
		inner.Bytes(svcAttrAddr, addr[:])
		inner.Bytes(svcAttrPort, binary.BigEndian.AppendUint16(nil, s.Port))
	}
	innerBytes, err := inner.Encode()
	if err != nil {
		return nil, fmt.Errorf("encode service key: %w", err)
	}
	outer := netlink.NewAttributeEncoder()
	outer.Bytes(cmdAttrService|unixNLAFNested, innerBytes)
	return outer.Encode()
}

// unixNLAFNested marks a nested attribute (NLA_F_NESTED), which strict
// kernels validate.
const unixNLAFNested = 0x8000

// decodeAddr reads union nf_inet_addr: four bytes for IPv4, sixteen for IPv6.
func decodeAddr(af uint16, b []byte) netip.Addr {
	switch {
	case af == ipvsadm.AFInet6 && len(b) >= 16:
		return netip.AddrFrom16([16]byte(b[:16]))
	case af == ipvsadm.AFInet && len(b) >= 4:
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.Addr{}
}

// decodeNetmask: for IPv4 the kernel keeps the mask in network order; for
// IPv6 it keeps a prefix length as a host-order number.
func decodeNetmask(af uint16, b []byte) uint32 {
	if len(b) < 4 {
		return ipvsadm.DefaultNetmask(af)
	}
	if af == ipvsadm.AFInet6 {
		return nlenc.Uint32(b)
	}
	return binary.BigEndian.Uint32(b)
}

func u16(b []byte) uint16 {
	if len(b) < 2 {
		return 0
	}
	return nlenc.Uint16(b[:2])
}

func u32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return nlenc.Uint32(b[:4])
}

func be16(b []byte) uint16 {
	if len(b) < 2 {
		return 0
	}
	return binary.BigEndian.Uint16(b)
}

func nativeUint16(b []byte) uint16 { return u16(b) }

func cString(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\x00")
	return s
}
