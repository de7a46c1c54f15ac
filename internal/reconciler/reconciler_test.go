package reconciler

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
	"github.com/kube-ipvs/kube-ipvs/internal/snapshot"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

const webAndDNS = `-A -t 10.96.0.10:80 -s rr
  -a -t 10.96.0.10:80 -r 10.244.1.2:8080 -m -w 1
  -a -t 10.96.0.10:80 -r 10.244.2.2:8080 -m -w 1
-A -u 10.96.0.53:53 -s rr
  -a -u 10.96.0.53:53 -r 10.244.1.3:53 -m -w 1
addr 10.96.0.10
addr 10.96.0.53
`

func (r *rig) webAndDNS() {
	r.store.SetService(service("web", "10.96.0.10", corev1.ProtocolTCP, 80))
	r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2"), ready("10.244.2.2")))
	r.store.SetService(service("dns", "10.96.0.53", corev1.ProtocolUDP, 53))
	r.store.SetSlice(slice("dns", corev1.ProtocolUDP, 53, ready("10.244.1.3")))
}

func TestSyncFromScratch(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	st := r.sync(false)
	r.expectDump(webAndDNS)
	// 7 IPVS and address operations, 9 shim set members (2 frontend
	// records, 2 cluster IPs, 3 hairpin members, 2 VIPs).
	if !st.Full || st.Ops != 16 {
		t.Fatalf("first sync: full=%v ops=%d, want full with 16 ops", st.Full, st.Ops)
	}
}

func TestRestartPlansNothing(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2"), terminating("10.244.2.2")))
	r.sync(false)
	before := r.fake.Dump()
	if !strings.Contains(before, "10.244.2.2:8080 -m -w 0") {
		t.Fatalf("terminating endpoint not at weight 0:\n%s", before)
	}
	r.restart()
	r.fake.ResetCalls()
	st := r.sync(false)
	if st.Ops != 0 || mutating(r.fake) != 0 {
		t.Fatalf("restart planned %d ops, made %d mutating calls: %v", st.Ops, mutating(r.fake), r.fake.Log())
	}
	if got := r.fake.Dump(); got != before {
		t.Fatalf("kernel holds:\n%s\nwant:\n%s", got, before)
	}
}

func TestIncrementalChangeOfOneServiceAmong10000(t *testing.T) {
	r := newRig(t)
	for i := range 10000 {
		name := fmt.Sprintf("svc-%d", i)
		ip := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
		r.store.SetService(service(name, ip, corev1.ProtocolTCP, 80))
		r.store.SetSlice(slice(name, corev1.ProtocolTCP, 8080, ready(fmt.Sprintf("10.244.%d.%d", i/250, i%250+1))))
	}
	r.sync(false)
	r.fake.ResetCalls()
	r.store.SetSlice(slice("svc-4242", corev1.ProtocolTCP, 8080, ready("10.244.16.243"), ready("10.245.0.1")))
	st := r.sync(false)
	calls := r.fake.Calls()
	// One real server, and its hairpin member (the endpoint names no node,
	// so it may be local).
	if st.Full || st.Services != 1 || st.Ops != 2 || calls["AddReal"] != 1 || calls["AddSetEntry"] != 1 || mutating(r.fake) != 2 || calls["Observe"] != 0 {
		t.Fatalf("incremental sync: full=%v services=%d ops=%d calls=%v", st.Full, st.Services, st.Ops, calls)
	}
}

func TestTerminatingDrainsThenGoes(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	vs := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80)
	gone := netip.MustParseAddrPort("10.244.2.2:8080")
	r.fake.SetConns(dataplane.RealRef{VS: vs, RS: gone}, model.Conns{Active: 1})

	r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2")))
	st := r.sync(false)
	if !strings.Contains(r.fake.Dump(), "-r 10.244.2.2:8080 -m -w 0") || st.Draining != 1 || st.Requeue == 0 {
		t.Fatalf("removed TCP endpoint with a connection not draining (draining=%d requeue=%s):\n%s", st.Draining, st.Requeue, r.fake.Dump())
	}
	r.clock.advance(time.Minute)
	r.sync(false)
	if !strings.Contains(r.fake.Dump(), "10.244.2.2:8080") {
		t.Fatal("drained before its connection closed or the timeout passed")
	}
	r.fake.SetConns(dataplane.RealRef{VS: vs, RS: gone}, model.Conns{})
	st = r.sync(false)
	if strings.Contains(r.fake.Dump(), "10.244.2.2:8080") || st.Draining != 0 {
		t.Fatalf("connection count zero, real server still there:\n%s", r.fake.Dump())
	}
}

func TestDrainTimeoutAnnotation(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	web := service("web", "10.96.0.10", corev1.ProtocolTCP, 80)
	web.Annotations = map[string]string{"kube-ipvs.io/drain-timeout": "10s"}
	r.store.SetService(web)
	r.sync(false)
	vs := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80)
	r.fake.SetConns(dataplane.RealRef{VS: vs, RS: netip.MustParseAddrPort("10.244.2.2:8080")}, model.Conns{Active: 5})
	r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2")))
	r.sync(false)
	r.clock.advance(9 * time.Second)
	r.sync(false)
	if !strings.Contains(r.fake.Dump(), "10.244.2.2:8080") {
		t.Fatal("gone before the 10s drain timeout")
	}
	r.clock.advance(time.Second)
	r.sync(false)
	if strings.Contains(r.fake.Dump(), "10.244.2.2:8080") {
		t.Fatalf("still there after the drain timeout:\n%s", r.fake.Dump())
	}
}

func TestUDPEndpointGoesAtOnceAndConntrackIsFlushed(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.store.SetSlice(slice("dns", corev1.ProtocolUDP, 53, ready("10.244.1.3"), ready("10.244.2.3")))
	r.sync(false)
	vs := model.NewVSKey(model.UDP, netip.MustParseAddr("10.96.0.53"), 53)
	r.fake.SetConns(dataplane.RealRef{VS: vs, RS: netip.MustParseAddrPort("10.244.2.3:53")}, model.Conns{Inactive: 3})
	r.fake.SetConntrack(model.UDP, netip.MustParseAddrPort("10.244.2.3:53"), 3)

	r.store.SetSlice(slice("dns", corev1.ProtocolUDP, 53, ready("10.244.1.3")))
	r.sync(false)
	if strings.Contains(r.fake.Dump(), "10.244.2.3") {
		t.Fatalf("UDP real server kept:\n%s", r.fake.Dump())
	}
	if left := r.fake.Conntrack(); left != "" {
		t.Fatalf("conntrack entries of the removed real server left:\n%s", left)
	}
}

func TestInvalidSchedulerKeepsLastGoodAndOthersApply(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	web := service("web", "10.96.0.10", corev1.ProtocolTCP, 80)
	web.Annotations = map[string]string{"kube-ipvs.io/scheduler": "fastest"}
	r.store.SetService(web)
	r.store.SetSlice(slice("dns", corev1.ProtocolUDP, 53, ready("10.244.1.3"), ready("10.244.1.4")))
	r.sync(false)
	want := strings.Replace(webAndDNS, "  -a -u 10.96.0.53:53 -r 10.244.1.3:53 -m -w 1\n",
		"  -a -u 10.96.0.53:53 -r 10.244.1.3:53 -m -w 1\n  -a -u 10.96.0.53:53 -r 10.244.1.4:53 -m -w 1\n", 1)
	r.expectDump(want)
	if len(r.warn.warnings) != 1 || !strings.Contains(r.warn.warnings[0], "default/web") || !strings.Contains(r.warn.warnings[0], "fastest") {
		t.Fatalf("warnings %q, want one naming default/web and the scheduler", r.warn.warnings)
	}
}

func TestForeignServiceSurvivesFullResync(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	foreign := model.VirtualServer{Key: model.NewVSKey(model.TCP, netip.MustParseAddr("192.168.1.200"), 443), Scheduler: "wlc"}
	if err := r.fake.Do(context.Background(), model.Op{Kind: model.AddService, VS: foreign}); err != nil {
		t.Fatal(err)
	}
	// Drift made by someone else on one of ours: a real server deleted.
	web := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80)
	if err := r.fake.Do(context.Background(), model.Op{Kind: model.DeleteReal, VS: model.VirtualServer{Key: web}, RS: model.RealServer{Addr: netip.MustParseAddrPort("10.244.1.2:8080")}}); err != nil {
		t.Fatal(err)
	}
	r.sync(true)
	r.expectDump(strings.Replace(webAndDNS, "addr 10.96.0.10", "-A -t 192.168.1.200:443 -s wlc\naddr 10.96.0.10", 1))
}

func TestServiceDeletedRemovesServerAndVIP(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	r.fake.SetConntrack(model.UDP, netip.MustParseAddrPort("10.244.1.3:53"), 2)
	r.fake.SetConntrack(model.UDP, netip.MustParseAddrPort("10.244.1.2:8080"), 1) // not a UDP real server
	r.store.DeleteService(model.ServiceName{Namespace: "default", Name: "dns"})
	r.sync(false)
	r.expectDump(`-A -t 10.96.0.10:80 -s rr
  -a -t 10.96.0.10:80 -r 10.244.1.2:8080 -m -w 1
  -a -t 10.96.0.10:80 -r 10.244.2.2:8080 -m -w 1
addr 10.96.0.10
`)
	if left, want := r.fake.Conntrack(), "udp dst * reply 10.244.1.2:8080 x1\n"; left != want {
		t.Fatalf("conntrack entries left:\n%swant those of the deleted UDP service's real server gone:\n%s", left, want)
	}
}

func TestNoPruneBeforeSourcesSynced(t *testing.T) {
	r := newRig(t)
	r.fake.Load(mustState(t, webAndDNS)) // left by an earlier run
	r.store = newUnsyncedStore()         // the informers have not listed yet
	r.restart()
	if st := r.sync(false); st.Ops != 0 {
		t.Fatalf("planned %d ops before sources synced", st.Ops)
	}
	r.expectDump(webAndDNS)
	r.store.SetSynced("services") // synced, and truly empty: now it goes
	r.sync(false)
	r.expectDump("")
}

func TestDoubtfulObserveNeverPrunes(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	r.fake.ObserveErr(errors.New("dump interrupted"))
	r.store.DeleteService(model.ServiceName{Namespace: "default", Name: "web"})
	if _, err := r.rec.Sync(context.Background(), true); err == nil {
		t.Fatal("sync with a failed observe succeeded")
	}
	r.expectDump(webAndDNS)
	r.fake.ObserveErr(nil)
	r.sync(false) // a failed sync forces the next to be full
	if strings.Contains(r.fake.Dump(), "10.96.0.10") {
		t.Fatalf("deleted service still there after recovery:\n%s", r.fake.Dump())
	}
}

func TestDryRunPrintsAndChangesNothing(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	opt := r.options()
	opt.DryRun = true
	r.rec = New(opt)
	st := r.sync(false)
	if r.fake.Dump() != "" {
		t.Fatalf("dry run changed the kernel:\n%s", r.fake.Dump())
	}
	want := `ipset add KUBE-IPVS-FRONTENDS 10.96.0.10,tcp:80
ipset add KUBE-IPVS-FRONTENDS 10.96.0.53,udp:53
-A -t 10.96.0.10:80 -s rr
-A -u 10.96.0.53:53 -s rr
-a -t 10.96.0.10:80 -r 10.244.1.2:8080 -m -w 1
-a -t 10.96.0.10:80 -r 10.244.2.2:8080 -m -w 1
-a -u 10.96.0.53:53 -r 10.244.1.3:53 -m -w 1
ipset add KUBE-IPVS-CLUSTER-IP 10.96.0.10,tcp:80
ipset add KUBE-IPVS-CLUSTER-IP 10.96.0.53,udp:53
ipset add KUBE-IPVS-LOOP-BACK 10.244.1.2,tcp:8080,10.244.1.2
ipset add KUBE-IPVS-LOOP-BACK 10.244.1.3,udp:53,10.244.1.3
ipset add KUBE-IPVS-LOOP-BACK 10.244.2.2,tcp:8080,10.244.2.2
ipset add KUBE-IPVS-VIPS 10.96.0.10
ipset add KUBE-IPVS-VIPS 10.96.0.53
ip addr add 10.96.0.10/32
ip addr add 10.96.0.53/32
`
	if got := r.out.String(); got != want {
		t.Fatalf("dry run printed:\n%s\nwant:\n%s", got, want)
	}
	if n := strings.Count(want, "\n"); st.Ops != n {
		t.Fatalf("dry run reported %d operations, printed %d", st.Ops, n)
	}
}

// TestInitRefusesTwoFamilies: the shim and translation must serve the same
// families; a caller that sets only one would get virtual servers without
// their masquerading sets, so Init refuses before touching the kernel.
func TestInitRefusesTwoFamilies(t *testing.T) {
	kernel := fake.New()
	rec := New(Options{
		Dataplane: kernel, Store: snapshot.NewStore(),
		Translate: translate.Config{Scheduler: "rr", Families: model.Families{IPv4: true, IPv6: true}},
		Shim:      shim.Config{Families: model.Families{IPv4: true}},
	})
	err := rec.Init(context.Background())
	if err == nil || !strings.Contains(err.Error(), "IPv4,IPv6") {
		t.Fatalf("Init with the shim on IPv4 only: %v, want an error naming both", err)
	}
	if got := kernel.Dump(); got != "" {
		t.Fatalf("Init touched the kernel before refusing:\n%s", got)
	}
}
