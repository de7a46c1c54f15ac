package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/protocol"
)

// A table shaped like kube-proxy's nftables mode (v1.37): a dnat map for
// one Service, a vmap of endpoint chains (session affinity) for another.
const kubeProxyLikeRules = `table ip kube-proxy {
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.96.1.0 . tcp . 80 : goto service-AAAA-default/bench-00000/tcp/http,
			     10.96.1.1 . tcp . 80 : goto service-BBBB-default/bench-00001/tcp/http,
			     10.96.1.1 . udp . 53 : goto service-BBBB-default/bench-00001/tcp/http }
	}
	chain mark-for-masquerade {
		meta mark set meta mark | 0x4000
	}
	chain service-AAAA-default/bench-00000/tcp/http {
		ip daddr 10.96.1.0 tcp dport 80 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
		meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.128.0.0 . 8080, 1 : 10.128.0.1 . 8080 }
	}
	chain endpoint-CCCC-default/bench-00001/tcp/http__10.128.0.16/8080 {
		meta l4proto tcp dnat to 10.128.0.16:8080
	}
	chain endpoint-DDDD-default/bench-00001/tcp/http__10.64.0.1/8080 {
		meta l4proto tcp dnat to 10.64.0.1:8080
	}
	chain service-BBBB-default/bench-00001/tcp/http {
		numgen random mod 2 vmap { 0 : goto endpoint-CCCC-default/bench-00001/tcp/http__10.128.0.16/8080, 1 : goto endpoint-DDDD-default/bench-00001/tcp/http__10.64.0.1/8080 }
	}
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr . meta l4proto . th dport vmap @service-ips
	}
}
`

// TestNFTObserverOnKernel reads such a table over netlink from a real
// nf_tables, in a network namespace of its own (root and nft needed; the
// development kernel has nf_tables, not IPVS).
func TestNFTObserverOnKernel(t *testing.T) {
	if os.Getenv("BENCH_TEST_IN_NETNS") == "" {
		if os.Geteuid() != 0 {
			t.Skip("needs root to make a network namespace for its own nf_tables (make bench runs it as root; not part of make test)")
		}
		for _, tool := range []string{"unshare", "nft"} {
			if _, err := exec.LookPath(tool); err != nil {
				t.Skipf("needs %s on PATH to load the table into a network namespace of its own (make bench installs nftables)", tool)
			}
		}
		cmd := exec.Command("unshare", "-n", os.Args[0], "-test.run", "^TestNFTObserverOnKernel$", "-test.v")
		cmd.Env = append(os.Environ(), "BENCH_TEST_IN_NETNS=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("in a new network namespace: %v\n%s", err, out)
		}
		return
	}
	if out, err := nft("list", "ruleset"); err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("not a fresh network namespace: %q, %v", out, err)
	}
	load := exec.Command("nft", "-f", "-")
	load.Stdin = strings.NewReader(kubeProxyLikeRules)
	if out, err := load.CombinedOutput(); err != nil {
		t.Fatalf("nft -f: %v: %s", err, out)
	}
	o, err := newNFTObserver(protocol.Plan{N: 2, Endpoints: 2, VIPs: []string{"10.96.1.0", "10.96.1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer o.close()
	ok, _, err := o.full()
	if err != nil || !ok {
		t.Fatalf("full: %v, %v", ok, err)
	}
	if len(o.chains) != 2 || o.chains[mustAddr("10.96.1.1")] != "service-BBBB-default/bench-00001/tcp/http" {
		t.Fatalf("service chains (TCP port 80 only): %v", o.chains)
	}
	for _, tc := range []struct {
		ch   protocol.Change
		want bool
	}{
		{protocol.Change{VIP: "10.96.1.0", Add: "10.128.0.1", Del: "10.128.0.5"}, true},
		{protocol.Change{VIP: "10.96.1.0", Add: "10.128.0.1", Del: "10.128.0.0"}, false},
		{protocol.Change{VIP: "10.96.1.1", Add: "10.64.0.1", Del: "10.128.0.17"}, true},
		{protocol.Change{VIP: "10.96.1.1", Add: "10.64.0.2", Del: "10.128.0.17"}, false},
	} {
		if got, err := o.seen(tc.ch); err != nil || got != tc.want {
			t.Errorf("seen %+v: got %v, %v; want %v", tc.ch, got, err, tc.want)
		}
	}
	// One endpoint short: not full.
	o3, _ := newNFTObserver(protocol.Plan{N: 2, Endpoints: 3, VIPs: []string{"10.96.1.0", "10.96.1.1"}})
	defer o3.close()
	if ok, _, _ := o3.full(); ok {
		t.Error("3 endpoints wanted, 2 in the maps: full")
	}
}
