package reconciler

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// olderVIPsSet leaves the shim's sets as a version that made them with a
// smaller maxelem would have, the IPv4 VIPs set with room for two members,
// both taken.
func olderVIPsSet(t *testing.T, f *fake.Fake) {
	t.Helper()
	smallVIPsSet(t, f, "10.96.0.1", "10.96.0.2")
}

// smallVIPsSet makes the shim's sets again, the IPv4 VIPs set with room for
// two members, and adds members to it.
func smallVIPsSet(t *testing.T, f *fake.Fake, members ...string) {
	t.Helper()
	ctx := context.Background()
	if err := f.DeleteShim(ctx); err != nil {
		t.Fatal(err)
	}
	for _, def := range shim.Sets(true, true) {
		maxElem := shim.MaxSetMembers
		if def.Kind == shim.VIPs && !def.IPv6 {
			maxElem = 2
		}
		if err := f.MakeSet(ctx, def, maxElem); err != nil {
			t.Fatal(err)
		}
	}
	for _, ip := range members {
		if err := f.Do(ctx, model.Op{Kind: model.AddSetEntry, Entry: shim.VIPEntry(netip.MustParseAddr(ip))}); err != nil {
			t.Fatal(err)
		}
	}
}

// threeClusterIPs are three Services, one ClusterIP each.
func threeClusterIPs(r *rig) {
	for i, ip := range []string{"10.96.0.1", "10.96.0.2", "10.96.0.3"} {
		r.store.SetService(service(string(rune('a'+i)), ip, corev1.ProtocolTCP, 80))
	}
}

// vipLines are the bound addresses and the VIPs members of a dump.
func vipLines(dump string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(dump, "\n") {
		if strings.HasPrefix(l, "addr ") || strings.HasPrefix(l, "set KUBE-IPVS-VIPS ") {
			b.WriteString(l)
		}
	}
	return b.String()
}

const threeVIPs = `addr 10.96.0.1
addr 10.96.0.2
addr 10.96.0.3
set KUBE-IPVS-VIPS 10.96.0.1
set KUBE-IPVS-VIPS 10.96.0.2
set KUBE-IPVS-VIPS 10.96.0.3
`

// TestOlderVIPsSetReplacedAtStart: a VIPs set an older version made with
// room for fewer members is replaced at start, its members kept, and
// every VIP goes in with its member.
func TestOlderVIPsSetReplacedAtStart(t *testing.T) {
	r := newRig(t)
	olderVIPsSet(t, r.fake)
	r.restart()
	threeClusterIPs(r)
	r.sync(false)
	if got := vipLines(r.fake.Dump()); got != threeVIPs {
		t.Fatalf("VIPs:\n%s\nwant:\n%s", got, threeVIPs)
	}
}

// TestOtherTypeVIPsSetAtStart: a VIPs set of another type at start is made
// anew, empty, which does not stop the start, and every VIP goes in with
// its member.
func TestOtherTypeVIPsSetAtStart(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	if err := r.fake.DeleteShim(ctx); err != nil {
		t.Fatal(err)
	}
	for _, def := range shim.Sets(true, true) {
		if def.Kind == shim.VIPs && !def.IPv6 {
			def.Type = shim.HashIPPort
		}
		if err := r.fake.MakeSet(ctx, def, shim.MaxSetMembers); err != nil {
			t.Fatal(err)
		}
	}
	r.restart()
	threeClusterIPs(r)
	r.sync(false)
	if got := vipLines(r.fake.Dump()); got != threeVIPs {
		t.Fatalf("VIPs:\n%s\nwant:\n%s", got, threeVIPs)
	}
}

// TestFullVIPsSetHoldsTheBind: while the VIPs set cannot take a VIP's
// member (full, and not replaced: the shim could not be ensured), the VIP
// is not bound, for bound without its member it would answer on every
// host port; the failure names the set and that it is full. Once the set
// is replaced, the VIP goes in.
func TestFullVIPsSetHoldsTheBind(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	r := newRigWith(t, func(o *Options) { o.Log = zap.New(core) })
	olderVIPsSet(t, r.fake)
	injected := errors.New("injected")
	r.fake.FailWhen(func(c fake.Call) error {
		if c.Method == "EnsureShim" {
			return injected
		}
		return nil
	})
	r.rec = New(r.options())
	if err := r.rec.Init(context.Background()); !errors.Is(err, injected) {
		t.Fatalf("init: %v, want the injected error", err)
	}
	threeClusterIPs(r)
	st, _ := r.rec.Sync(context.Background(), false)
	if st.Failed != 1 {
		t.Errorf("%d operations failed, want 1 (the third VIP's member)", st.Failed)
	}
	want := `addr 10.96.0.1
addr 10.96.0.2
set KUBE-IPVS-VIPS 10.96.0.1
set KUBE-IPVS-VIPS 10.96.0.2
`
	if got := vipLines(r.fake.Dump()); got != want {
		t.Fatalf("VIPs with the set full:\n%s\nwant:\n%s", got, want)
	}
	if !strings.Contains(r.fake.Dump(), "-A -t 10.96.0.3:80") {
		t.Fatalf("the third Service's virtual server is missing:\n%s", r.fake.Dump())
	}
	named := false
	for _, e := range logs.All() {
		err, _ := e.ContextMap()["error"].(string)
		named = named || strings.Contains(err, "KUBE-IPVS-VIPS 10.96.0.3") && strings.Contains(err, "hash is full")
	}
	if !named {
		t.Fatalf("no warning names the set and that it is full: %v", logs.All())
	}

	r.fake.FailWhen(nil)
	r.sync(false) // replaces the set; the member's retry is not due yet
	r.clock.advance(st.Requeue)
	r.sync(false)
	if got := vipLines(r.fake.Dump()); got != threeVIPs {
		t.Fatalf("VIPs once the set is replaced:\n%s\nwant:\n%s", got, threeVIPs)
	}
}

// TestVIPsSetMadeSmallWhileRunning: a VIPs set made again too small while
// the agent runs (its shim already ensured) fills; the failure has the
// shim ensured again, which replaces the set, and the member's retry binds
// the VIP.
func TestVIPsSetMadeSmallWhileRunning(t *testing.T) {
	r := newRig(t)
	r.sync(false)
	smallVIPsSet(t, r.fake)
	threeClusterIPs(r)
	st, _ := r.rec.Sync(context.Background(), false)
	if st.Failed != 1 {
		t.Fatalf("%d operations failed, want 1 (the third VIP's member)", st.Failed)
	}
	r.clock.advance(st.Requeue)
	r.sync(false)
	if got := vipLines(r.fake.Dump()); got != threeVIPs {
		t.Fatalf("VIPs once the set is replaced:\n%s\nwant:\n%s", got, threeVIPs)
	}
}
