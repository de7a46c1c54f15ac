//go:build linux

package linux

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nlenc"
	"github.com/moby/ipvs"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/ipvstable"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
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

	// fwdMask is IP_VS_CONN_F_FWD_MASK: the forwarding bits of a
	// destination's conn flags.
	fwdMask = ipvs.ConnectionFlagFwdMask
)

// Info is IPVS_CMD_GET_INFO: version and connection table size.
func (r *IPVSReader) Info(ctx context.Context) (ipvstable.Info, error) {
	return read(ctx, r, "read IPVS info", ipvsCmdGetInfo, 0, nil, decodeInfo)
}

// Timeouts is IPVS_CMD_GET_CONFIG: the tcp, tcpfin and udp timeouts.
func (r *IPVSReader) Timeouts(ctx context.Context) (ipvstable.Timeouts, error) {
	return read(ctx, r, "read IPVS timeouts", ipvsCmdGetConfig, 0, nil, decodeTimeouts)
}

// Daemons dumps the connection-sync daemons (none on most nodes).
func (r *IPVSReader) Daemons(ctx context.Context) ([]ipvstable.Daemon, error) {
	return read(ctx, r, "dump IPVS sync daemons", ipvsCmdGetDaemon, unix.NLM_F_DUMP, nil, decodeDaemons)
}

// Services dumps every virtual service, then each one's destinations.
func (r *IPVSReader) Services(ctx context.Context) ([]ipvstable.Service, error) {
	svcs, err := read(ctx, r, "dump IPVS services", ipvsCmdGetService, unix.NLM_F_DUMP, nil, decodeServices)
	if err != nil {
		return nil, err
	}
	for i := range svcs {
		svc := &svcs[i]
		req, err := encodeServiceKey(svc)
		if err != nil {
			return nil, err
		}
		svc.Dests, err = read(ctx, r, "dump destinations of "+svcLabel(svc), ipvsCmdGetDest, unix.NLM_F_DUMP, req,
			func(msgs []netlink.Message) ([]ipvstable.Dest, error) { return decodeDests(msgs, svc.AF) })
		if err != nil {
			return nil, err
		}
	}
	return svcs, nil
}

func svcLabel(s *ipvstable.Service) string {
	if s.FWMark != 0 {
		return fmt.Sprintf("fwmark %d", s.FWMark)
	}
	return fmt.Sprintf("proto %d %s", s.Protocol, netip.AddrPortFrom(s.Addr, s.Port))
}

func decodeInfo(msgs []netlink.Message) (ipvstable.Info, error) {
	var info ipvstable.Info
	err := decodeU32s(msgs, map[uint16]*uint32{
		infoAttrVersion:     &info.Version,
		infoAttrConnTabSize: &info.ConnTabSize,
	})
	return info, err
}

func decodeTimeouts(msgs []netlink.Message) (ipvstable.Timeouts, error) {
	var t ipvstable.Timeouts
	err := decodeU32s(msgs, map[uint16]*uint32{
		cmdAttrTimeoutTCP: &t.TCP,
		cmdAttrTimeoutFin: &t.TCPFin,
		cmdAttrTimeoutUDP: &t.UDP,
	})
	return t, err
}

// decodeU32s reads answers made of u32 attributes into the fields named by
// their types; other attributes are skipped.
func decodeU32s(msgs []netlink.Message, fields map[uint16]*uint32) error {
	return eachAttr(msgs, func(ad *netlink.AttributeDecoder) {
		if f, ok := fields[ad.Type()]; ok {
			*f = ad.Uint32()
		}
	})
}

func decodeServices(msgs []netlink.Message) ([]ipvstable.Service, error) {
	return entries(msgs, cmdAttrService, decodeService)
}

func decodeDests(msgs []netlink.Message, svcAF uint16) ([]ipvstable.Dest, error) {
	return entries(msgs, cmdAttrDest, func(ad *netlink.AttributeDecoder) (ipvstable.Dest, error) {
		return decodeDest(ad, svcAF)
	})
}

func decodeDaemons(msgs []netlink.Message) ([]ipvstable.Daemon, error) {
	return entries(msgs, cmdAttrDaemon, decodeDaemon)
}

// decodeService reads IPVS_CMD_ATTR_SERVICE. The address's and netmask's
// meaning depend on the family, which may come after them, so raw values
// are kept until the end.
func decodeService(ad *netlink.AttributeDecoder) (ipvstable.Service, error) {
	var s ipvstable.Service
	var rawAddr, rawMask []byte
	var stats statsPick
	for ad.Next() {
		switch ad.Type() {
		case svcAttrAF:
			s.AF = ad.Uint16()
		case svcAttrProtocol:
			s.Protocol = model.Protocol(ad.Uint16())
		case svcAttrAddr:
			rawAddr = ad.Bytes()
		case svcAttrPort:
			s.Port = be16(ad)
		case svcAttrFWMark:
			s.FWMark = ad.Uint32()
		case svcAttrSchedName:
			s.Scheduler = ad.String()
		case svcAttrFlags:
			s.Flags = serviceFlags(ad)
		case svcAttrTimeout:
			s.Timeout = ad.Uint32()
		case svcAttrNetmask:
			rawMask = ad.Bytes()
		case svcAttrStats, svcAttrStats64:
			stats.decode(ad, ad.Type() == svcAttrStats64)
		case svcAttrPEName:
			s.PEName = ad.String()
		}
	}
	if err := ad.Err(); err != nil {
		return s, fmt.Errorf("decode service: %w", err)
	}
	if s.AF == 0 {
		return s, errors.New("service without address family")
	}
	if s.FWMark == 0 {
		s.Addr = decodeAddr(s.AF, rawAddr)
	}
	s.Netmask = decodeNetmask(s.AF, rawMask)
	s.Stats = stats.stats()
	return s, nil
}

// serviceFlags reads struct ip_vs_flags { flags, mask }.
func serviceFlags(ad *netlink.AttributeDecoder) model.Flags {
	var f model.Flags
	ad.Do(func(b []byte) error {
		if len(b) != 8 {
			return fmt.Errorf("service flags of %d bytes, want 8", len(b))
		}
		f = model.Flags(nlenc.Uint32(b[:4]) & nlenc.Uint32(b[4:]))
		return nil
	})
	return f
}

// decodeDest reads IPVS_CMD_ATTR_DEST; a destination without its own
// family (older kernels) has its service's.
func decodeDest(ad *netlink.AttributeDecoder, svcAF uint16) (ipvstable.Dest, error) {
	d := ipvstable.Dest{AF: svcAF}
	var rawAddr []byte
	var stats statsPick
	counters := map[uint16]*uint32{
		destAttrUThresh:      &d.UThreshold,
		destAttrLThresh:      &d.LThreshold,
		destAttrActiveConns:  &d.ActiveConns,
		destAttrInactConns:   &d.InactConns,
		destAttrPersistConns: &d.PersistConns,
	}
	for ad.Next() {
		if f, ok := counters[ad.Type()]; ok {
			*f = ad.Uint32()
			continue
		}
		switch ad.Type() {
		case destAttrAddr:
			rawAddr = ad.Bytes()
		case destAttrPort:
			d.Port = be16(ad)
		case destAttrFwdMethod:
			d.Forward = model.Forwarding(ad.Uint32() & fwdMask)
		case destAttrWeight:
			d.Weight = int32(ad.Uint32())
		case destAttrStats, destAttrStats64:
			stats.decode(ad, ad.Type() == destAttrStats64)
		case destAttrAddrFamily:
			d.AF = ad.Uint16()
		case destAttrTunType:
			d.TunType = ad.Uint8()
		case destAttrTunPort:
			d.TunPort = be16(ad)
		case destAttrTunFlags:
			d.TunFlags = ad.Uint16()
		}
	}
	if err := ad.Err(); err != nil {
		return d, fmt.Errorf("decode destination: %w", err)
	}
	d.Addr = decodeAddr(d.AF, rawAddr)
	d.Stats = stats.stats()
	return d, nil
}

// statsPick keeps a service's or destination's counters from STATS64, or
// from STATS on a kernel too old to send STATS64.
type statsPick struct {
	s32, s64 ipvstable.Stats
	has64    bool
}

// decode reads the STATS or STATS64 nest under ad; a malformed one fails
// ad, so its error is reported with the rest.
func (p *statsPick) decode(ad *netlink.AttributeDecoder, is64 bool) {
	dst := &p.s32
	if is64 {
		dst, p.has64 = &p.s64, true
	}
	ad.Nested(func(nad *netlink.AttributeDecoder) error {
		if err := decodeStats(nad, dst); err != nil {
			return fmt.Errorf("decode stats: %w", err)
		}
		return nil
	})
}

func (p *statsPick) stats() ipvstable.Stats {
	if p.has64 {
		return p.s64
	}
	return p.s32
}

// decodeStats reads a STATS or STATS64 nest; each counter is as wide as
// its attribute (4 or 8 bytes).
func decodeStats(ad *netlink.AttributeDecoder, s *ipvstable.Stats) error {
	fields := [...]*uint64{nil, &s.Conns, &s.InPkts, &s.OutPkts, &s.InBytes, &s.OutBytes,
		&s.CPS, &s.InPPS, &s.OutPPS, &s.InBPS, &s.OutBPS}
	for ad.Next() {
		t := int(ad.Type())
		if t <= 0 || t >= len(fields) {
			continue // IPVS_STATS_ATTR_PAD and newer attributes
		}
		ad.Do(func(b []byte) error {
			switch len(b) {
			case 8:
				*fields[t] = nlenc.Uint64(b)
			case 4:
				*fields[t] = uint64(nlenc.Uint32(b))
			default:
				return fmt.Errorf("counter %d of %d bytes", t, len(b))
			}
			return nil
		})
	}
	return ad.Err()
}

func decodeDaemon(ad *netlink.AttributeDecoder) (ipvstable.Daemon, error) {
	var d ipvstable.Daemon
	for ad.Next() {
		switch ad.Type() {
		case daemonAttrState:
			d.State = ad.Uint32()
		case daemonAttrMcastIfn:
			d.MCastIfn = ad.String()
		case daemonAttrSyncID:
			d.SyncID = ad.Uint32()
		case daemonAttrSyncMaxLen:
			d.SyncMaxLen = uint32(ad.Uint16())
		case daemonAttrMcastGroup:
			if b := ad.Bytes(); len(b) >= 4 {
				d.MCastGroup = netip.AddrFrom4([4]byte(b[:4]))
			}
		case daemonAttrMcastGrp6:
			if b := ad.Bytes(); len(b) >= 16 && !d.MCastGroup.IsValid() {
				d.MCastGroup = netip.AddrFrom16([16]byte(b[:16]))
			}
		case daemonAttrMcastPort:
			d.MCastPort = ad.Uint16()
		case daemonAttrMcastTTL:
			d.MCastTTL = ad.Uint8()
		}
	}
	if err := ad.Err(); err != nil {
		return d, fmt.Errorf("decode sync daemon: %w", err)
	}
	return d, nil
}

// encodeServiceKey names a service in a request, as the kernel expects it:
// family plus mark, or family, protocol, address and port, nested in
// IPVS_CMD_ATTR_SERVICE (the encoder sets NLA_F_NESTED, which strict
// kernels validate).
func encodeServiceKey(s *ipvstable.Service) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.Nested(cmdAttrService, func(inner *netlink.AttributeEncoder) error {
		inner.Uint16(svcAttrAF, s.AF)
		if s.FWMark != 0 {
			inner.Uint32(svcAttrFWMark, s.FWMark)
			return nil
		}
		var addr [16]byte
		if s.Addr.Is4() {
			a4 := s.Addr.As4()
			copy(addr[:], a4[:])
		} else {
			addr = s.Addr.As16()
		}
		inner.Uint16(svcAttrProtocol, uint16(s.Protocol))
		inner.Bytes(svcAttrAddr, addr[:])
		inner.Bytes(svcAttrPort, binary.BigEndian.AppendUint16(nil, s.Port))
		return nil
	})
	b, err := ae.Encode()
	if err != nil {
		return nil, fmt.Errorf("encode service key: %w", err)
	}
	return b, nil
}

// decodeAddr reads union nf_inet_addr: four bytes for IPv4, sixteen for IPv6.
func decodeAddr(af uint16, b []byte) netip.Addr {
	switch {
	case af == ipvstable.AFInet6 && len(b) >= 16:
		return netip.AddrFrom16([16]byte(b[:16]))
	case af == ipvstable.AFInet && len(b) >= 4:
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.Addr{}
}

// decodeNetmask: for IPv4 the kernel keeps the mask in network order; for
// IPv6 it keeps a prefix length as a host-order number.
func decodeNetmask(af uint16, b []byte) uint32 {
	if len(b) < 4 {
		return ipvstable.DefaultNetmask(af)
	}
	if af == ipvstable.AFInet6 {
		return nlenc.Uint32(b)
	}
	return binary.BigEndian.Uint32(b)
}

// be16 reads a port, which the kernel sends in network order.
func be16(ad *netlink.AttributeDecoder) uint16 {
	var v uint16
	ad.Do(func(b []byte) error {
		if len(b) != 2 {
			return fmt.Errorf("attribute %d is not a 16-bit port; length: %d", ad.Type(), len(b))
		}
		v = binary.BigEndian.Uint16(b)
		return nil
	})
	return v
}
