//go:build linux

package linux_test

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/ipvs"
	"github.com/ti-mo/conntrack"
	"github.com/vishvananda/netlink"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/linux"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// These tests read back, with other tools, what the contract suite cannot
// see through the interface. Like the suite, they run only on a kernel with
// IPVS (the VM) and change its global settings.

func readSysctl(t *testing.T, key string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + key)
	if err != nil {
		t.Fatalf("read sysctl %s: %v", key, err)
	}
	return strings.TrimSpace(string(b))
}

func TestInitSetsSysctls(t *testing.T) {
	dp := newLinux(t)
	connReuseBefore := readSysctl(t, "net/ipv4/vs/conn_reuse_mode")
	if err := dp.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"net/ipv4/vs/conntrack", "net/ipv4/vs/expire_nodest_conn",
		"net/ipv4/vs/expire_quiescent_template", "net/ipv4/ip_forward"} {
		if got := readSysctl(t, k); got != "1" {
			t.Errorf("after Init %s = %s, want 1", k, got)
		}
	}
	release, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatal(err)
	}
	v, err := dataplane.ParseKernelVersion(string(release))
	if err != nil {
		t.Fatal(err)
	}
	want := connReuseBefore
	if dataplane.ConnReuseFor(v) == dataplane.ConnReuseSetZero {
		want = "0"
	}
	if got := readSysctl(t, "net/ipv4/vs/conn_reuse_mode"); got != want {
		t.Errorf("kernel %s: conn_reuse_mode = %s after Init, want %s", v, got, want)
	}
}

func TestSetTimeoutsReadBack(t *testing.T) {
	dp := newLinux(t)
	ctx := t.Context()
	h, err := ipvs.New("")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	before, err := h.GetConfig()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.SetConfig(before) })

	if err := dp.SetTimeouts(ctx, dataplane.Timeouts{TCP: 2 * time.Hour, TCPFin: 30 * time.Second, UDP: 45 * time.Second}); err != nil {
		t.Fatal(err)
	}
	// Zero keeps: only UDP changes.
	if err := dp.SetTimeouts(ctx, dataplane.Timeouts{UDP: 90 * time.Second}); err != nil {
		t.Fatal(err)
	}
	got, err := h.GetConfig()
	if err != nil {
		t.Fatal(err)
	}
	want := ipvs.Config{TimeoutTCP: 2 * time.Hour, TimeoutTCPFin: 30 * time.Second, TimeoutUDP: 90 * time.Second}
	if *got != want {
		t.Fatalf("timeouts: got %+v, want %+v", *got, want)
	}
}

// natFlow is a conntrack entry as IPVS leaves it for a NATed connection:
// client -> vip in the original direction, real -> client in the reply.
func natFlow(proto uint8, client, vip, real netip.AddrPort) conntrack.Flow {
	f := conntrack.NewFlow(proto, 0, client.Addr(), vip.Addr(), client.Port(), vip.Port(), 120, 0)
	f.TupleReply.IP.SourceAddress = real.Addr()
	f.TupleReply.Proto.SourcePort = real.Port()
	return f
}

// TestClearConntrack: one clear deletes, in both families, the entries
// NATed to removed real servers and those sent to frontends while they had
// no endpoint, and nothing else.
func TestClearConntrack(t *testing.T) {
	dp := newLinux(t)
	ct, err := conntrack.Dial(nil)
	if err != nil {
		t.Fatalf("open conntrack: %v", err)
	}
	defer ct.Close()
	ap := netip.MustParseAddrPort
	vip, empty, idle := ap("10.96.0.10:53"), ap("10.96.9.10:53"), ap("10.96.9.11:53")
	gone, stays := ap("10.244.1.5:53"), ap("10.244.1.6:53")
	vip6, gone6, empty6 := ap("[fd00:96::10]:53"), ap("[fd00:244::5]:53"), ap("[fd00:96::11]:53")
	flows := []struct {
		flow    conntrack.Flow
		deleted bool
	}{
		{natFlow(syscall.IPPROTO_UDP, ap("10.0.0.50:40000"), vip, gone), true},
		{natFlow(syscall.IPPROTO_UDP, ap("10.0.0.51:40001"), vip, gone), true},
		{natFlow(syscall.IPPROTO_UDP, ap("10.0.0.52:40002"), vip, stays), false},               // another real server
		{natFlow(syscall.IPPROTO_TCP, ap("10.0.0.50:40000"), vip, gone), false},                // another protocol
		{natFlow(syscall.IPPROTO_UDP, ap("10.0.0.53:40003"), vip, ap("10.244.1.5:54")), false}, // another port of the pod
		{natFlow(syscall.IPPROTO_UDP, ap("[fd00::50]:40000"), vip6, gone6), true},
		// Made while the frontend had no endpoint: not NATed, the reply
		// comes from the VIP itself.
		{natFlow(syscall.IPPROTO_UDP, ap("10.0.9.50:41000"), empty, empty), true},
		{natFlow(syscall.IPPROTO_UDP, ap("10.0.9.51:41001"), empty, empty), true},
		{natFlow(syscall.IPPROTO_TCP, ap("10.0.9.50:41000"), empty, empty), false}, // another protocol
		{natFlow(syscall.IPPROTO_UDP, ap("10.0.9.52:41002"), idle, idle), false},   // another frontend
		{natFlow(syscall.IPPROTO_UDP, ap("[fd00::51]:41000"), empty6, empty6), true},
		// NATed to the first endpoint after the apply: it stays.
		{natFlow(syscall.IPPROTO_UDP, ap("10.0.9.53:41003"), empty, ap("10.244.9.1:53")), false},
		{natFlow(syscall.IPPROTO_UDP, ap("[fd00::53]:41003"), empty6, ap("[fd00:244::9]:53")), false},
	}
	for _, f := range flows {
		if err := ct.Create(f.flow); err != nil {
			t.Fatalf("create flow %s: %v", f.flow.TupleOrig, err)
		}
	}
	t.Cleanup(func() {
		for _, f := range flows {
			_ = ct.Delete(conntrack.Flow{TupleOrig: f.flow.TupleOrig})
		}
	})
	s := dataplane.NewStaleFlows(model.UDP)
	for _, k := range []netip.AddrPort{gone, gone6, ap("10.244.3.3:53")} {
		s.AddReal(k)
	}
	for _, k := range []netip.AddrPort{empty, empty6} {
		s.AddDest(k)
	}
	n, err := dp.ClearConntrack(t.Context(), s)
	if err != nil || n != 6 {
		t.Fatalf("clear: got %d, %v; want 6, nil", n, err)
	}
	for _, f := range flows {
		_, err := ct.Get(conntrack.Flow{TupleOrig: f.flow.TupleOrig})
		switch {
		case f.deleted && err == nil:
			t.Errorf("flow %s (reply from %s) survived the clear", f.flow.TupleOrig, f.flow.TupleReply.IP.SourceAddress)
		case !f.deleted && err != nil:
			t.Errorf("flow %s (reply from %s) is gone: %v", f.flow.TupleOrig, f.flow.TupleReply.IP.SourceAddress, err)
		case f.deleted && !errors.Is(err, syscall.ENOENT):
			t.Errorf("get deleted flow %s: %v, want ENOENT", f.flow.TupleOrig, err)
		}
	}
}

func TestStrictARP(t *testing.T) {
	newLinux(t) // root, IPVS, a clean kernel
	dp, err := linux.New(linux.Options{StrictARP: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	if err := dp.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	if a, b := readSysctl(t, "net/ipv4/conf/all/arp_ignore"), readSysctl(t, "net/ipv4/conf/all/arp_announce"); a != "1" || b != "2" {
		t.Fatalf("strict ARP: arp_ignore=%s arp_announce=%s, want 1 and 2", a, b)
	}
}

// TestInitTunesConntrack: Init writes kube-proxy's conntrack settings and
// grows the hash table to a quarter of the new limit.
func TestInitTunesConntrack(t *testing.T) {
	newLinux(t) // root, IPVS, a clean kernel
	tuning := dataplane.ConntrackTuning{MaxPerCore: 1 << 16, Min: 1, TCPEstablished: 2 * time.Hour, TCPCloseWait: 30 * time.Minute,
		TCPBeLiberal: true, UDP: 45 * time.Second, UDPStream: 100 * time.Second}
	dp, err := linux.New(linux.Options{Conntrack: tuning})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	if err := dp.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, s := range tuning.Sysctls(runtime.NumCPU()) {
		if got := readSysctl(t, s.Key); got != s.Value {
			t.Errorf("%s = %s after Init, want %s", s.Key, got, s.Value)
		}
	}
	raw, err := os.ReadFile("/sys/module/nf_conntrack/parameters/hashsize")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(string(raw))); n < tuning.Max(runtime.NumCPU())/4 {
		t.Errorf("conntrack hashsize %d, want at least a quarter of %d", n, tuning.Max(runtime.NumCPU()))
	}
}

// TestInitLeavesNoLinkLocal: kube-ipvs0 comes up with no IPv6 address of
// its own, whether Init creates it or finds it up with one (an earlier
// version's, or a link made by hand).
func TestInitLeavesNoLinkLocal(t *testing.T) {
	dp := newLinux(t)
	ctx := t.Context()
	linkLocals := func() []string {
		t.Helper()
		link, err := netlink.LinkByName(dataplane.LinkName)
		if err != nil {
			t.Fatal(err)
		}
		if link.Attrs().Flags&net.FlagUp == 0 {
			t.Fatalf("%s is down", dataplane.LinkName)
		}
		addrs, err := netlink.AddrList(link, netlink.FAMILY_V6)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range addrs {
			if a.IP.IsLinkLocalUnicast() {
				out = append(out, a.IPNet.String())
			}
		}
		return out
	}

	if err := dp.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if err := applyOne(ctx, dp, model.Op{Kind: model.BindAddr, Addr: netip.MustParseAddr("fd00:96::10")}); err != nil {
		t.Fatal(err)
	}
	if ll := linkLocals(); len(ll) != 0 {
		t.Fatalf("after Init, %s holds link-local addresses %v", dataplane.LinkName, ll)
	}
	if got := readSysctl(t, "net/ipv6/conf/"+dataplane.LinkName+"/addr_gen_mode"); got != "1" {
		t.Errorf("addr_gen_mode of %s = %s, want 1 (none)", dataplane.LinkName, got)
	}
	// Without an address of its own the link still makes an IPv6 VIP
	// local: a connection to it is answered.
	reachVIP(t, netip.MustParseAddr("fd00:96::10"))

	// A link that came up with the kernel's default gets its link-local
	// address at once; Init takes it away and keeps the VIPs.
	if err := dp.DeleteLink(ctx); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: dataplane.LinkName}}); err != nil {
		t.Fatal(err)
	}
	link, err := netlink.LinkByName(dataplane.LinkName)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		t.Fatal(err)
	}
	if ll := linkLocals(); len(ll) == 0 {
		t.Fatalf("control: an up dummy link got no link-local address; this test shows nothing")
	}
	vip := netip.MustParseAddr("10.96.0.10")
	if err := applyOne(ctx, dp, model.Op{Kind: model.BindAddr, Addr: vip}); err != nil {
		t.Fatal(err)
	}
	if err := dp.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if ll := linkLocals(); len(ll) != 0 {
		t.Fatalf("after Init on an up link, %s holds link-local addresses %v", dataplane.LinkName, ll)
	}
	obs, err := dp.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := obs.State.Addrs[vip]; !ok || len(obs.State.Addrs) != 1 {
		t.Fatalf("Init lost or added VIPs: %v", obs.State.Addrs)
	}
	reachVIP(t, vip)
}

// reachVIP listens on vip and connects to it: the VIP is local.
func reachVIP(t *testing.T, vip netip.Addr) {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(vip, 0).String())
	if err != nil {
		t.Fatalf("listen on VIP %s: %v", vip, err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			_, _ = c.Write([]byte("ok"))
			c.Close()
		}
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatalf("connect to VIP %s: %v", vip, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ok" {
		t.Fatalf("read from VIP %s: %q, %v", vip, buf, err)
	}
}
