//go:build linux

package linux

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nlenc"

	"github.com/kube-ipvs/kube-ipvs/internal/ipvsadm"
)

// encode builds an attribute list the way the kernel sends it.
func encode(t *testing.T, fn func(ae *netlink.AttributeEncoder)) []netlink.Attribute {
	t.Helper()
	ae := netlink.NewAttributeEncoder()
	fn(ae)
	b, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	as, err := netlink.UnmarshalAttributes(b)
	if err != nil {
		t.Fatal(err)
	}
	return as
}

func stats64(t *testing.T, base uint64) []byte {
	t.Helper()
	ae := netlink.NewAttributeEncoder()
	for typ := uint16(1); typ <= 10; typ++ {
		ae.Uint64(typ, base+uint64(typ))
	}
	ae.Uint64(11, 0) // IPVS_STATS_ATTR_PAD
	b, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeService(t *testing.T) {
	flags := make([]byte, 8)
	nlenc.PutUint32(flags[:4], ipvsadm.FlagPersistent|ipvsadm.FlagHashed|ipvsadm.FlagSched1)
	nlenc.PutUint32(flags[4:], 0xffffffff)
	v4 := [16]byte{10, 96, 0, 1}
	cases := []struct {
		name  string
		attrs func(ae *netlink.AttributeEncoder)
		want  ipvsadm.Service
	}{{
		name: "IPv4 TCP, persistent with a /24 mask, 64-bit stats",
		attrs: func(ae *netlink.AttributeEncoder) {
			ae.Uint16(svcAttrProtocol, ipvsadm.ProtoTCP)
			ae.Bytes(svcAttrAddr, v4[:]) // before the family, as the kernel may send it
			ae.Uint16(svcAttrAF, ipvsadm.AFInet)
			ae.Bytes(svcAttrPort, binary.BigEndian.AppendUint16(nil, 443))
			ae.String(svcAttrSchedName, "sh")
			ae.Bytes(svcAttrFlags, flags)
			ae.Uint32(svcAttrTimeout, 600)
			ae.Bytes(svcAttrNetmask, []byte{255, 255, 255, 0})
			ae.Bytes(svcAttrStats64|unixNLAFNested, stats64(t, 1<<40))
		},
		want: ipvsadm.Service{AF: ipvsadm.AFInet, Protocol: ipvsadm.ProtoTCP, Addr: netip.MustParseAddr("10.96.0.1"), Port: 443,
			Scheduler: "sh", Flags: ipvsadm.FlagPersistent | ipvsadm.FlagHashed | ipvsadm.FlagSched1, Timeout: 600, Netmask: 0xffffff00,
			Stats: ipvsadm.Stats{Conns: 1<<40 + 1, InPkts: 1<<40 + 2, OutPkts: 1<<40 + 3, InBytes: 1<<40 + 4, OutBytes: 1<<40 + 5,
				CPS: 1<<40 + 6, InPPS: 1<<40 + 7, OutPPS: 1<<40 + 8, InBPS: 1<<40 + 9, OutBPS: 1<<40 + 10}},
	}, {
		name: "IPv6 fwmark with a /64 prefix and a persistence engine",
		attrs: func(ae *netlink.AttributeEncoder) {
			ae.Uint16(svcAttrAF, ipvsadm.AFInet6)
			ae.Uint32(svcAttrFWMark, 9)
			ae.String(svcAttrSchedName, "sed")
			ae.String(svcAttrPEName, "sip")
			ae.Uint32(svcAttrNetmask, 64) // a host-order prefix length for IPv6
		},
		want: ipvsadm.Service{AF: ipvsadm.AFInet6, FWMark: 9, Scheduler: "sed", PEName: "sip", Netmask: 64},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := decodeService(encode(t, c.attrs))
			if err != nil {
				t.Fatal(err)
			}
			if got.Dests != nil || c.want.Dests != nil {
				t.Fatalf("unexpected dests %v", got.Dests)
			}
			if got.AF != c.want.AF || got.Protocol != c.want.Protocol || got.Addr != c.want.Addr || got.Port != c.want.Port ||
				got.FWMark != c.want.FWMark || got.Scheduler != c.want.Scheduler || got.Flags != c.want.Flags ||
				got.Timeout != c.want.Timeout || got.Netmask != c.want.Netmask || got.PEName != c.want.PEName || got.Stats != c.want.Stats {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestDecodeDest(t *testing.T) {
	v6 := netip.MustParseAddr("fd00:10:244::5").As16()
	as := encode(t, func(ae *netlink.AttributeEncoder) {
		ae.Bytes(destAttrAddr, v6[:])
		ae.Bytes(destAttrPort, binary.BigEndian.AppendUint16(nil, 6443))
		ae.Uint32(destAttrFwdMethod, ipvsadm.FwdTunnel)
		ae.Uint32(destAttrWeight, 0)
		ae.Uint32(destAttrUThresh, 100)
		ae.Uint32(destAttrLThresh, 50)
		ae.Uint32(destAttrActiveConns, 3)
		ae.Uint32(destAttrInactConns, 4)
		ae.Uint32(destAttrPersistConns, 5)
		ae.Uint16(destAttrAddrFamily, ipvsadm.AFInet6)
		ae.Uint8(destAttrTunType, ipvsadm.TunGUE)
		ae.Bytes(destAttrTunPort, binary.BigEndian.AppendUint16(nil, 6080))
		ae.Uint16(destAttrTunFlags, 1)
		ae.Bytes(destAttrStats64|unixNLAFNested, stats64(t, 0))
	})
	got := decodeDest(as, ipvsadm.AFInet) // the dest's own family wins
	want := ipvsadm.Dest{AF: ipvsadm.AFInet6, Addr: netip.AddrFrom16(v6), Port: 6443, ConnFlags: ipvsadm.FwdTunnel,
		UThreshold: 100, LThreshold: 50, ActiveConns: 3, InactConns: 4, PersistConns: 5,
		TunType: ipvsadm.TunGUE, TunPort: 6080, TunFlags: 1,
		Stats: ipvsadm.Stats{Conns: 1, InPkts: 2, OutPkts: 3, InBytes: 4, OutBytes: 5, CPS: 6, InPPS: 7, OutPPS: 8, InBPS: 9, OutBPS: 10}}
	if got != want {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// An older kernel sends 32-bit STATS only, and no destination family.
func TestDecodeDestOldKernel(t *testing.T) {
	ae := netlink.NewAttributeEncoder()
	ae.Uint32(1, 7)
	ae.Uint64(4, 1<<33)
	st, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	as := encode(t, func(ae *netlink.AttributeEncoder) {
		ae.Bytes(destAttrAddr, []byte{10, 244, 1, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
		ae.Bytes(destAttrPort, []byte{0x1f, 0x90})
		ae.Uint32(destAttrWeight, 1)
		ae.Bytes(destAttrStats|unixNLAFNested, st)
	})
	got := decodeDest(as, ipvsadm.AFInet)
	if got.AF != ipvsadm.AFInet || got.Addr != netip.MustParseAddr("10.244.1.5") || got.Port != 8080 ||
		got.Weight != 1 || got.Stats.Conns != 7 || got.Stats.InBytes != 1<<33 {
		t.Errorf("got %+v", got)
	}
}

func TestEncodeServiceKey(t *testing.T) {
	svc := ipvsadm.Service{AF: ipvsadm.AFInet, Protocol: ipvsadm.ProtoUDP, Addr: netip.MustParseAddr("10.96.0.10"), Port: 53}
	b, err := encodeServiceKey(&svc)
	if err != nil {
		t.Fatal(err)
	}
	outer, err := netlink.UnmarshalAttributes(b)
	if err != nil || len(outer) != 1 || outer[0].Type&nlaTypeMask != cmdAttrService {
		t.Fatalf("outer %v, %v", outer, err)
	}
	inner, err := netlink.UnmarshalAttributes(outer[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeService(inner)
	if err != nil {
		t.Fatal(err)
	}
	if back.AF != svc.AF || back.Protocol != svc.Protocol || back.Addr != svc.Addr || back.Port != svc.Port {
		t.Errorf("round trip: got %+v, want %+v", back, svc)
	}
}
