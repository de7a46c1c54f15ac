package reconciler

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/metrics"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// viewDump renders a published view in one text form.
func viewDump(v *View) string {
	var b strings.Builder
	for _, k := range v.Keys() {
		s, _ := v.Server(k)
		fmt.Fprintf(&b, "%s meta=%s/%s/%s\n", k, s.Meta.Service, s.Meta.PortName, s.Meta.Kind)
		sides(&b, s.Desired, s.Observed)
	}
	fmt.Fprintf(&b, "vips %v\n", v.VIPs())
	d := v.Desired()
	fmt.Fprintf(&b, "want addrs %v sets %v\n", d.SortedAddrs(), d.SortedSetEntries())
	fmt.Fprintf(&b, "drains %v table %+v checks %v\n", sortedDrains(v.drains), v.Table(), v.HealthChecks())
	return b.String()
}

// liveDump renders what the view should hold, read straight from the
// reconciler's own state, in viewDump's form.
func liveDump(r *Reconciler) string {
	var b strings.Builder
	observed := r.obs.State()
	keys := slices.Collect(maps.Keys(r.desired.state.Services))
	for k := range observed.Services {
		if _, ok := r.desired.state.Services[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, model.VSKey.Compare)
	for _, k := range keys {
		m, _ := r.desired.meta(k)
		fmt.Fprintf(&b, "%s meta=%s/%s/%s\n", k, m.Service, m.PortName, m.Kind)
		sides(&b, r.desired.state.Services[k], observed.Services[k])
	}
	fmt.Fprintf(&b, "vips %v\n", observed.SortedAddrs())
	fmt.Fprintf(&b, "want addrs %v sets %v\n", r.desired.state.SortedAddrs(), r.desired.state.SortedSetEntries())
	var t metrics.Table
	for k, want := range r.desired.state.Services {
		if have, ok := observed.Services[k]; ok && want != nil {
			t.VirtualServers++
			t.RealServers += have.Reals.Len()
		}
	}
	t.BoundVIPs, t.Draining, t.Invalid = len(observed.Addrs), len(r.drains), len(r.metrics.invalid)
	t.Failing, t.Refused = len(r.failing), len(r.refused)
	fmt.Fprintf(&b, "drains %v table %+v checks %v\n", sortedDrains(r.drains), t, r.desired.healthChecks())
	return b.String()
}

func sides(b *strings.Builder, want, have *model.Service) {
	for i, svc := range []*model.Service{want, have} {
		if svc != nil {
			fmt.Fprintf(b, "  %s %s %v\n", []string{"want", "have"}[i], svc.VirtualServer, svc.Reals.All())
		}
	}
}

func sortedDrains[V any](m map[dataplane.RealRef]V) []string {
	var out []string
	for ref, v := range m {
		out = append(out, fmt.Sprintf("%s>%s@%v", ref.VS, ref.RS, v))
	}
	slices.Sort(out)
	return out
}

// TestViewFollowsEverySync checks that the view an incremental sync
// publishes (refreshing only its scope) is what a full rebuild would show,
// through additions, drains, deletions, failures, foreign servers and full
// resyncs, and that a published view never changes afterwards.
func TestViewFollowsEverySync(t *testing.T) {
	r := newRig(t)
	web := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80)
	ctx := context.Background()
	steps := []struct {
		name string
		do   func()
		full bool
	}{
		{"web and dns", r.webAndDNS, false},
		{"web's endpoint leaves with a connection: it drains", func() {
			r.fake.SetConns(dataplane.RealRef{VS: web, RS: netip.MustParseAddrPort("10.244.2.2:8080")}, model.Conns{Active: 1})
			r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2")))
		}, false},
		{"a third Service", func() {
			r.store.SetService(service("api", "10.96.0.20", corev1.ProtocolTCP, 443))
			r.store.SetSlice(slice("api", corev1.ProtocolTCP, 8443, ready("10.244.1.7"), terminating("10.244.1.8")))
		}, false},
		{"a foreign server and a hand-deleted real server, repaired by a full sync", func() {
			foreign := model.VirtualServer{Key: model.NewVSKey(model.TCP, netip.MustParseAddr("192.168.1.200"), 443), Scheduler: "wlc"}
			if err := r.fake.Do(ctx, model.Op{Kind: model.AddService, VS: foreign}); err != nil {
				t.Fatal(err)
			}
			if err := r.fake.Do(ctx, model.Op{Kind: model.DeleteReal, VS: model.VirtualServer{Key: web}, RS: model.RealServer{Addr: netip.MustParseAddrPort("10.244.1.2:8080")}}); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"dns deleted, an add fails", func() {
			r.store.DeleteService(model.ServiceName{Namespace: "default", Name: "dns"})
			r.store.SetSlice(slice("api", corev1.ProtocolTCP, 8443, ready("10.244.1.7"), ready("10.244.1.9")))
			r.fake.FailNext("AddReal", fmt.Errorf("boom"))
		}, false},
		{"the foreign server goes behind our back, the drain ends", func() {
			if err := r.fake.Do(ctx, model.Op{Kind: model.DeleteService, VS: model.VirtualServer{Key: model.NewVSKey(model.TCP, netip.MustParseAddr("192.168.1.200"), 443)}}); err != nil {
				t.Fatal(err)
			}
			r.fake.SetConns(dataplane.RealRef{VS: web, RS: netip.MustParseAddrPort("10.244.2.2:8080")}, model.Conns{})
		}, true},
	}
	type kept struct {
		v    *View
		dump string
	}
	var old []kept
	for _, s := range steps {
		s.do()
		_, _ = r.rec.Sync(ctx, s.full) // a failed operation is part of the test
		v := r.rec.View()
		if got, want := viewDump(v), liveDump(r.rec); got != want {
			t.Fatalf("%s: view:\n%s\nwant:\n%s", s.name, got, want)
		}
		old = append(old, kept{v, viewDump(v)})
	}
	for i, k := range old {
		if got := viewDump(k.v); got != k.dump {
			t.Errorf("view of step %q changed after it was published:\n%s\nwas:\n%s", steps[i].name, got, k.dump)
		}
	}
	if v := r.rec.View(); !strings.Contains(viewDump(v), "10.96.0.20:443 meta=default/api/p/ClusterIP") || v.Last.Time.IsZero() {
		t.Fatalf("final view lacks api or the last sync:\n%s", viewDump(v))
	}
}

// TestViewsRunDuringSyncs reads the view and asks for the drift from
// another goroutine while syncs change the state; run with -race, it shows
// that the views share nothing a sync writes.
func TestViewsRunDuringSyncs(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	stop := make(chan struct{})
	done := make(chan error)
	go func() {
		for {
			select {
			case <-stop:
				close(done)
				return
			default:
			}
			v := r.rec.View()
			_ = viewDump(v)
			if _, err := r.rec.Diff(context.Background()); err != nil {
				done <- err
				return
			}
		}
	}()
	for i := range 50 {
		eps := []endpoint{ready("10.244.1.2")}
		if i%2 == 0 {
			eps = append(eps, ready(fmt.Sprintf("10.244.3.%d", i)))
		}
		r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, eps...))
		if i%2 == 0 {
			r.store.SetService(service("api", "10.96.0.20", corev1.ProtocolTCP, 443))
			r.store.SetSlice(slice("api", corev1.ProtocolTCP, 8443, ready("10.244.1.7")))
		} else {
			r.store.DeleteService(model.ServiceName{Namespace: "default", Name: "api"})
		}
		r.sync(i%10 == 0)
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestObservedSharesWhatIsWanted: where the kernel holds what is wanted,
// the observed cache holds the desired virtual server itself, not a second
// copy of the table, so memory does not double with the table; where it
// does not (a failed add),
// the two stay apart, and the desired one is never changed by an apply.
func TestObservedSharesWhatIsWanted(t *testing.T) {
	r := newRig(t)
	web := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80)
	shared := func() (n int) {
		for k, want := range r.rec.desired.state.Services {
			if r.rec.obs.State().Services[k] == want {
				n++
			}
		}
		return n
	}
	r.webAndDNS()
	r.sync(false)
	if n, all := shared(), len(r.rec.desired.state.Services); n != all || all == 0 {
		t.Fatalf("%d of %d virtual servers shared after a clean sync", n, all)
	}
	r.sync(true) // a fresh read of the kernel is shared again
	if n, all := shared(), len(r.rec.desired.state.Services); n != all {
		t.Fatalf("%d of %d virtual servers shared after a full sync", n, all)
	}
	r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2"), ready("10.244.1.3"), ready("10.244.1.4")))
	r.fake.FailNext("AddReal", fmt.Errorf("boom"))
	_, _ = r.rec.Sync(context.Background(), false)
	want, have := r.rec.desired.state.Services[web], r.rec.obs.State().Services[web]
	if want == have || want.Reals.Len() != 3 || have.Reals.Len() != 2 {
		t.Fatalf("after a failed add: want %v, have %v", want.Reals.All(), have.Reals.All())
	}
	if n, all := shared(), len(r.rec.desired.state.Services); n != all-1 {
		t.Fatalf("%d of %d virtual servers shared, want all but web", n, all)
	}
}

// TestObservedSharedDuringTheApply: a virtual server is shared as soon as
// its last real server is in, not when the sync ends: by the time the VIPs
// are bound (after every real server) the cache holds no copy of its own,
// so a cold start does not hold a second table while it applies.
func TestObservedSharedDuringTheApply(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	own := -1
	r.fake.FailWhen(func(c fake.Call) error {
		if c.Method == "AddAddr" && own < 0 {
			own = 0
			for k, have := range r.rec.obs.State().Services {
				if have != r.rec.desired.state.Services[k] {
					own++
				}
			}
		}
		return nil
	})
	r.sync(false)
	r.expectDump(webAndDNS)
	if own != 0 {
		t.Fatalf("%d virtual servers were copies of their own when the VIPs were bound (-1: no bind seen)", own)
	}
}
