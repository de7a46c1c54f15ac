package reconciler

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/objects"
	"github.com/kube-ipvs/kube-ipvs/internal/observed"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// service builds a ClusterIP Service with one named port.
func service(name, ip string, proto corev1.Protocol, port int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  ip,
			ClusterIPs: []string{ip},
			Ports:      []corev1.ServicePort{{Name: "p", Protocol: proto, Port: port}},
		},
	}
}

// endpoint is one endpoint's address and conditions for slice().
type endpoint struct {
	addr        string
	terminating bool
	noNode      bool // names no node (else this one, node-a)
}

func ready(addr string) endpoint       { return endpoint{addr: addr} }
func terminating(addr string) endpoint { return endpoint{addr: addr, terminating: true} }
func onNoNode(addr string) endpoint    { return endpoint{addr: addr, noNode: true} }

// slice builds an IPv4 EndpointSlice of a Service with port "p", its
// endpoints on this node (node-a) unless they say otherwise, so each has
// its hairpin member.
func slice(svc string, proto corev1.Protocol, port int32, eps ...endpoint) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: svc + "-abc",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("p"), Protocol: &proto, Port: &port}},
	}
	for _, e := range eps {
		r, t := !e.terminating, e.terminating
		ep := discoveryv1.Endpoint{
			Addresses:  []string{e.addr},
			Conditions: discoveryv1.EndpointConditions{Ready: &r, Serving: ptr(true), Terminating: &t},
		}
		if !e.noNode {
			ep.NodeName = ptr("node-a")
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// clock is a settable test clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// newTimedRig is newRig whose kernel takes time (callsTakeTime): the
// rig's clock otherwise stands still within a sync, and a read of the
// counters behind its operations would begin at its start.
func newTimedRig(t testing.TB) *rig {
	r := newRig(t)
	r.tweak = func(o *Options) { o.Dataplane = callsTakeTime{r.fake, r.clock} }
	r.restart()
	return r
}

// callsTakeTime is the fake kernel whose applies and reads of connection
// counters move the clock on by a microsecond each, as on a real node.
type callsTakeTime struct {
	*fake.Fake
	clock *clock
}

func (d callsTakeTime) Apply(ctx context.Context, ops []model.Op) []error {
	defer d.clock.advance(time.Microsecond)
	return d.Fake.Apply(ctx, ops)
}

func (d callsTakeTime) Conns(ctx context.Context, vs model.VSKey) (map[netip.AddrPort]model.Conns, error) {
	defer d.clock.advance(time.Microsecond)
	return d.Fake.Conns(ctx, vs)
}

// recorder collects the warnings a reconciler reports.
type recorder struct{ warnings []string }

func (r *recorder) ServiceWarning(name model.ServiceName, reason, msg string) {
	r.warnings = append(r.warnings, fmt.Sprintf("%s %s: %s", name, reason, msg))
}

// rig is a reconciler on a fake kernel with a synced store.
type rig struct {
	t     testing.TB
	fake  *fake.Fake
	store *objects.Store
	rec   *Reconciler
	clock *clock
	out   *bytes.Buffer
	warn  *recorder
	// tweak, when set, changes the options every (re)start uses.
	tweak func(*Options)
}

func newRig(t testing.TB) *rig { return newRigWith(t, nil) }

// newRigWith is newRig with options changed by tweak.
func newRigWith(t testing.TB, tweak func(*Options)) *rig {
	t.Helper()
	r := &rig{t: t, fake: fake.New(), store: objects.NewStore(), clock: &clock{t: time.Unix(1_700_000_000, 0)}, out: &bytes.Buffer{}, warn: &recorder{}, tweak: tweak}
	r.restart()
	return r
}

// dualStack is the families every test serves.
var dualStack = model.Families{IPv4: true, IPv6: true}

// options are the reconciler options every test uses.
func (r *rig) options() Options {
	o := r.baseOptions()
	if r.tweak != nil {
		r.tweak(&o)
	}
	return o
}

func (r *rig) baseOptions() Options {
	return Options{
		Dataplane: r.fake,
		Store:     r.store,
		Translate: translate.Config{
			NodeName: "node-a", Scheduler: "rr", NodePortAddresses: []string{translate.NodePortPrimary},
			Families: dualStack, DrainTimeout: 2 * time.Minute,
		},
		Shim:          shim.Config{Families: dualStack},
		NodePortRange: model.PortRange{First: 30000, Last: 32767},
		Out:           r.out,
		Recorder:      r.warn,
		Now:           r.clock.now,
	}
}

// restart replaces the reconciler with a fresh one (an agent restart) on
// the same kernel; the store is marked dirty for every Service as a fresh
// source would.
func (r *rig) restart() {
	r.rec = New(r.options())
	if err := r.rec.Init(context.Background()); err != nil {
		r.t.Fatalf("init: %v", err)
	}
	for _, n := range r.store.ServiceNames() {
		svc, slices := r.store.Service(n)
		r.store.SetService(svc)
		for _, s := range slices {
			r.store.SetSlice(s)
		}
	}
}

// sync runs one sync and fails the test on error.
func (r *rig) sync(full bool) Status {
	r.t.Helper()
	st, err := r.rec.Sync(context.Background(), full)
	if err != nil {
		r.t.Fatalf("sync: %v", err)
	}
	r.checkDigests()
	return st
}

// checkDigests: the digests the sync loop keeps of its cached set members
// and table are the digests of those (a fold trusts them to skip both).
func (r *rig) checkDigests() {
	r.t.Helper()
	table, sets := r.rec.obs.Digests()
	st := r.rec.obs.State()
	if got, want := sets, observed.MembersDigest(st.Sets); got != want {
		r.t.Fatalf("the cache's set digest is %+v, its members' %+v", got, want)
	}
	if got, want := table, observed.TableDigest(st.Services); got != want {
		r.t.Fatalf("the cache's table digest is %+v, its table's %+v", got, want)
	}
}

// expectDump compares the fake kernel's table and addresses with want;
// the shim's set members are left to the tests about them (shim_test.go).
func (r *rig) expectDump(want string) {
	r.t.Helper()
	if got := ipvsDump(r.fake.Dump()); got != want {
		r.t.Fatalf("kernel holds:\n%s\nwant:\n%s", got, want)
	}
}

// ipvsDump drops the "set" lines of a dump.
func ipvsDump(dump string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(dump, "\n") {
		if !strings.HasPrefix(l, "set ") {
			b.WriteString(l)
		}
	}
	return b.String()
}

// mutating counts the calls that changed (or tried to change) the kernel.
// EnsureShim only writes when the rules differ (RuleWrites counts that).
func mutating(f *fake.Fake) int {
	n := 0
	for m, c := range f.Calls() {
		switch m {
		case "Observe", "Scan", "Conns", "EnsureShim", "LinkFamilies", "Probe":
		default:
			n += c
		}
	}
	return n
}

// newUnsyncedStore is a store still waiting for a source.
func newUnsyncedStore() *objects.Store { return objects.NewStore("services") }

// mustState builds a state from Dump text (only the lines tests use).
func mustState(t testing.TB, dump string) model.State {
	t.Helper()
	s := model.NewState()
	for _, line := range strings.Split(strings.TrimSpace(dump), "\n") {
		f := strings.Fields(line)
		switch {
		case f[0] == "-A":
			k := parseKey(t, f[1], f[2])
			s.Services[k] = &model.Service{VirtualServer: model.VirtualServer{Key: k, Scheduler: model.Scheduler(f[4])}}
		case f[0] == "-a":
			k := parseKey(t, f[1], f[2])
			w, _ := strconv.Atoi(f[7])
			rs := model.RealServer{Addr: netip.MustParseAddrPort(f[4]), Weight: w}
			s.Services[k].Reals.Set(rs)
		case f[0] == "addr":
			s.Addrs[netip.MustParseAddr(f[1])] = struct{}{}
		}
	}
	return s
}

func parseKey(t testing.TB, flag, ap string) model.VSKey {
	t.Helper()
	p := map[string]model.Protocol{"-t": model.TCP, "-u": model.UDP, "--sctp-service": model.SCTP}[flag]
	a := netip.MustParseAddrPort(ap)
	return model.NewVSKey(p, a.Addr(), a.Port())
}

// count is how many Services need k (only the tests ask).
func (r refs[K]) count(set map[K]struct{}, k K) int {
	if _, ok := set[k]; !ok {
		return 0
	}
	return 1 + r[k]
}
