//go:build linux

package linux

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// A listing as the 6.1 kernel prints it (columns padded as ip_vs_ctl.c
// pads them): IPv4 and IPv6 services, a persistent one, an IPv4 and an
// IPv6 fwmark service with the same mark, one with its own mark, and a
// protocol the agent does not program.
const procSample = `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP  0A600001:01BB rr 
  -> 0AF40001:1F90      Masq    1      3          7         
  -> 0AF40002:1F90      Masq    0      0          12        
UDP  0A60000A:0035 sh persistent 10800 FFFFFFFF
  -> 0AF40003:0035      Route   5      0          0         
TCP  [fd00:0010:0096:0000:0000:0000:0000:0001]:0050 lc 
  -> [fd00:0010:0244:0001:0000:0000:0000:0005]:1F90      Tunnel  1      1          0         
FWM  00000007 rr 
  -> 0AF40004:0000      Masq    1      0          0         
FWM  00000007 rr 
  -> [fd00:0010:0244:0000:0000:0000:0000:0009]:0000      Masq    1      0          0         
FWM  00000009 wrr 
  -> [fd00:0010:0244:0000:0000:0000:0000:000a]:0000      Local   2      0          0         
IP_50  0A600002:0000 rr 
  -> 0AF40005:0000      Masq    1      0          0         
SCTP  0A600003:0B59 rr 
`

func TestParseProcIPVS(t *testing.T) {
	tab, err := parseProcIPVS(strings.NewReader(procSample))
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort
	k4 := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.1"), 443)
	want := []realRead{
		{rs: model.RealServer{Addr: ap("10.244.0.1:8080"), Weight: 1, Forward: model.Masq}, c: model.Conns{Active: 3, Inactive: 7}},
		{rs: model.RealServer{Addr: ap("10.244.0.2:8080"), Weight: 0, Forward: model.Masq}, c: model.Conns{Inactive: 12}},
	}
	checkReals(t, tab, k4, want)
	checkReals(t, tab, model.NewVSKey(model.UDP, netip.MustParseAddr("10.96.0.10"), 53),
		[]realRead{{rs: model.RealServer{Addr: ap("10.244.0.3:53"), Weight: 5, Forward: model.Route}}})
	checkReals(t, tab, model.NewVSKey(model.TCP, netip.MustParseAddr("fd00:10:96::1"), 80),
		[]realRead{{rs: model.RealServer{Addr: ap("[fd00:10:244:1::5]:8080"), Weight: 1, Forward: model.Tunnel}, c: model.Conns{Active: 1}}})
	checkReals(t, tab, model.NewVSKey(model.SCTP, netip.MustParseAddr("10.96.0.3"), 2905), []realRead{})
	checkReals(t, tab, model.VSKey{FWMark: 9, Addr: netip.IPv6Unspecified()},
		[]realRead{{rs: model.RealServer{Addr: ap("[fd00:10:244::a]:0"), Weight: 2, Forward: model.Local}}})

	// Mark 7 is listed twice (the lines do not say their family): neither
	// is trusted. Mark 9's real servers are IPv6: not an IPv4 service's.
	// A service the listing does not show is read over netlink.
	for _, k := range []model.VSKey{
		{FWMark: 7, Addr: netip.IPv4Unspecified()},
		{FWMark: 7, Addr: netip.IPv6Unspecified()},
		{FWMark: 9, Addr: netip.IPv4Unspecified()},
		model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.99"), 443),
	} {
		if got, ok := tab.reals(k); ok {
			t.Errorf("reals(%v) = %v, want it left to netlink", k, got)
		}
	}
	var none *procTable
	if _, ok := none.reals(k4); ok {
		t.Error("no listing read: reals must leave every service to netlink")
	}
}

func checkReals(t *testing.T, tab *procTable, k model.VSKey, want []realRead) {
	t.Helper()
	got, ok := tab.reals(k)
	if !ok {
		t.Fatalf("reals(%v): not listed", k)
	}
	if len(got) != len(want) {
		t.Fatalf("reals(%v) = %v, want %v", k, got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("reals(%v)[%d] = %+v, want %+v", k, i, got[i], want[i])
		}
	}
}

func TestParseProcIPVSRefusesWhatItCannotRead(t *testing.T) {
	head := "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n"
	for name, body := range map[string]string{
		"real server first":  "  -> 0AF40001:1F90      Masq    1      0          0\n",
		"bad address":        "TCP  0A6000ZZ:01BB rr\n",
		"bad port":           "TCP  0A600001 rr\n",
		"unknown forwarding": "TCP  0A600001:01BB rr\n  -> 0AF40001:1F90      Bounce  1      0          0\n",
		"short real server":  "TCP  0A600001:01BB rr\n  -> 0AF40001:1F90      Masq    1\n",
		"bad weight":         "TCP  0A600001:01BB rr\n  -> 0AF40001:1F90      Masq    x      0          0\n",
		"bad IPv6":           "TCP  [0A600001]:01BB rr\n",
		"bad mark":           "FWM  0000000G rr\n",
		"short line":         "TCP\n",
	} {
		if _, err := parseProcIPVS(strings.NewReader(head + body)); err == nil {
			t.Errorf("%s: parsed %q without an error", name, body)
		}
	}
}

func BenchmarkParseProcIPVS(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n")
	for s := 0; s < 10000; s++ {
		sb.WriteString("TCP  0A60" + hex4(s) + ":0050 rr \n")
		for e := 0; e < 10; e++ {
			sb.WriteString("  -> 0AF4" + hex4(s) + ":1F9" + string(rune('0'+e)) + "      Masq    1      0          0         \n")
		}
	}
	text := sb.String()
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseProcIPVS(strings.NewReader(text)); err != nil {
			b.Fatal(err)
		}
	}
}

func hex4(n int) string {
	const digits = "0123456789ABCDEF"
	return string([]byte{digits[n>>12&15], digits[n>>8&15], digits[n>>4&15], digits[n&15]})
}
