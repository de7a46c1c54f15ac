package reconciler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
)

// The fault suite's fake-kernel part: many syncs over a churning
// set of Services while random kernel operations fail (every method of the
// fake, the dump included) and the agent crashes mid-sync (its context is
// cancelled at a random operation and a new reconciler takes over the same
// kernel, as a SIGKILLed agent's successor would). Once the faults stop the
// kernel must converge to what a fresh agent programs, with zero orphans
// and the foreign virtual servers untouched.

// faultServices is how many Services the churn draws from.
const faultServices = 40

// errFault is what an injected kernel failure returns.
var errFault = errors.New("injected kernel fault")

// foreignState is what keepalived (or an admin) made: one virtual server on
// an address of its own, one inside the Service range but never bound to
// our link. Neither is ours.
func foreignState(t testing.TB) model.State {
	return mustState(t, `
-A -t 192.0.2.10:443 -s wlc
  -a -t 192.0.2.10:443 -r 198.51.100.1:443 -m -w 3
-A -u 10.96.250.250:53 -s rr
  -a -u 10.96.250.250:53 -r 198.51.100.3:53 -m -w 1
`)
}

// churn changes the store at random: a Service created or deleted, its
// endpoints changed, its scheduler changed.
func churn(r *rig, rng *rand.Rand) {
	i := rng.IntN(faultServices)
	name := fmt.Sprintf("f%d", i)
	proto := corev1.ProtocolTCP
	if i%4 == 3 {
		proto = corev1.ProtocolUDP
	}
	svc := service(name, fmt.Sprintf("10.96.1.%d", 10+i), proto, 80)
	ep := func(n int) endpoint { return ready(fmt.Sprintf("10.244.%d.%d", i, n)) }
	switch rng.IntN(5) {
	case 0:
		deleteService(r, name)
	case 1:
		svc.Annotations = map[string]string{"kube-ipvs.io/scheduler": []string{"lc", "wrr", "sh"}[rng.IntN(3)]}
		r.store.SetService(svc)
	default:
		r.store.SetService(svc)
		eps := []endpoint{ep(1 + rng.IntN(3))}
		for n := range rng.IntN(3) {
			eps = append(eps, ep(4+n))
		}
		r.store.SetSlice(slice(name, proto, 8080, eps...))
	}
}

// deleteService removes a Service and its EndpointSlice from the store.
func deleteService(r *rig, name string) {
	r.store.DeleteService(model.ServiceName{Namespace: "default", Name: name})
	r.store.DeleteSlice("default", name+"-abc")
}

// faultRun is one seeded run: rounds of churn and syncs under faults and
// crashes, then convergence without faults.
type faultRun struct {
	t       *testing.T
	seed    uint64
	rng     *rand.Rand
	r       *rig
	rate    float64 // probability that a kernel call fails
	crashes int
	syncs   int
	failed  int // syncs that returned an error
}

func TestFaultsConvergeWithoutOrphans(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rate   float64
		crashP float64 // probability that a sync is cut short by a crash
	}{
		{"faults", 0.05, 0},
		{"crashes", 0, 0.4},
		{"faults and crashes", 0.1, 0.3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var known, syncs, failed, crashes int
			for seed := range uint64(25) {
				f := &faultRun{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 9)), rate: tc.rate}
				known += f.run(tc.crashP)
				syncs, failed, crashes = syncs+f.syncs, failed+f.failed, crashes+f.crashes
			}
			t.Logf("%s: 25 seeds, %d syncs (%d failed), %d crashes; converged, no foreign loss; %d virtual servers owned by nobody after a crash",
				tc.name, syncs, failed, crashes, known)
		})
	}
}

// run is 30 rounds of churn and a sync under faults, a last round that
// deletes a third of the Services for good (so a virtual server a crash
// left behind has no Service to adopt it again), then convergence.
func (f *faultRun) run(crashP float64) int {
	f.r = newRig(f.t)
	f.r.fake.Load(foreignState(f.t))
	f.r.restart()
	for round := range 30 {
		for range 1 + f.rng.IntN(4) {
			churn(f.r, f.rng)
		}
		f.sync(round%7 == 0, f.rng.Float64() < crashP)
	}
	for i := range faultServices {
		if f.rng.IntN(3) == 0 {
			deleteService(f.r, fmt.Sprintf("f%d", i))
		}
	}
	f.sync(true, f.rng.Float64() < crashP)
	return f.converge()
}

// sync runs one sync with faults on; crash cuts it short at a random kernel
// call and replaces the reconciler, as a restarted agent would.
func (f *faultRun) sync(full, crash bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The crash lands at a random call, or (half the time) right after a
	// virtual server was created, before the ownership record marks it.
	at, afterCreate := -1, -1
	if crash && f.rng.IntN(2) == 0 {
		afterCreate = 1 + f.rng.IntN(3)
	} else if crash {
		at = 1 + f.rng.IntN(40)
	}
	calls, creates := 0, 0
	var last model.VSKey // the last virtual server the kernel was asked to create
	f.r.fake.FailWhen(func(c fake.Call) error {
		calls++
		if calls == at || creates == afterCreate {
			cancel() // SIGKILL: this call and every later one never happen
			return context.Canceled
		}
		if c.Method == "AddService" {
			creates++
			last = c.Arg.(model.VirtualServer).Key
		}
		if f.rng.Float64() < f.rate {
			return fmt.Errorf("%s: %w", c.Method, errFault)
		}
		return nil
	})
	f.syncs++
	_, err := f.r.rec.Sync(ctx, full)
	f.r.fake.FailWhen(nil)
	if err != nil {
		f.failed++
		if !errors.Is(err, errFault) && !errors.Is(err, context.Canceled) {
			f.t.Fatalf("seed %d: sync failed with an error no fault explains: %v", f.seed, err)
		}
	}
	if crash && ctx.Err() != nil {
		f.crashes++
		// While the agent is down, the Service it was creating may go.
		if last.Addr.IsValid() && f.rng.IntN(2) == 0 {
			deleteService(f.r, fmt.Sprintf("f%d", int(last.Addr.As4()[3])-10))
		}
		f.r.restart()
	}
}

// converge stops the faults, syncs until nothing is left to do and checks
// the kernel. It returns how many virtual servers a crash left owned by
// nobody (the ownership record must leave none): each also fails the
// test.
func (f *faultRun) converge() int {
	t, r := f.t, f.r
	r.clock.advance(time.Hour) // every drain is over
	ops := -1
	for range 4 {
		st, err := r.rec.Sync(context.Background(), false)
		if err != nil {
			t.Fatalf("seed %d: sync without faults: %v", f.seed, err)
		}
		if ops = st.Ops; ops == 0 {
			break
		}
	}
	if ops != 0 {
		t.Fatalf("seed %d: not converged after the faults stopped: %d ops left\n%s", f.seed, ops, r.fake.Dump())
	}
	got := r.fake.State()
	want := f.expected()
	checkForeign(t, f.seed, foreignState(t), got)

	var known, other []string
	for k, svc := range got.Services {
		if _, ok := want.Services[k]; ok {
			continue
		}
		owner := plan.NewOwner(got, nil, plan.OwnerPolicy{NodePortRange: model.PortRange{First: 30000, Last: 32767}, Families: dualStack})
		line := "-A " + svc.VirtualServer.String()
		if !owner.OwnsService(k) {
			known = append(known, line)
		} else {
			other = append(other, line)
		}
	}
	for a := range got.Addrs {
		if _, ok := want.Addrs[a]; !ok {
			other = append(other, "addr "+a.String())
		}
	}
	for e := range got.Sets {
		if _, ok := want.Sets[e]; !ok {
			other = append(other, "set "+e.String())
		}
	}
	if len(other) > 0 {
		t.Errorf("seed %d (%d syncs, %d failed, %d crashes): orphans the agent still owns but left:\n%s",
			f.seed, f.syncs, f.failed, f.crashes, strings.Join(other, "\n"))
	}
	if len(known) > 0 {
		slices.Sort(known)
		msg := fmt.Sprintf("seed %d (%d crashes): %d virtual servers of deleted Services owned by nobody after a crash:\n%s",
			f.seed, f.crashes, len(known), strings.Join(known, "\n"))
		t.Error(msg)
	}
	// Beyond orphans the kernel holds exactly what a fresh agent programs.
	for k := range want.Services {
		if have, ok := got.Services[k]; !ok || !have.Equal(want.Services[k]) {
			t.Errorf("seed %d: %s: kernel holds %v, a fresh agent programs %v", f.seed, k, got.Services[k], want.Services[k])
		}
	}
	for a := range want.Addrs {
		if _, ok := got.Addrs[a]; !ok {
			t.Errorf("seed %d: VIP %s not bound", f.seed, a)
		}
	}
	for e := range want.Sets {
		if _, ok := got.Sets[e]; !ok {
			t.Errorf("seed %d: set member %s missing", f.seed, e)
		}
	}
	return len(known)
}

// expected is what a fresh agent programs for the run's final store on a
// kernel holding only the foreign state.
func (f *faultRun) expected() model.State {
	fresh := newRig(f.t)
	fresh.fake.Load(foreignState(f.t))
	fresh.store = f.r.store
	fresh.restart()
	fresh.sync(false)
	return fresh.fake.State()
}

// checkForeign: every foreign virtual server is there with its reals and
// settings as they were made.
func checkForeign(t *testing.T, seed uint64, foreign, got model.State) {
	t.Helper()
	for k, want := range foreign.Services {
		have, ok := got.Services[k]
		if !ok {
			t.Errorf("seed %d: foreign virtual server %s deleted", seed, k)
			continue
		}
		if !have.Equal(want) {
			t.Errorf("seed %d: foreign virtual server changed:\n%v\nwas\n%v", seed, have, want)
		}
	}
}

// TestCrashBetweenCreateAndMark places the crash the ownership record
// guards against exactly:
// the agent dies right after the kernel created a new Service's virtual
// server, before anything marks it as ours; the Service is deleted while
// the agent is down. Its successor must remove the virtual server.
func TestCrashBetweenCreateAndMark(t *testing.T) {
	r := newRig(t)
	r.fake.Load(foreignState(t))
	r.restart()
	r.store.SetService(service("web", "10.96.0.100", corev1.ProtocolTCP, 80))
	r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2")))
	ctx, cancel := context.WithCancel(context.Background())
	created := false
	r.fake.FailWhen(func(c fake.Call) error {
		if created {
			cancel()
			return context.Canceled
		}
		created = c.Method == "AddService"
		return nil
	})
	if _, err := r.rec.Sync(ctx, false); !errors.Is(err, context.Canceled) {
		t.Fatalf("sync cut short after AddService: want context.Canceled, got %v", err)
	}
	r.fake.FailWhen(nil)
	if !created {
		t.Fatal("the sync never created the virtual server")
	}
	r.store.DeleteService(model.ServiceName{Namespace: "default", Name: "web"})
	r.store.DeleteSlice("default", "web-abc")
	r.restart()
	r.sync(false)
	r.sync(true)
	got := ipvsDump(r.fake.Dump())
	want := ipvsDump(foreignState(t).Dump())
	if got == want {
		return
	}
	t.Fatalf("after the crash and the Service's deletion the kernel holds\n%s\nwant only the foreign state\n%s", got, want)
}
