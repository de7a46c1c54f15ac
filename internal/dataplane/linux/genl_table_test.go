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

// The table read's decoders, on answers encoded as the kernel sends them:
// what the model keeps is read, counters and rates are skipped, and a
// malformed answer is an error, never a zero value that looks real.

func TestTableService(t *testing.T) {
	flags := make([]byte, 8)
	nlenc.PutUint32(flags[:4], uint32(model.FlagPersistent|model.FlagHashed))
	nlenc.PutUint32(flags[4:], 0xffffffff)
	v4 := [16]byte{10, 96, 0, 1}
	v6 := netip.MustParseAddr("fd00:10:96::1").As16()
	cases := []struct {
		name  string
		attrs func(ae *netlink.AttributeEncoder)
		want  model.VirtualServer
		err   string
	}{{
		name: "IPv4 TCP, persistent, address before family, stats skipped",
		attrs: func(ae *netlink.AttributeEncoder) {
			ae.Uint16(svcAttrProtocol, uint16(model.TCP))
			ae.Bytes(svcAttrAddr, v4[:])
			ae.Uint16(svcAttrAF, ipvstable.AFInet)
			ae.Bytes(svcAttrPort, binary.BigEndian.AppendUint16(nil, 443))
			ae.String(svcAttrSchedName, "sh")
			ae.Bytes(svcAttrFlags, flags)
			ae.Uint32(svcAttrTimeout, 600)
			ae.Bytes(svcAttrNetmask, []byte{255, 255, 255, 255})
			ae.Nested(svcAttrStats64, stats64(1<<40))
		},
		want: model.VirtualServer{Key: model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.1"), 443), Scheduler: "sh",
			Flags: model.FlagPersistent | model.FlagHashed, Timeout: 600},
	}, {
		name: "IPv6 UDP",
		attrs: func(ae *netlink.AttributeEncoder) {
			ae.Uint16(svcAttrAF, ipvstable.AFInet6)
			ae.Uint16(svcAttrProtocol, uint16(model.UDP))
			ae.Bytes(svcAttrAddr, v6[:])
			ae.Bytes(svcAttrPort, binary.BigEndian.AppendUint16(nil, 53))
			ae.String(svcAttrSchedName, "rr")
		},
		want: model.VirtualServer{Key: model.NewVSKey(model.UDP, netip.AddrFrom16(v6), 53), Scheduler: "rr"},
	}, {
		name: "IPv6 fwmark keeps its family",
		attrs: func(ae *netlink.AttributeEncoder) {
			ae.Uint16(svcAttrAF, ipvstable.AFInet6)
			ae.Uint32(svcAttrFWMark, 9)
			ae.String(svcAttrSchedName, "wrr")
		},
		want: model.VirtualServer{Key: model.VSKey{FWMark: 9, Addr: netip.IPv6Unspecified()}, Scheduler: "wrr"},
	}, {
		name: "no family",
		attrs: func(ae *netlink.AttributeEncoder) {
			ae.Uint32(svcAttrFWMark, 9)
		},
		err: "address family 0",
	}, {
		name: "flags of the wrong size",
		attrs: func(ae *netlink.AttributeEncoder) {
			ae.Uint16(svcAttrAF, ipvstable.AFInet)
			ae.Uint32(svcAttrFlags, 1)
		},
		err: "service flags of 4 bytes",
	}, {
		name: "no address",
		attrs: func(ae *netlink.AttributeEncoder) {
			ae.Uint16(svcAttrAF, ipvstable.AFInet)
			ae.Uint16(svcAttrProtocol, uint16(model.TCP))
			ae.Bytes(svcAttrPort, binary.BigEndian.AppendUint16(nil, 80))
		},
		err: "without a valid address",
	}, {
		name: "truncated attribute",
		attrs: func(ae *netlink.AttributeEncoder) {
			ae.Uint16(svcAttrAF, ipvstable.AFInet)
			ae.Bytes(svcAttrTimeout, []byte{1, 2})
		},
		err: "shorter than its type",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := tableService(attrs(t, c.attrs))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %+v, %v; want an error saying %q", got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

func TestTableDest(t *testing.T) {
	v6 := netip.MustParseAddr("fd00:10:244::5").As16()
	cases := []struct {
		name  string
		svcAF uint16
		attrs func(ae *netlink.AttributeEncoder)
		want  realRead
		err   string
	}{{
		name:  "IPv6 tunnel at weight 0 with counters, its own family winning",
		svcAF: ipvstable.AFInet,
		attrs: func(ae *netlink.AttributeEncoder) {
			ae.Bytes(destAttrAddr, v6[:])
			ae.Bytes(destAttrPort, binary.BigEndian.AppendUint16(nil, 6443))
			ae.Uint32(destAttrFwdMethod, uint32(model.Tunnel)|0x100) // bits beyond the method are not the method
			ae.Uint32(destAttrWeight, 0)
			ae.Uint32(destAttrActiveConns, 3)
			ae.Uint32(destAttrInactConns, 4)
			ae.Uint32(destAttrPersistConns, 5)
			ae.Uint16(destAttrAddrFamily, ipvstable.AFInet6)
			ae.Nested(destAttrStats64, stats64(0))
		},
		want: realRead{rs: model.RealServer{Addr: netip.AddrPortFrom(netip.AddrFrom16(v6), 6443), Forward: model.Tunnel},
			c: model.Conns{Active: 3, Inactive: 4}},
	}, {
		name:  "older kernel: no family of its own",
		svcAF: ipvstable.AFInet,
		attrs: func(ae *netlink.AttributeEncoder) {
			ae.Bytes(destAttrAddr, []byte{10, 244, 1, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
			ae.Bytes(destAttrPort, []byte{0x1f, 0x90})
			ae.Uint32(destAttrWeight, 7)
		},
		want: realRead{rs: model.RealServer{Addr: netip.MustParseAddrPort("10.244.1.5:8080"), Weight: 7}},
	}, {
		name:  "port of the wrong size",
		svcAF: ipvstable.AFInet,
		attrs: func(ae *netlink.AttributeEncoder) {
			ae.Bytes(destAttrAddr, []byte{10, 244, 1, 5})
			ae.Uint32(destAttrPort, 8080)
		},
		err: "destination port of 4 bytes",
	}, {
		name:  "no address",
		svcAF: ipvstable.AFInet6,
		attrs: func(ae *netlink.AttributeEncoder) {
			ae.Bytes(destAttrPort, []byte{0x1f, 0x90})
		},
		err: "without a valid address",
	}, {
		name:  "counter cut short",
		svcAF: ipvstable.AFInet,
		attrs: func(ae *netlink.AttributeEncoder) {
			ae.Bytes(destAttrAddr, []byte{10, 244, 1, 5})
			ae.Bytes(destAttrActiveConns, []byte{1})
		},
		err: "shorter than its type",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := tableDest(attrs(t, c.attrs), c.svcAF)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %+v, %v; want an error saying %q", got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

// TestEachEntry: every entry of an answer is handed over; an answer with
// none, or one cut short, is an error.
func TestEachEntry(t *testing.T) {
	two := answer(t, func(ae *netlink.AttributeEncoder) {
		for _, port := range []uint16{80, 443} {
			ae.Nested(cmdAttrDest, func(ae *netlink.AttributeEncoder) error {
				ae.Bytes(destAttrAddr, []byte{10, 244, 1, 5})
				ae.Bytes(destAttrPort, binary.BigEndian.AppendUint16(nil, port))
				return nil
			})
		}
	})
	var ports []uint16
	err := eachEntry(two.Data, cmdAttrDest, func(v []byte) error {
		r, err := tableDest(v, ipvstable.AFInet)
		ports = append(ports, r.rs.Addr.Port())
		return err
	})
	if err != nil || len(ports) != 2 || ports[0] != 80 || ports[1] != 443 {
		t.Fatalf("two entries: got %v, %v", ports, err)
	}
	none := answer(t, func(ae *netlink.AttributeEncoder) { ae.Uint32(cmdAttrTimeoutTCP, 900) })
	if err := eachEntry(none.Data, cmdAttrDest, func([]byte) error { return nil }); err == nil {
		t.Fatal("an answer without a destination decoded")
	}
	cut := two.Data[:len(two.Data)-3]
	if err := eachEntry(cut, cmdAttrDest, func([]byte) error { return nil }); err == nil {
		t.Fatal("an answer cut short decoded")
	}
	if err := eachEntry([]byte{1, 2}, cmdAttrDest, func([]byte) error { return nil }); err == nil {
		t.Fatal("a message shorter than its header decoded")
	}
}
