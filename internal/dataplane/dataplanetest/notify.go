package dataplanetest

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// Announced collects what a Notifier's Watch reports: pass its Report to
// Watch, then wait with Heard.
type Announced chan dataplane.Event

// Report is Watch's report function.
func (a Announced) Report(ev dataplane.Event) {
	select {
	case a <- ev:
	default: // a test reads what it waits for; a full buffer drops the rest
	}
}

// Heard tells whether want was reported within wait, dropping the rest.
func (a Announced) Heard(want dataplane.Event, wait time.Duration) bool {
	deadline := time.After(wait)
	for {
		select {
		case ev := <-a:
			if ev&want != 0 {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// Drain forgets what was reported until nothing more comes for a while.
func (a Announced) Drain() {
	for {
		select {
		case <-a:
		case <-time.After(300 * time.Millisecond):
			return
		}
	}
}

// testAnnouncements: a dataplane that is a dataplane.Notifier announces an
// address bound or unbound and the link deleted, and the shim's rules
// written (iptables-nft on a real kernel: legacy iptables announces
// nothing, and is skipped); LinkAddrs reads what Observe reads of the
// link.
func testAnnouncements(t *testing.T, dp dataplane.Dataplane) {
	n, ok := dp.(dataplane.Notifier)
	if !ok {
		t.Fatalf("%T is not a dataplane.Notifier: every dataplane the contract runs on announces its changes", dp)
	}
	ctx := ctxFor(t)
	must(t, "init", dp.Init(ctx))
	a := make(Announced, 1024)
	wctx, cancel := context.WithCancel(ctx)
	watching := make(chan struct{})
	go func() { n.Watch(wctx, a.Report); close(watching) }()
	defer func() {
		cancel()
		<-watching
		if n.FollowsAddrs() {
			t.Error("Watch ended: FollowsAddrs still true")
		}
	}()

	// The subscriptions open on Watch's goroutine; once open, Watch says
	// it follows the addresses and reports them changed, for what changed
	// before it heard.
	for i := 0; !n.FollowsAddrs(); i++ {
		if i == 100 {
			t.Fatal("Watch never followed the link's addresses")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !a.Heard(dataplane.AddrsChanged, 5*time.Second) {
		t.Fatal("subscriptions opened: the addresses not reported changed")
	}
	a.Drain()
	must(t, "bind", bindAddr(ctx, dp, vip4b))
	must(t, "unbind", unbindAddr(ctx, dp, vip4b))
	if !a.Heard(dataplane.AddrsChanged, 5*time.Second) {
		t.Fatal("an address bound while Watch follows the addresses: not announced")
	}
	for _, step := range []struct {
		what string
		do   func() error
	}{
		{"bind " + vip4.String(), func() error { return bindAddr(ctx, dp, vip4) }},
		{"bind " + vip6.String(), func() error { return bindAddr(ctx, dp, vip6) }},
		{"unbind " + vip6.String(), func() error { return unbindAddr(ctx, dp, vip6) }},
	} {
		must(t, step.what, step.do())
		if !a.Heard(dataplane.AddrsChanged, 5*time.Second) {
			t.Fatalf("%s: not announced", step.what)
		}
	}
	addrs, err := n.LinkAddrs(ctx)
	must(t, "read the link's addresses", err)
	if got, want := slices.Collect(maps.Keys(addrs)), slices.Collect(maps.Keys(observe(t, ctx, dp).State.Addrs)); !slices.Equal(got, want) || len(got) != 1 {
		t.Fatalf("LinkAddrs %v, Observe %v; want %s alone in both", got, want, vip4)
	}
	must(t, "delete the link", dp.DeleteLink(ctx))
	if !a.Heard(dataplane.AddrsChanged, 5*time.Second) {
		t.Fatal("the link's deletion: its addresses' loss not announced")
	}
	if addrs, err := n.LinkAddrs(ctx); err != nil || len(addrs) != 0 {
		t.Fatalf("LinkAddrs without the link: %v, %v; want none, no error", addrs, err)
	}

	if b, ok := dp.(interface {
		Backend(context.Context) shim.Backend
	}); ok && b.Backend(ctx) != shim.BackendNFT {
		return
	}
	must(t, "ensure the shim", dp.EnsureShim(ctx, dualStack))
	if !a.Heard(dataplane.RulesChanged, 5*time.Second) {
		t.Fatal("the shim's rules written: not announced")
	}
}
