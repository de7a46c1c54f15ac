package reconciler

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// These tests are about durable ownership: every frontend is recorded in
// the Frontends set before its virtual server is made, so whatever happens
// between (a crash, a node address change, the Node's deletion) the next
// sync or cleanup still knows it as ours.

// localNodePort is a NodePort Service with externalTrafficPolicy Local and
// one endpoint on this node: its node-address virtual server is named by
// no other set of ours (not External: Local policy; not NoEndpoints: it
// has one), only by its record.
func localNodePort() *corev1.Service {
	s := service("np", "10.96.0.30", corev1.ProtocolTCP, 80)
	s.Spec.Type = corev1.ServiceTypeNodePort
	s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	s.Spec.Ports[0].NodePort = 30081
	return s
}

func (r *rig) localNodePort() {
	r.store.SetNode(node("192.168.1.10"))
	r.store.SetService(localNodePort())
	sl := slice("np", corev1.ProtocolTCP, 8080, ready("10.244.1.7"))
	sl.Endpoints[0].NodeName = ptr("node-a")
	r.store.SetSlice(sl)
}

var errCrashed = errors.New("the agent is gone")

// crashAt makes the fake fail every mutating call from the first one that
// at matches on, as if the agent had died just before it: the kernel keeps
// what was applied until then. The crash also ends the sync's context, so
// the agent tries nothing after it (a dead process sends nothing more).
func crashAt(f *fake.Fake, at func(fake.Call) bool) context.Context {
	ctx, die := context.WithCancelCause(context.Background())
	crashed := false
	f.FailWhen(func(c fake.Call) error {
		switch c.Method {
		case "Observe", "Conns", "SetEntries", "EnsureShim", "Init", "SetTimeouts":
			return nil
		}
		if crashed || at(c) {
			crashed = true
			die(errCrashed)
			return errCrashed
		}
		return nil
	})
	return ctx
}

// crashed syncs into the crash and restarts the agent on the same kernel.
func (r *rig) crashed(ctx context.Context) {
	r.t.Helper()
	if _, err := r.rec.Sync(ctx, false); !errors.Is(err, errCrashed) {
		r.t.Fatalf("sync did not reach the crash: %v", err)
	}
	r.fake.FailWhen(nil)
	r.restart()
}

func isMethod(m string) func(fake.Call) bool {
	return func(c fake.Call) bool { return c.Method == m }
}

// afterFirst matches every call after the first call of method m.
func afterFirst(m string) func(fake.Call) bool {
	seen := false
	return func(c fake.Call) bool {
		if seen {
			return true
		}
		seen = c.Method == m
		return false
	}
}

func TestCrashBetweenRecordAndCreate(t *testing.T) {
	t.Run("the Service stays: the next agent makes it", func(t *testing.T) {
		r := newRig(t)
		r.webAndDNS()
		crash := crashAt(r.fake, isMethod("AddService"))
		r.crashed(crash)
		if got := r.fake.Dump(); !strings.Contains(got, "set KUBE-IPVS-FRONTENDS 10.96.0.10,tcp:80") || strings.Contains(got, "-A ") {
			t.Fatalf("before the restart the kernel should hold the records only:\n%s", got)
		}
		r.sync(false)
		r.expectDump(webAndDNS)
	})
	t.Run("the Service went meanwhile: the next agent drops the record", func(t *testing.T) {
		r := newRig(t)
		r.webAndDNS()
		crash := crashAt(r.fake, isMethod("AddService"))
		r.store.DeleteService(model.ServiceName{Namespace: "default", Name: "dns"})
		r.crashed(crash)
		r.sync(false)
		if got := r.fake.Dump(); strings.Contains(got, "10.96.0.53") {
			t.Fatalf("the deleted Service left:\n%s", got)
		}
	})
}

// A crash right after a virtual server is made, before its VIP is bound or
// any other member added: only the record says it is ours. The Service is
// deleted while the agent is down; the next agent must still remove it.
func TestCrashAfterCreateLeavesNoOrphan(t *testing.T) {
	r := newRig(t)
	r.localNodePort()
	r.webAndDNS()
	crash := crashAt(r.fake, afterFirst("AddService"))
	r.crashed(crash)
	if n := len(r.fake.State().Services); n != 1 || len(r.fake.State().Addrs) != 0 {
		t.Fatalf("the crash should leave one virtual server and no VIP:\n%s", r.fake.Dump())
	}
	for _, n := range r.store.ServiceNames() {
		r.store.DeleteService(n)
	}
	r.restart()
	r.sync(false)
	if got := r.fake.Dump(); got != "" {
		t.Fatalf("left after the Services went:\n%s", got)
	}
}

// A failed record holds its frontend back: made unrecorded, a virtual
// server could be orphaned by the next crash.
func TestFailedRecordHoldsTheFrontend(t *testing.T) {
	r := newRig(t)
	rec := shim.Frontends.Name(false)
	r.fake.FailWhen(func(c fake.Call) error {
		if e, ok := c.Arg.(model.SetEntry); ok && c.Method == "AddSetEntry" && e.Set() == rec && e.Port() == 80 {
			return errors.New("injected")
		}
		return nil
	})
	r.webAndDNS()
	if st, err := r.rec.Sync(context.Background(), false); err != nil || st.Failing != 1 {
		t.Fatalf("a failed record: sync error %v, %d failing Services, want web's failure on web alone", err, st.Failing)
	}
	dump := ipvsDump(r.fake.Dump())
	if strings.Contains(dump, "10.96.0.10") || !strings.Contains(dump, "-A -u 10.96.0.53:53") {
		t.Fatalf("web was made without its record (or dns was held too):\n%s", dump)
	}
	r.fake.FailWhen(nil)
	r.clock.advance(serviceRetryFirst) // web's retry is due
	r.sync(false)
	r.expectDump(webAndDNS)
}

func TestLocalNodePortFollowsTheNode(t *testing.T) {
	const old, moved = "-A -t 192.168.1.10:30081 -s rr", "-A -t 192.168.1.11:30081 -s rr"
	for _, tt := range []struct {
		name    string
		node    *corev1.Node
		restart bool
		want    string
	}{
		{"address changes", node("192.168.1.11"), false, moved},
		{"address changes while the agent is down", node("192.168.1.11"), true, moved},
		{"the Node goes", nil, false, ""},
		{"the Node goes while the agent is down", nil, true, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			r.localNodePort()
			r.sync(false)
			if !strings.Contains(r.fake.Dump(), old) {
				t.Fatalf("no NodePort on the node address:\n%s", r.fake.Dump())
			}
			r.store.SetNode(tt.node)
			if tt.restart {
				r.restart()
			}
			r.sync(false)
			dump := r.fake.Dump()
			if strings.Contains(dump, "192.168.1.10") {
				t.Fatalf("the old node address's virtual server was orphaned:\n%s", dump)
			}
			if tt.want != "" && !strings.Contains(dump, tt.want) {
				t.Fatalf("no NodePort on the new address:\n%s", dump)
			}
			if !strings.Contains(dump, "-A -t 10.96.0.30:80 -s rr") {
				t.Fatalf("the ClusterIP went too:\n%s", dump)
			}
		})
	}
}

// Cleanup with no flags (no node addresses, no NodePort range) removes
// every virtual server the agent made, NodePorts of either policy
// included, and nothing else.
func TestCleanupWithoutFlagsRemovesNodePorts(t *testing.T) {
	r := newRig(t)
	r.localNodePort()
	r.webAndDNS()
	r.sync(false)
	if !strings.Contains(r.fake.Dump(), "-A -t 192.168.1.10:30081") {
		t.Fatalf("no NodePort made:\n%s", r.fake.Dump())
	}
	ctx := context.Background()
	foreign := model.VirtualServer{Key: model.NewVSKey(model.TCP, netip.MustParseAddr("192.168.1.10"), 30500), Scheduler: "wlc"}
	if err := r.fake.Do(ctx, model.Op{Kind: model.AddService, VS: foreign}); err != nil {
		t.Fatal(err)
	}
	if _, err := Cleanup(ctx, r.fake, CleanupOptions{}); err != nil {
		t.Fatal(err)
	}
	r.expectDump("-A -t 192.168.1.10:30500 -s wlc\n")
	if r.fake.HasLink() || len(r.fake.SetNames()) != 0 {
		t.Fatalf("link %v, sets %v left", r.fake.HasLink(), r.fake.SetNames())
	}
}

// A virtual server someone else makes between our read of the kernel and
// our create is not claimed: AddService finds it there, the record written
// before it is withdrawn, and no other member names it as ours.
func TestForeignServerMadeMeanwhileIsNotClaimed(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false) // the cache now stands for the kernel
	ctx := context.Background()
	k := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.77"), 443)
	if err := r.fake.Do(ctx, model.Op{Kind: model.AddService, VS: model.VirtualServer{Key: k, Scheduler: "wlc"}}); err != nil {
		t.Fatal(err)
	}
	r.store.SetService(service("late", "10.96.0.77", corev1.ProtocolTCP, 443))
	if st, err := r.rec.Sync(ctx, false); err != nil || st.Failing != 1 {
		t.Fatalf("the create that found a foreign server: sync error %v, %d failing Services, want it reported on that Service alone", err, st.Failing)
	}
	obs, err := r.fake.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for e := range obs.State.Sets {
		if shim.KindOf(e).NamesFrontend() && e.Addr() == k.Addr {
			t.Errorf("a member claims the foreign server: %s", e)
		}
	}
	if _, bound := obs.State.Addrs[k.Addr]; bound {
		t.Error("the foreign server's address was bound")
	}
	r.store.DeleteService(model.ServiceName{Namespace: "default", Name: "late"})
	r.sync(true)
	if _, ok := r.fake.State().Services[k]; !ok {
		t.Fatal("the foreign server was deleted")
	}
}
