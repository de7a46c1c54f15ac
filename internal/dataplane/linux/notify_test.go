//go:build linux

package linux_test

import (
	"context"
	"net/netip"
	"os/exec"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/dataplanetest"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/linux"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// TestWatchReportsTheLinkAndTheShimTables: in a fresh network namespace,
// Watch reports an address added to or deleted from the link and a chain
// or rule changed in an iptables-nft table the shim writes, and nothing
// for an address on another link or a table of another family. LinkAddrs
// reads the link's addresses.
func TestWatchReportsTheLinkAndTheShimTables(t *testing.T) {
	if !isolated(t) {
		return
	}
	if _, err := exec.LookPath("iptables-nft"); err != nil {
		skipOrFail(t, "iptables-nft not installed")
	}
	const link = "kipvs-test0"
	run(t, "ip", "link", "add", link, "type", "veth", "peer", "name", "kipvs-test1")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", link).Run() })
	run(t, "ip", "link", "set", "lo", "up")
	d := linux.Watcher(link)
	w := make(dataplanetest.Announced, 1024)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Watch(ctx, w.Report); close(done) }()
	defer func() { cancel(); <-done }()

	// The subscriptions open on Watch's goroutines: change until heard.
	for i := 0; !w.Heard(dataplane.AddrsChanged, 200*time.Millisecond); i++ {
		if i == 50 {
			t.Fatal("an address added to the link was never reported")
		}
		run(t, "ip", "addr", "replace", "10.96.0.99/32", "dev", link)
		run(t, "ip", "addr", "del", "10.96.0.99/32", "dev", link)
	}
	for i := 0; !w.Heard(dataplane.RulesChanged, 200*time.Millisecond); i++ {
		if i == 50 {
			t.Fatal("a chain made in iptables-nft's nat table was never reported")
		}
		run(t, "iptables-nft", "-w", "-t", "nat", "-N", "KUBE-IPVS-WATCH")
		run(t, "iptables-nft", "-w", "-t", "nat", "-X", "KUBE-IPVS-WATCH")
	}
	w.Drain()

	for _, tc := range []struct {
		name   string
		change [][]string
		want   dataplane.Event // 0: nothing reported
	}{
		{"address added to the link", [][]string{{"ip", "addr", "add", "10.96.0.10/32", "dev", link}}, dataplane.AddrsChanged},
		{"address deleted from the link", [][]string{{"ip", "addr", "del", "10.96.0.10/32", "dev", link}}, dataplane.AddrsChanged},
		{"address on another link", [][]string{{"ip", "addr", "add", "127.0.0.5/8", "dev", "lo"}}, 0},
		{"rule appended in nat", [][]string{{"iptables-nft", "-w", "-t", "nat", "-A", "PREROUTING", "-j", "RETURN"}}, dataplane.RulesChanged},
		{"rule deleted in nat", [][]string{{"iptables-nft", "-w", "-t", "nat", "-D", "PREROUTING", "-j", "RETURN"}}, dataplane.RulesChanged},
		{"rule appended in IPv6 filter", [][]string{{"ip6tables-nft", "-w", "-t", "filter", "-A", "INPUT", "-j", "RETURN"}}, dataplane.RulesChanged},
		{"nat table of another family", [][]string{{"nft", "add", "table", "inet", "nat"}, {"nft", "add", "chain", "inet", "nat", "c"}}, 0},
		{"another IPv4 table", [][]string{{"nft", "add", "table", "ip", "other"}, {"nft", "add", "chain", "ip", "other", "c"}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range tc.change {
				if _, err := exec.LookPath(c[0]); err != nil {
					skipOrFail(t, c[0]+" not installed")
				}
				if c[0] == "nft" && c[1] == "add" && c[2] == "table" {
					// Tables left behind would be in the way of the shim's
					// tests, which run in the same namespace in the VM.
					table := c[3:5]
					t.Cleanup(func() { _ = exec.Command("nft", "delete", "table", table[0], table[1]).Run() })
				}
				run(t, c[0], c[1:]...)
			}
			if tc.want != 0 {
				if !w.Heard(tc.want, 5*time.Second) {
					t.Fatalf("not reported")
				}
				w.Drain()
				return
			}
			if w.Heard(dataplane.AddrsChanged|dataplane.RulesChanged, 500*time.Millisecond) {
				t.Fatal("reported")
			}
		})
	}

	run(t, "ip", "addr", "add", "10.96.0.11/32", "dev", link)
	addrs, err := d.LinkAddrs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := addrs[netip.MustParseAddr("10.96.0.11")]; !ok || len(addrs) != 1 {
		t.Fatalf("LinkAddrs: %v, want 10.96.0.11 alone", addrs)
	}
}

// Watch, LinkAddrs and Backend reach the linux dataplane through the
// contract's wrappers, so that it runs the contract's announcements.
func (s switchable) Watch(ctx context.Context, report func(dataplane.Event)) {
	s.linux().Watch(ctx, report)
}

func (s switchable) FollowsAddrs() bool { return s.linux().FollowsAddrs() }

func (s switchable) LinkAddrs(ctx context.Context) (map[netip.Addr]struct{}, error) {
	return s.linux().LinkAddrs(ctx)
}

func (s switchable) Backend(ctx context.Context) shim.Backend { return s.linux().Backend(ctx) }

func (s switchable) linux() *linux.Dataplane { return s.Dataplane.(*linux.Dataplane) }
