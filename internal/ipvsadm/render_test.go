package ipvsadm

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/ipvstable"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// fakeKernel serves a fixed Listing.
type fakeKernel struct{ l Listing }

func (k fakeKernel) Info(context.Context) (ipvstable.Info, error)          { return k.l.Info, nil }
func (k fakeKernel) Services(context.Context) ([]ipvstable.Service, error) { return k.l.Services, nil }
func (k fakeKernel) Timeouts(context.Context) (ipvstable.Timeouts, error)  { return k.l.Timeouts, nil }
func (k fakeKernel) Daemons(context.Context) ([]ipvstable.Daemon, error)   { return k.l.Daemons, nil }

// fakeNames knows a few hosts and reads a small services file.
type fakeNames struct {
	hosts    map[netip.Addr]string
	services map[servKey]string
}

func (n fakeNames) Host(a netip.Addr) string { return n.hosts[a] }
func (n fakeNames) Service(port uint16, proto model.Protocol) string {
	return n.services[servKey{port, protoName(proto)}]
}

func testNames() fakeNames {
	return fakeNames{
		hosts: map[netip.Addr]string{
			netip.MustParseAddr("10.96.0.10"):    "kube-dns.kube-system.svc.cluster.local",
			netip.MustParseAddr("10.244.1.5"):    "pod-a.example",
			netip.MustParseAddr("fd00:10:96::1"): "api.example",
		},
		services: parseServices(strings.NewReader(`
# comment
domain		53/tcp				# Domain Name Server
domain		53/udp
http		80/tcp		www		# WorldWideWeb HTTP
https		443/tcp
https		443/udp
sip		5060/tcp
sip		5060/udp
`)),
	}
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// testListing is a table with every kind of service ipvsadm can show.
func testListing() Listing {
	big := ipvstable.Stats{Conns: 123456789, InPkts: 99999999, OutPkts: 100000000, InBytes: 1_234_567_890_123, OutBytes: 98_765_432_109_876_543,
		CPS: 12, InPPS: 3456, OutPPS: 4_500_000_000, InBPS: 999_999_999, OutBPS: 100_000_000_000}
	return Listing{
		Info:     ipvstable.Info{Version: 0x010201, ConnTabSize: 4096},
		Timeouts: ipvstable.Timeouts{TCP: 900, TCPFin: 120, UDP: 300},
		Services: []ipvstable.Service{
			{AF: ipvstable.AFInet, Protocol: model.UDP, Addr: addr("10.96.0.10"), Port: 53, Scheduler: "rr", Flags: model.FlagHashed | model.FlagOnePacket,
				Netmask: 0xffffffff,
				Dests: []ipvstable.Dest{
					{AF: ipvstable.AFInet, Addr: addr("10.244.2.7"), Port: 53, Weight: 1, ActiveConns: 0, InactConns: 4},
					{AF: ipvstable.AFInet, Addr: addr("10.244.1.5"), Port: 53, Weight: 1, InactConns: 2},
				}},
			{AF: ipvstable.AFInet, Protocol: model.TCP, Addr: addr("192.168.10.1"), Port: 443, Scheduler: "sh", Flags: model.FlagHashed | model.FlagSchedSH1 | model.FlagSchedSH2,
				Netmask: 0xffffffff, Stats: big,
				Dests: []ipvstable.Dest{
					{AF: ipvstable.AFInet, Addr: addr("10.244.3.9"), Port: 8443, Weight: 0, ActiveConns: 7, InactConns: 1, Stats: big},
					{AF: ipvstable.AFInet, Addr: addr("10.244.1.5"), Port: 8443, Weight: 1, ActiveConns: 12, UThreshold: 100, LThreshold: 50, Stats: ipvstable.Stats{Conns: 5, InPkts: 50, OutPkts: 40, InBytes: 5000, OutBytes: 4000}},
				}},
			{AF: ipvstable.AFInet, Protocol: model.TCP, Addr: addr("10.96.0.1"), Port: 80, Scheduler: "wlc", Flags: model.FlagHashed | model.FlagPersistent, Timeout: 10800,
				Netmask: 0xffffff00, PEName: "",
				Dests: []ipvstable.Dest{
					{AF: ipvstable.AFInet, Addr: addr("10.244.1.5"), Port: 8080, Weight: 3, Forward: model.Masq, PersistConns: 2, ActiveConns: 1},
					{AF: ipvstable.AFInet, Addr: addr("10.244.1.6"), Port: 80, Weight: 1, Forward: model.Route},
					{AF: ipvstable.AFInet, Addr: addr("10.244.1.7"), Port: 80, Weight: 1, Forward: model.Tunnel, TunType: ipvstable.TunGUE, TunPort: 6080, TunFlags: 2},
					{AF: ipvstable.AFInet, Addr: addr("10.244.1.8"), Port: 80, Weight: 1, Forward: model.Tunnel, TunType: ipvstable.TunGRE, TunFlags: 1},
					{AF: ipvstable.AFInet, Addr: addr("10.244.1.9"), Port: 80, Weight: 1, Forward: model.Tunnel, TunType: ipvstable.TunIPIP},
					{AF: ipvstable.AFInet, Addr: addr("127.0.0.1"), Port: 80, Weight: 1, Forward: model.Local},
				}},
			{AF: ipvstable.AFInet, Protocol: model.SCTP, Addr: addr("10.96.0.20"), Port: 5060, Scheduler: "mh", Flags: model.FlagHashed | model.FlagSchedSH2 | model.FlagPersistent, Timeout: 60,
				Netmask: 0xffffffff, PEName: "sip",
				Dests: []ipvstable.Dest{{AF: ipvstable.AFInet, Addr: addr("10.244.4.4"), Port: 5060, Weight: 65535, Forward: model.Masq}}},
			{AF: ipvstable.AFInet6, Protocol: model.TCP, Addr: addr("fd00:10:96::1"), Port: 443, Scheduler: "lc", Flags: model.FlagHashed | model.FlagPersistent, Timeout: 300,
				Netmask: 64,
				Dests: []ipvstable.Dest{
					{AF: ipvstable.AFInet6, Addr: addr("fd00:10:244:1::5"), Port: 6443, Weight: 1, ActiveConns: 3, InactConns: 1, PersistConns: 3},
					{AF: ipvstable.AFInet6, Addr: addr("fd00:10:244:1::4"), Port: 6443, Weight: 0},
				}},
			{AF: ipvstable.AFInet6, Protocol: model.UDP, Addr: addr("fd00:10:96::a"), Port: 53, Scheduler: "wrr", Flags: model.FlagHashed | model.FlagSched3, Netmask: 128,
				Dests: []ipvstable.Dest{{AF: ipvstable.AFInet6, Addr: addr("fd00:10:244:2::7"), Port: 53, Weight: 2}}},
			{AF: ipvstable.AFInet, FWMark: 7, Scheduler: "rr", Flags: model.FlagHashed, Netmask: 0xffffffff,
				Dests: []ipvstable.Dest{{AF: ipvstable.AFInet, Addr: addr("10.244.5.5"), Port: 0, Weight: 1, Forward: model.Route}}},
			{AF: ipvstable.AFInet6, FWMark: 3, Scheduler: "sed", Flags: model.FlagHashed | model.FlagPersistent, Timeout: 3600, Netmask: 128,
				Dests: []ipvstable.Dest{{AF: ipvstable.AFInet6, Addr: addr("fd00::1:2"), Port: 0, Weight: 1, Forward: model.Route}}},
			{AF: ipvstable.AFInet, Protocol: model.TCP, Addr: addr("10.96.0.30"), Port: 0, Scheduler: "nq", Flags: model.FlagHashed | model.FlagPersistent, Timeout: 1,
				Netmask: 0xffff0000},
		},
		Daemons: []ipvstable.Daemon{
			{State: 1, MCastIfn: "eth0", SyncID: 7, SyncMaxLen: 1472, MCastGroup: addr("224.0.0.81"), MCastPort: 8848, MCastTTL: 1},
			{State: 2, MCastIfn: "eth1", SyncID: 0},
		},
	}
}

const testConns = `Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData
TCP 0A000001 8F6A 0A600001 0050 0AF40105 1F90 ESTABLISHED     899
UDP 0A000002 D431 0A60000A 0035 0AF40207 0035 UDP             299
TCP fd00:0000:0000:0000:0000:0000:0000:0001 C001 fd00:0010:0096:0000:0000:0000:0000:0001 01BB fd00:0010:0244:0001:0000:0000:0000:0005 192B FIN_WAIT         61
SCTP 0A000003 13C4 0A600014 13C4 0AF40404 13C4 ESTABLISHED    3599 sip 1234@example
TCP 0A000001 0000 0A600001 0050 0AF40105 1F90 NONE         10799
`

func TestRunGolden(t *testing.T) {
	cases := []struct {
		name string
		args string
	}{
		{"noargs", ""},
		{"Ln", "-Ln"},
		{"L", "-L"},
		{"l-numeric-long", "--list --numeric"},
		{"stats", "-Ln --stats"},
		{"stats-exact", "-Ln --stats --exact"},
		{"stats-names", "-L --stats"},
		{"rate", "-Ln --rate"},
		{"rate-exact", "-Ln --rate -X"},
		{"thresholds", "-Ln --thresholds"},
		{"persistent-conn", "-Ln --persistent-conn"},
		{"tun-info", "-Ln --tun-info"},
		{"nosort", "-Ln --nosort"},
		{"sort", "-Ln --sort"},
		{"timeout", "-L --timeout"},
		{"daemon", "-L --daemon"},
		{"conns", "-Lnc"},
		{"conns-names", "-L -c"},
		{"conns-pe", "-Lnc --persistent-conn"},
		{"save", "-S -n"},
		{"save-names", "-S"},
		{"filter-t", "-Ln -t 10.96.0.1:80"},
		{"filter-t-stats", "-L -n -t 192.168.10.1:https --stats"},
		{"filter-u6", "-Ln -u [fd00:10:96::a]:53"},
		{"filter-sctp", "-Ln --sctp-service 10.96.0.20:5060"},
		{"filter-f", "-Ln -f 7"},
		{"filter-f6", "-Ln -f 3 -6"},
		{"filter-portzero", "-Ln -t 10.96.0.30"},
		{"filter-missing", "-Ln -t 10.9.9.9:80"},
		{"mutate-add", "-A -t 10.0.0.1:80 -s rr"},
		{"mutate-clear", "-C"},
		{"mutate-set", "--set 1 2 3"},
		{"mutate-second", "-L -Z"},
		{"bad-first", "-n -L"},
		{"bad-illegal", "-L -s rr"},
		{"bad-conflict", "-L -c --timeout"},
		{"bad-list-conflict", "-L -c --stats"},
		{"bad-multiple", "-L -n -n"},
		{"bad-extra", "-L foo"},
		{"bad-save", "-S --stats"},
		{"bad-unknown", "-L --frobnicate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			env := Env{
				Prog:      "ipvsadm",
				Open:      func(context.Context) (Kernel, error) { return fakeKernel{testListing()}, nil },
				ReadConns: func() ([]byte, error) { return []byte(testConns), nil },
				Names:     testNames(),
				Stdout:    &stdout,
				Stderr:    &stderr,
			}
			code := Run(context.Background(), strings.Fields(tc.args), env)
			got := fmt.Sprintf("$ ipvsadm %s\n%s", tc.args, stdout.String())
			if stderr.Len() > 0 || code != 0 {
				got += fmt.Sprintf("--- exit %d, stderr:\n%s", code, stderr.String())
			}
			golden(t, tc.name, got)
		})
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update): %v", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestLargenum(t *testing.T) {
	cases := []struct {
		v     uint64
		exact bool
		want  string
	}{
		{0, false, "        0"},
		{99_999_999, false, " 99999999"},
		{100_000_000, false, "  100000K"},
		{999_999_999, false, "  999999K"},
		{1_000_000_000, false, "    1000M"},
		{99_999_999_999, false, "   99999M"},
		{100_000_000_000, false, "     100G"},
		{99_999_999_999_999, false, "   99999G"},
		{100_000_000_000_000, false, "     100T"},
		{18446744073709551615, false, "18446744T"},
		{12345678, true, " 12345678"},
		{123456789, true, " 123456789"},
		{18446744073709551615, true, " 18446744073709551615"},
	}
	for _, c := range cases {
		if got := largenum(c.v, c.exact); got != c.want {
			t.Errorf("largenum(%d, %v) = %q, want %q", c.v, c.exact, got, c.want)
		}
	}
}

// The C comparators wrap: 10.0.0.0/8 sorts after 192.168.0.0/16 (and the
// wrapped order is the one ipvsadm prints).
func TestSortWraps(t *testing.T) {
	svcs := []ipvstable.Service{
		{AF: ipvstable.AFInet, Protocol: model.TCP, Addr: addr("10.0.0.1"), Port: 80},
		{AF: ipvstable.AFInet, Protocol: model.TCP, Addr: addr("192.168.0.1"), Port: 80},
		{AF: ipvstable.AFInet, Protocol: model.TCP, Addr: addr("10.0.0.1"), Port: 8},
		{AF: ipvstable.AFInet6, Protocol: model.TCP, Addr: addr("fd00::1"), Port: 80},
		{AF: ipvstable.AFInet, FWMark: 1},
		{AF: ipvstable.AFInet, Protocol: model.UDP, Addr: addr("1.1.1.1"), Port: 53},
	}
	msort(svcs, cmpServices)
	var got []string
	for _, s := range svcs {
		if s.FWMark != 0 {
			got = append(got, fmt.Sprintf("fwm%d", s.FWMark))
			continue
		}
		got = append(got, fmt.Sprintf("%d/%s", s.Protocol, netip.AddrPortFrom(s.Addr, s.Port)))
	}
	want := "6/192.168.0.1:80 6/10.0.0.1:8 6/10.0.0.1:80 17/1.1.1.1:53 6/[fd00::1]:80 fwm1"
	if strings.Join(got, " ") != want {
		t.Errorf("order %q, want %q", strings.Join(got, " "), want)
	}
}

func TestNtop(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1":           "10.0.0.1",
		"fd00::1":            "fd00::1",
		"::1.2.3.4":          "::1.2.3.4",
		"::1":                "::1",
		"::ffff:1.2.3.4":     "::ffff:1.2.3.4",
		"2001:db8:0:0:1::":   "2001:db8:0:0:1::",
		"2001:0:0:1:0:0:1:1": "2001::1:0:0:1:1",
	} {
		if got := ntop(addr(in)); got != want {
			t.Errorf("ntop(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestParseSelector(t *testing.T) {
	cases := []struct {
		args string
		want Selector
		err  string
	}{
		{"-L -t 10.0.0.1:80", Selector{AF: ipvstable.AFInet, Protocol: model.TCP, Addr: addr("10.0.0.1"), Port: 80}, ""},
		{"-L -t10.0.0.1:http", Selector{AF: ipvstable.AFInet, Protocol: model.TCP, Addr: addr("10.0.0.1"), Port: 80}, ""},
		{"-L --udp-service=[fd00::a]:53", Selector{AF: ipvstable.AFInet6, Protocol: model.UDP, Addr: addr("fd00::a"), Port: 53}, ""},
		{"-L -u fd00::a", Selector{AF: ipvstable.AFInet6, Protocol: model.UDP, Addr: addr("fd00::a")}, ""},
		{"-L --sctp-service 10.0.0.1", Selector{AF: ipvstable.AFInet, Protocol: model.SCTP, Addr: addr("10.0.0.1")}, ""},
		{"-L -f 5 -6", Selector{AF: ipvstable.AFInet6, Protocol: model.TCP, FWMark: 5}, ""},
		{"-L -t 80", Selector{}, "illegal virtual server address[:port] specified"},
		{"-L -t 10.0.0.1:99999", Selector{}, "illegal virtual server address[:port] specified"},
		{"-L -f 0", Selector{}, "invalid fwmark value `0' specified"},
		{"-L -6 -f 1", Selector{}, "-6 used before -f\n"},
	}
	for _, c := range cases {
		o, err := Parse("ipvsadm", strings.Fields(c.args))
		if c.err != "" {
			var ue *UsageError
			if !errors.As(err, &ue) || ue.Msg != c.err {
				t.Errorf("%s: error %v, want %q", c.args, err, c.err)
			}
			continue
		}
		if err != nil || o.Service == nil || *o.Service != c.want {
			t.Errorf("%s: got %+v, %v; want %+v", c.args, o.Service, err, c.want)
		}
	}
}
