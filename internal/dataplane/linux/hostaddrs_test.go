//go:build linux

package linux_test

import (
	"context"
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/linux"
)

// The watcher follows addresses as they come and go on the node's links,
// and never reports those on kube-ipvs0 (the VIPs) or those keep refuses.
// It runs in a fresh network namespace, with veth links (this kernel may
// have no dummy links; kube-ipvs0 is a veth here, which is all the watcher
// can tell by: its name).
func TestWatchHostAddrs(t *testing.T) {
	if !isolated(t) {
		return
	}
	if _, err := exec.LookPath("ip"); err != nil {
		skipOrFail(t, "iproute2's ip is needed to change addresses")
	}
	run(t, "ip", "link", "add", "wa0", "type", "veth", "peer", "name", "wa1")
	run(t, "ip", "link", "add", dataplane.LinkName, "type", "veth", "peer", "name", "kipvs-peer")
	for _, l := range []string{"lo", "wa0", "wa1", dataplane.LinkName} {
		run(t, "ip", "link", "set", l, "up")
	}
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan []netip.Addr, 100)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		keep := func(a netip.Addr) bool { return !a.IsLoopback() && !a.IsLinkLocalUnicast() }
		linux.WatchHostAddrs(ctx, keep, zap.NewNop(), func(a []netip.Addr) { reports <- a })
	}()
	defer func() { cancel(); <-stopped }()

	expect := func(why string, want ...string) {
		t.Helper()
		var w []netip.Addr
		for _, s := range want {
			w = append(w, netip.MustParseAddr(s))
		}
		select {
		case got := <-reports:
			if !slices.Equal(got, w) {
				t.Fatalf("%s: reported %v, want %v", why, got, w)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no report in 30s, want %v", why, w)
		}
	}
	expect("start: loopback and link-local only")
	run(t, "ip", "addr", "add", "192.0.2.1/24", "dev", "wa0")
	expect("added on wa0", "192.0.2.1")
	// A VIP bound on kube-ipvs0 is not a host address: the next report
	// (caused by the address after it) must not hold it.
	run(t, "ip", "addr", "add", "10.96.0.1/32", "dev", dataplane.LinkName)
	run(t, "ip", "addr", "add", "2001:db8::1/64", "dev", "wa1", "nodad")
	expect("VIP on kube-ipvs0, then an IPv6 address on wa1", "192.0.2.1", "2001:db8::1")
	run(t, "ip", "addr", "del", "192.0.2.1/24", "dev", "wa0")
	expect("deleted from wa0", "2001:db8::1")
	run(t, "ip", "link", "del", "wa0") // takes its peer wa1 and its address
	expect("link gone")
}
