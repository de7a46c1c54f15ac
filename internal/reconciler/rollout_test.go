package reconciler

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// rolloutSliceSize is how many endpoints the EndpointSlice controller puts
// in one slice (its --max-endpoints-per-slice default).
const rolloutSliceSize = 100

// rollout is a Deployment's rolling update as one Service's EndpointSlices
// show it: every pod is replaced in turn, batch pods at a step. At each
// step the next batch of old pods turns terminating (still serving), and
// the batch that turned terminating at the step before is gone, each
// replaced in its slot by a new ready pod, as the slice controller fills
// the slice it is updating before any other. Each endpoint on this node
// (node-a) is one in ten; the rest are on node-b.
type rollout struct {
	svc    string
	slots  [][]rolloutPod // per slice, its endpoints in order
	batch  int
	cursor int // the next slot to turn terminating
	pods   int // pods made, for fresh addresses
	// gone are the endpoints removed from the slices whose real servers
	// still have connections open (drained, not yet gone); linger gives a
	// pod that many steps of an open connection after its removal (0:
	// none).
	gone   map[netip.AddrPort]int
	linger int
	// behind says the virtual server is large (pacedReads): its counters
	// are read behind a sync's operations, so a removed real server waits
	// at weight 0 for the read after its removal, and goes a sync later
	// than a small one's. leaving are those, the step's.
	behind  bool
	leaving map[netip.AddrPort]bool
}

type rolloutPod struct {
	addr        netip.AddrPort
	node        string
	terminating bool
}

// newRollout is a Service of size ready endpoints in slices of
// rolloutSliceSize.
func newRollout(svc string, size, batch int) *rollout {
	ro := &rollout{svc: svc, batch: batch, gone: map[netip.AddrPort]int{}, leaving: map[netip.AddrPort]bool{}}
	for i := range size {
		if i%rolloutSliceSize == 0 {
			ro.slots = append(ro.slots, nil)
		}
		j := len(ro.slots) - 1
		ro.slots[j] = append(ro.slots[j], ro.newPod())
	}
	return ro
}

func (ro *rollout) size() int {
	return (len(ro.slots)-1)*rolloutSliceSize + len(ro.slots[len(ro.slots)-1])
}

// newPod is the next pod, at a fresh address.
func (ro *rollout) newPod() rolloutPod {
	n := ro.pods
	ro.pods++
	node := "node-b"
	if n%10 == 0 {
		node = "node-a"
	}
	a := netip.AddrFrom4([4]byte{10, byte(128 + n>>16), byte(n >> 8), byte(n)})
	return rolloutPod{addr: netip.AddrPortFrom(a, 8080), node: node}
}

// slot is the pod at slot i of the whole Service.
func (ro *rollout) slot(i int) *rolloutPod {
	i %= ro.size()
	return &ro.slots[i/rolloutSliceSize][i%rolloutSliceSize]
}

// step moves the update on by one batch and returns the slices it
// changed, in order. Removed pods with connections (linger) are noted in
// gone.
func (ro *rollout) step() []int {
	clear(ro.leaving)
	var touched []int
	touch := func(i int) {
		if j := (i % ro.size()) / rolloutSliceSize; !slices.Contains(touched, j) {
			touched = append(touched, j)
		}
	}
	for i := ro.cursor - ro.batch; i < ro.cursor; i++ {
		if i < 0 {
			continue
		}
		p := ro.slot(i)
		if ro.linger > 0 && p.addr.Addr().As4()[3]%7 == 0 {
			ro.gone[p.addr] = ro.linger
		} else {
			ro.leave(p.addr)
		}
		*p = ro.newPod()
		touch(i)
	}
	for i := ro.cursor; i < ro.cursor+ro.batch; i++ {
		ro.slot(i).terminating = true
		touch(i)
	}
	ro.cursor += ro.batch
	slices.Sort(touched)
	return touched
}

// endpointChanges is how many endpoint entries one step adds, changes or
// removes: a batch turned terminating, a batch removed, a batch added.
func (ro *rollout) endpointChanges() int { return 3 * ro.batch }

// sliceObj is slice j as the API server would hand it over: a new object.
func (ro *rollout) sliceObj(j int) *discoveryv1.EndpointSlice {
	proto, port := corev1.ProtocolTCP, int32(8080)
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-%03d", ro.svc, j),
			Labels: map[string]string{discoveryv1.LabelServiceName: ro.svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("p"), Protocol: &proto, Port: &port}},
		Endpoints:   make([]discoveryv1.Endpoint, len(ro.slots[j])),
	}
	yes, no := true, false
	for i, p := range ro.slots[j] {
		ready, term := &yes, &no
		if p.terminating {
			ready, term = &no, &yes
		}
		s.Endpoints[i] = discoveryv1.Endpoint{
			Addresses:  []string{p.addr.Addr().String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ready, Serving: &yes, Terminating: term},
			NodeName:   ptr(p.node),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: fmt.Sprintf("pod-%s", p.addr.Addr())},
		}
	}
	return s
}

// leave notes a removed real server with no connection open: a large
// virtual server's waits at weight 0 through the step.
func (ro *rollout) leave(a netip.AddrPort) {
	if ro.behind {
		ro.leaving[a] = true
	}
}

// wantReals is the kernel's table for the Service's virtual server as the
// rules say it must be now: every ready endpoint at weight 1, every
// terminating one at weight 0 (there are ready ones), every removed one
// with a connection open at weight 0 while it drains, and a large virtual
// server's removed ones at weight 0 for the step they leave in, sorted by
// address.
// With local, only this node's endpoints count (internalTrafficPolicy
// Local) and a removed one drains only if it was this node's.
func (ro *rollout) wantReals(vs string, local bool) string {
	type rs struct {
		addr netip.AddrPort
		w    int
	}
	var all []rs
	for _, sl := range ro.slots {
		for _, p := range sl {
			if local && p.node != "node-a" {
				continue
			}
			w := 1
			if p.terminating {
				w = 0
			}
			all = append(all, rs{p.addr, w})
		}
	}
	for a := range ro.gone {
		if local && !ro.onNodeA(a) {
			continue
		}
		all = append(all, rs{a, 0})
	}
	for a := range ro.leaving {
		if local && !ro.onNodeA(a) {
			continue
		}
		all = append(all, rs{a, 0})
	}
	slices.SortFunc(all, func(x, y rs) int { return x.addr.Compare(y.addr) })
	var b strings.Builder
	fmt.Fprintf(&b, "-A -t %s -s rr\n", vs)
	for _, r := range all {
		fmt.Fprintf(&b, "  -a -t %s -r %s -m -w %d\n", vs, r.addr, r.w)
	}
	return b.String()
}

// onNodeA tells whether the pod at a ran on node-a.
func (ro *rollout) onNodeA(a netip.AddrPort) bool {
	b := a.Addr().As4()
	n := int(b[1]-128)<<16 | int(b[2])<<8 | int(b[3])
	return n%10 == 0
}

// wantHairpins lists the hairpin members the Service's endpoints on this
// node need: one per endpoint listed on node-a, sorted.
func (ro *rollout) wantHairpins() []netip.AddrPort {
	var out []netip.AddrPort
	for _, sl := range ro.slots {
		for _, p := range sl {
			if p.node == "node-a" {
				out = append(out, p.addr)
			}
		}
	}
	slices.SortFunc(out, netip.AddrPort.Compare)
	return out
}

// age moves time on for the pods draining with a connection open: those
// whose connection closes now are told to the kernel.
func (ro *rollout) age(r *rig, vs model.VSKey) {
	for a, n := range ro.gone {
		ref := dataplane.RealRef{VS: vs, RS: a}
		if n == ro.linger {
			r.fake.SetConns(ref, model.Conns{Active: 1})
		}
		if n--; n == 0 {
			r.fake.SetConns(ref, model.Conns{})
			delete(ro.gone, a)
			ro.leave(a)
			continue
		}
		ro.gone[a] = n
	}
}

// TestRollingUpdateOfALargeService replays a rolling update of one
// Service, a sync after every step as the runner makes them, and checks
// the kernel after each: new endpoints at weight 1, terminating ones at
// weight 0, removed ones gone (or at weight 0 while a connection stays
// open), and a hairpin member for every endpoint on this node.
func TestRollingUpdateOfALargeService(t *testing.T) {
	for _, tc := range []struct {
		name  string
		size  int
		batch int
		// local: internalTrafficPolicy Local (this node's endpoints only).
		local bool
		// linger: removed pods (one in seven) keep a connection this many
		// steps.
		linger int
	}{
		{name: "one slice", size: 60, batch: 7},
		{name: "many slices", size: 1000, batch: 10},
		{name: "batch across slices", size: 450, batch: 33},
		{name: "draining connections", size: 500, batch: 10, linger: 3},
		{name: "local policy", size: 500, batch: 10, local: true, linger: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTimedRig(t)
			ro := newRollout("big", tc.size, tc.batch)
			ro.linger = tc.linger
			reals := tc.size
			if tc.local {
				reals /= 10 // node-a's endpoints
			}
			ro.behind = reals >= pacedReads
			svc := service("big", "10.96.0.10", corev1.ProtocolTCP, 80)
			if tc.local {
				svc.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyLocal)
			}
			r.store.SetService(svc)
			for j := range ro.slots {
				r.store.SetSlice(ro.sliceObj(j))
			}
			r.sync(false)
			vs := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80)
			// Two passes over the Service: the second replaces pods the
			// first made.
			steps := 2 * (tc.size + tc.batch - 1) / tc.batch
			for step := range steps {
				for _, j := range ro.step() {
					r.store.SetSlice(ro.sliceObj(j))
				}
				ro.age(r, vs)
				r.clock.advance(100 * time.Millisecond)
				r.sync(false)
				want := ro.wantReals("10.96.0.10:80", tc.local) + "addr 10.96.0.10\n"
				if got := ipvsDump(r.fake.Dump()); got != want {
					t.Fatalf("step %d: kernel holds:\n%s\nwant:\n%s", step, got, want)
				}
				if got, want := hairpins(r.fake.Dump()), ro.wantHairpins(); !slices.Equal(got, want) {
					t.Fatalf("step %d: hairpin members %v, want %v", step, got, want)
				}
			}
			// Nothing left to do: a sync with no change plans nothing.
			for len(ro.gone) > 0 || len(ro.leaving) > 0 {
				clear(ro.leaving)
				ro.age(r, vs)
				r.clock.advance(100 * time.Millisecond)
				r.sync(false)
			}
			if st := r.sync(false); st.Ops != 0 {
				t.Fatalf("a quiet sync after the update planned %d operations", st.Ops)
			}
			if got, want := ipvsDump(r.fake.Dump()), ro.wantReals("10.96.0.10:80", tc.local)+"addr 10.96.0.10\n"; got != want {
				t.Fatalf("after the update: kernel holds:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// hairpins lists the endpoints of the hairpin members in a dump, sorted.
func hairpins(dump string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, l := range strings.Split(dump, "\n") {
		if !strings.HasPrefix(l, "set KUBE-IPVS-LOOP-BACK") {
			continue
		}
		f := strings.Fields(l)
		// set KUBE-IPVS-LOOP-BACK 10.128.0.0,tcp:8080,10.128.0.0
		parts := strings.Split(f[len(f)-1], ",")
		a := netip.MustParseAddr(parts[0])
		var port uint16
		fmt.Sscanf(parts[1], "tcp:%d", &port)
		out = append(out, netip.AddrPortFrom(a, port))
	}
	slices.SortFunc(out, netip.AddrPort.Compare)
	return out
}
