package main

import (
	"bufio"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables/expr"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/protocol"
)

func TestParseStatCPU(t *testing.T) {
	// A name with spaces and parentheses; utime 150, stime 50, cutime 30, cstime 20 ticks.
	stat := "123 (kube proxy (x)) S 1 123 123 0 -1 4194560 100 0 0 0 150 50 30 20 20 0 12 0 500 1000 2000\n"
	user, system, err := parseStatCPU([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if user != 1.8 || system != 0.7 {
		t.Fatalf("CPU seconds: got user %v, system %v, want 1.8 and 0.7", user, system)
	}
	if _, _, err := parseStatCPU([]byte("123 (x) S 1 2")); err == nil {
		t.Fatal("a short stat line parsed")
	}
}

func TestParseHWM(t *testing.T) {
	got, err := parseHWM(strings.NewReader("Name:\tkube-ipvs\nVmPeak:\t 900000 kB\nVmHWM:\t   102400 kB\nVmRSS:\t 51200 kB\n"))
	if err != nil || got != 100 {
		t.Fatalf("got %v, %v; want 100 MB", got, err)
	}
	if _, err := parseHWM(strings.NewReader("Name:\tx\n")); err == nil {
		t.Fatal("no VmHWM: want an error")
	}
}

const procIPVS = `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP  0A600100:0050 rr
  -> 0A800001:1F90      Masq    1      0          0
  -> 0A800000:1F90      Masq    0      3          0
UDP  0A600100:0035 rr
  -> 0A800009:0035      Masq    1      0          0
TCP  0A600101:01BB rr
  -> 0A800011:1F90      Masq    1      0          0
`

func TestParseProcIPVS(t *testing.T) {
	tab, err := parseProcIPVS(bufio.NewScanner(strings.NewReader(procIPVS)))
	if err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr("10.96.1.0")
	if len(tab) != 1 || len(tab[vip]) != 2 {
		t.Fatalf("want only TCP port 80, with 2 reals: %v", tab)
	}
	if tab[vip][netip.MustParseAddr("10.128.0.1")] != 1 || tab[vip][netip.MustParseAddr("10.128.0.0")] != 0 {
		t.Fatalf("weights: %v", tab[vip])
	}
	ch := protocol.Change{VIP: "10.96.1.0", Add: "10.128.0.1", Del: "10.128.0.0"}
	if !changeSeen(tab[vip], ch) {
		t.Fatal("new at weight 1, old draining at 0: seen")
	}
	ch.Del, ch.Add = "10.128.0.1", "10.128.0.0"
	if changeSeen(tab[vip], ch) {
		t.Fatal("new at weight 0: not seen")
	}
}

// As nft 1.0 lists kube-proxy's table (trimmed).
const nftTableListing = `table ip kube-proxy {
	comment "rules for kube-proxy"
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"
		elements = { 10.96.1.0 . tcp . 80 : goto service-AAAAAAAA-default/bench-00000/tcp/http,
			     10.96.1.1 . tcp . 80 : goto service-BBBBBBBB-default/bench-00001/tcp/http }
	}

	chain service-AAAAAAAA-default/bench-00000/tcp/http {
		ip daddr 10.96.1.0 tcp dport 80 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
		meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.128.0.0 . 8080, 1 : 10.128.0.1 . 8080 }
	}

	chain service-BBBBBBBB-default/bench-00001/tcp/http {
		ip daddr 10.96.1.1 tcp dport 80 jump mark-for-masquerade
		numgen random mod 2 vmap { 0 : goto endpoint-CCCCCCCC-default/bench-00001/tcp/http__10.128.0.16/8080, 1 : goto endpoint-DDDDDDDD-default/bench-00001/tcp/http__10.64.0.1/8080 }
	}

	chain endpoint-CCCCCCCC-default/bench-00001/tcp/http__10.128.0.16/8080 {
		ip saddr 10.128.0.16 jump mark-for-masquerade
		meta l4proto tcp dnat to 10.128.0.16:8080
	}
}
`

func TestParseNFT(t *testing.T) {
	chains := parseServiceIPs(nftTableListing)
	if len(chains) != 2 || chains[netip.MustParseAddr("10.96.1.1")] != "service-BBBBBBBB-default/bench-00001/tcp/http" {
		t.Fatalf("service-ips: %v", chains)
	}
	eps := parseChains(nftTableListing)
	a := eps["service-AAAAAAAA-default/bench-00000/tcp/http"]
	if len(a) != 2 || !a[netip.MustParseAddr("10.128.0.1")] {
		t.Fatalf("dnat map endpoints: %v", a)
	}
	b := eps["service-BBBBBBBB-default/bench-00001/tcp/http"]
	if len(b) != 2 || !b[netip.MustParseAddr("10.64.0.1")] {
		t.Fatalf("vmap endpoints: %v", b)
	}
	if _, ok := eps["endpoint-CCCCCCCC-default/bench-00001/tcp/http__10.128.0.16/8080"]; ok {
		t.Fatal("an endpoint chain has no numgen map")
	}
	if !nftChangeSeen(b, protocol.Change{Add: "10.64.0.1", Del: "10.128.0.17"}) {
		t.Fatal("new present, old absent: seen")
	}
	if nftChangeSeen(b, protocol.Change{Add: "10.64.0.1", Del: "10.128.0.16"}) {
		t.Fatal("old still in the map: not seen")
	}
}

func TestSumCounter(t *testing.T) {
	exp := `# HELP kube_ipvs_operations_total Operations sent to the kernel.
# TYPE kube_ipvs_operations_total counter
kube_ipvs_operations_total{kind="add-real",result="success"} 20
kube_ipvs_operations_total{kind="del-real",result="error"} 1
kube_ipvs_operations_total_other 99
kube_ipvs_virtual_servers 1000
`
	if got := sumCounter(strings.NewReader(exp), "kube_ipvs_operations_total"); got != 21 {
		t.Fatalf("got %v, want 21", got)
	}
	if got := sumCounter(strings.NewReader("x 1\n"), "kube_ipvs_operations_total"); got != -1 {
		t.Fatalf("absent: got %v, want -1", got)
	}
}

func TestNumgenLookup(t *testing.T) {
	dnat := []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Register: 1, Data: []byte{6}},
		&expr.Numgen{Register: 1, Modulus: 10, Type: 1}, &expr.Lookup{SourceRegister: 1, DestRegister: 1, IsDestRegSet: true, SetName: "__map3"}}
	if got, vmap := numgenLookup(dnat); got != "__map3" || vmap {
		t.Fatalf("dnat map: got %q, vmap %v", got, vmap)
	}
	jumps := []expr.Any{&expr.Numgen{Register: 1, Modulus: 2}, &expr.Lookup{SourceRegister: 1, IsDestRegSet: true, SetName: "__map7"}}
	if got, vmap := numgenLookup(jumps); got != "__map7" || !vmap {
		t.Fatalf("vmap: got %q, vmap %v", got, vmap)
	}
	// A lookup before any numgen (e.g. a source-address set) is not the endpoint map.
	other := []expr.Any{&expr.Lookup{SourceRegister: 1, SetName: "cluster-ips"}, &expr.Verdict{Kind: expr.VerdictAccept}}
	if got, _ := numgenLookup(other); got != "" {
		t.Fatalf("no numgen: got %q", got)
	}
	if isErrorLine("I1201 03:00:00.1 1 proxier.go:1] ok") || !isErrorLine("E1201 03:00:00.1 1 proxier.go:1] failed") ||
		!isErrorLine(`{"level":"error","msg":"x"}`) {
		t.Fatal("isErrorLine")
	}
}

func TestVerdictChain(t *testing.T) {
	// As the kernel sent a service-ips element's value: code NFT_GOTO, chain.
	val := append([]byte{8, 0, 1, 0, 255, 255, 255, 252, 46, 0, 2, 0}, []byte("service-AAAA-default/bench-00000/tcp/http\x00\x00\x00")...)
	if got := verdictChain(val); got != "service-AAAA-default/bench-00000/tcp/http" {
		t.Fatalf("got %q", got)
	}
	if got := verdictChain([]byte{10, 128, 0, 0, 31, 144, 0, 0}); got != "" {
		t.Fatalf("an ip . port value: got %q", got)
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
