//go:build linux

package linux

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nlenc"

	"github.com/kube-ipvs/kube-ipvs/internal/ipvstable"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// attrs encodes an attribute list the way the kernel sends it.
func attrs(t *testing.T, fn func(ae *netlink.AttributeEncoder)) []byte {
	t.Helper()
	ae := netlink.NewAttributeEncoder()
	fn(ae)
	b, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decoder reads an attribute list encoded by fn.
func decoder(t *testing.T, fn func(ae *netlink.AttributeEncoder)) *netlink.AttributeDecoder {
	t.Helper()
	ad, err := netlink.NewAttributeDecoder(attrs(t, fn))
	if err != nil {
		t.Fatal(err)
	}
	return ad
}

// answer is one generic netlink answer: the genl header, then attributes.
func answer(t *testing.T, fn func(ae *netlink.AttributeEncoder)) netlink.Message {
	t.Helper()
	return netlink.Message{Data: append([]byte{ipvsCmdGetDest, ipvsGenlVersion, 0, 0}, attrs(t, fn)...)}
}

// stats64 writes a STATS64 nest whose counter n is base+n.
func stats64(base uint64) func(ae *netlink.AttributeEncoder) error {
	return func(ae *netlink.AttributeEncoder) error {
		for typ := uint16(1); typ <= 10; typ++ {
			ae.Uint64(typ, base+uint64(typ))
		}
		ae.Uint64(11, 0) // IPVS_STATS_ATTR_PAD
		return nil
	}
}

func TestDecodeService(t *testing.T) {
	flags := make([]byte, 8)
	nlenc.PutUint32(flags[:4], uint32(model.FlagPersistent|model.FlagHashed|model.FlagSchedSH1))
	nlenc.PutUint32(flags[4:], 0xffffffff)
	v4 := [16]byte{10, 96, 0, 1}
	cases := []struct {
		name  string
		attrs func(ae *netlink.AttributeEncoder)
		want  ipvstable.Service
	}{{
		name: "IPv4 TCP, persistent with a /24 mask, 64-bit stats",
		attrs: func(ae *netlink.AttributeEncoder) {
			ae.Uint16(svcAttrProtocol, uint16(model.TCP))
			ae.Bytes(svcAttrAddr, v4[:]) // before the family, as the kernel may send it
			ae.Uint16(svcAttrAF, ipvstable.AFInet)
			ae.Bytes(svcAttrPort, binary.BigEndian.AppendUint16(nil, 443))
			ae.String(svcAttrSchedName, "sh")
			ae.Bytes(svcAttrFlags, flags)
			ae.Uint32(svcAttrTimeout, 600)
			ae.Bytes(svcAttrNetmask, []byte{255, 255, 255, 0})
			ae.Nested(svcAttrStats64, stats64(1<<40))
		},
		want: ipvstable.Service{AF: ipvstable.AFInet, Protocol: model.TCP, Addr: netip.MustParseAddr("10.96.0.1"), Port: 443,
			Scheduler: "sh", Flags: model.FlagPersistent | model.FlagHashed | model.FlagSchedSH1, Timeout: 600, Netmask: 0xffffff00,
			Stats: ipvstable.Stats{Conns: 1<<40 + 1, InPkts: 1<<40 + 2, OutPkts: 1<<40 + 3, InBytes: 1<<40 + 4, OutBytes: 1<<40 + 5,
				CPS: 1<<40 + 6, InPPS: 1<<40 + 7, OutPPS: 1<<40 + 8, InBPS: 1<<40 + 9, OutBPS: 1<<40 + 10}},
	}, {
		name: "IPv6 fwmark with a /64 prefix and a persistence engine",
		attrs: func(ae *netlink.AttributeEncoder) {
			ae.Uint16(svcAttrAF, ipvstable.AFInet6)
			ae.Uint32(svcAttrFWMark, 9)
			ae.String(svcAttrSchedName, "sed")
			ae.String(svcAttrPEName, "sip")
			ae.Uint32(svcAttrNetmask, 64) // a host-order prefix length for IPv6
		},
		want: ipvstable.Service{AF: ipvstable.AFInet6, FWMark: 9, Scheduler: "sed", PEName: "sip", Netmask: 64},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := decodeService(decoder(t, c.attrs))
			if err != nil {
				t.Fatal(err)
			}
			if got.Dests != nil {
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
	ad := decoder(t, func(ae *netlink.AttributeEncoder) {
		ae.Bytes(destAttrAddr, v6[:])
		ae.Bytes(destAttrPort, binary.BigEndian.AppendUint16(nil, 6443))
		ae.Uint32(destAttrFwdMethod, uint32(model.Tunnel))
		ae.Uint32(destAttrWeight, 0)
		ae.Uint32(destAttrUThresh, 100)
		ae.Uint32(destAttrLThresh, 50)
		ae.Uint32(destAttrActiveConns, 3)
		ae.Uint32(destAttrInactConns, 4)
		ae.Uint32(destAttrPersistConns, 5)
		ae.Uint16(destAttrAddrFamily, ipvstable.AFInet6)
		ae.Uint8(destAttrTunType, ipvstable.TunGUE)
		ae.Bytes(destAttrTunPort, binary.BigEndian.AppendUint16(nil, 6080))
		ae.Uint16(destAttrTunFlags, 1)
		ae.Nested(destAttrStats64, stats64(0))
	})
	got, err := decodeDest(ad, ipvstable.AFInet) // the dest's own family wins
	if err != nil {
		t.Fatal(err)
	}
	want := ipvstable.Dest{AF: ipvstable.AFInet6, Addr: netip.AddrFrom16(v6), Port: 6443, Forward: model.Tunnel,
		UThreshold: 100, LThreshold: 50, ActiveConns: 3, InactConns: 4, PersistConns: 5,
		TunType: ipvstable.TunGUE, TunPort: 6080, TunFlags: 1,
		Stats: ipvstable.Stats{Conns: 1, InPkts: 2, OutPkts: 3, InBytes: 4, OutBytes: 5, CPS: 6, InPPS: 7, OutPPS: 8, InBPS: 9, OutBPS: 10}}
	if got != want {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// An older kernel sends 32-bit STATS only, and no destination family.
func TestDecodeDestOldKernel(t *testing.T) {
	ad := decoder(t, func(ae *netlink.AttributeEncoder) {
		ae.Bytes(destAttrAddr, []byte{10, 244, 1, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
		ae.Bytes(destAttrPort, []byte{0x1f, 0x90})
		ae.Uint32(destAttrWeight, 1)
		ae.Nested(destAttrStats, func(ae *netlink.AttributeEncoder) error {
			ae.Uint32(1, 7)
			ae.Uint64(4, 1<<33)
			return nil
		})
	})
	got, err := decodeDest(ad, ipvstable.AFInet)
	if err != nil {
		t.Fatal(err)
	}
	if got.AF != ipvstable.AFInet || got.Addr != netip.MustParseAddr("10.244.1.5") || got.Port != 8080 ||
		got.Weight != 1 || got.Stats.Conns != 7 || got.Stats.InBytes != 1<<33 {
		t.Errorf("got %+v", got)
	}
}

// TestNestedStatsErrorsReported: a destination's or service's stats nest
// that does not decode fails the dump, through the same decoding the reader
// runs on the kernel's answers: a dropped stats error would leave zero
// counters that look real. want is what the error says.
func TestNestedStatsErrorsReported(t *testing.T) {
	badNests := map[string]struct {
		nest func(ae *netlink.AttributeEncoder)
		want string
	}{
		"counter of 3 bytes": {want: "decode stats: counter 1 of 3 bytes", nest: func(ae *netlink.AttributeEncoder) {
			ae.Nested(destAttrStats64, func(ae *netlink.AttributeEncoder) error {
				ae.Bytes(1, []byte{1, 2, 3})
				return nil
			})
		}},
		// an attribute header cut short: the library's own error
		"truncated nest": {want: "invalid attribute", nest: func(ae *netlink.AttributeEncoder) {
			ae.Bytes(destAttrStats|netlink.Nested, []byte{8, 0, 1})
		}},
	}
	for name, c := range badNests {
		t.Run("dest/"+name, func(t *testing.T) {
			bad := answer(t, func(ae *netlink.AttributeEncoder) {
				ae.Nested(cmdAttrDest, func(ae *netlink.AttributeEncoder) error {
					ae.Bytes(destAttrAddr, []byte{10, 244, 1, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
					ae.Bytes(destAttrPort, []byte{0x1f, 0x90})
					c.nest(ae)
					return nil
				})
			})
			good := answer(t, func(ae *netlink.AttributeEncoder) {
				ae.Nested(cmdAttrDest, func(inner *netlink.AttributeEncoder) error {
					inner.Bytes(destAttrAddr, []byte{10, 244, 1, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
					inner.Bytes(destAttrPort, []byte{0x1f, 0x90})
					inner.Nested(destAttrStats64, stats64(0))
					return nil
				})
			})
			if _, err := decodeDests([]netlink.Message{good}, ipvstable.AFInet); err != nil {
				t.Fatalf("a well-formed destination: %v", err)
			}
			_, err := decodeDests([]netlink.Message{good, bad}, ipvstable.AFInet)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("a destination with bad stats: got error %v, want one saying %q", err, c.want)
			}
		})
		t.Run("service/"+name, func(t *testing.T) {
			bad := answer(t, func(ae *netlink.AttributeEncoder) {
				ae.Nested(cmdAttrService, func(ae *netlink.AttributeEncoder) error {
					ae.Uint16(svcAttrAF, ipvstable.AFInet)
					ae.Uint32(svcAttrFWMark, 7)
					c.nest(ae)
					return nil
				})
			})
			_, err := decodeServices([]netlink.Message{bad})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("a service with bad stats: got error %v, want one saying %q", err, c.want)
			}
		})
	}
}

func TestDumpAnswerWithoutEntry(t *testing.T) {
	empty := answer(t, func(ae *netlink.AttributeEncoder) { ae.Uint32(cmdAttrTimeoutTCP, 900) })
	if _, err := decodeDests([]netlink.Message{empty}, ipvstable.AFInet); err == nil {
		t.Fatal("an answer without a destination decoded")
	}
}

func TestEncodeServiceKey(t *testing.T) {
	svc := ipvstable.Service{AF: ipvstable.AFInet, Protocol: model.UDP, Addr: netip.MustParseAddr("10.96.0.10"), Port: 53}
	b, err := encodeServiceKey(&svc)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeServices([]netlink.Message{{Data: append([]byte{ipvsCmdGetService, ipvsGenlVersion, 0, 0}, b...)}})
	if err != nil || len(back) != 1 {
		t.Fatalf("decode the request as an answer: %v, %v", back, err)
	}
	if got := back[0]; got.AF != svc.AF || got.Protocol != svc.Protocol || got.Addr != svc.Addr || got.Port != svc.Port {
		t.Errorf("round trip: got %+v, want %+v", got, svc)
	}
	outer, err := netlink.UnmarshalAttributes(b)
	if err != nil || len(outer) != 1 || outer[0].Type != cmdAttrService|netlink.Nested {
		t.Fatalf("outer attribute %v (%v): want one IPVS_CMD_ATTR_SERVICE marked nested", outer, err)
	}
}
