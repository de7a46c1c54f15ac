package reconciler

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// claimant is a Service with its own ClusterIP and the shared external IP
// 192.0.2.50:80, created at the given minute. The names sort the other way
// round from the ages, so that neither name order nor arrival order can
// pass for age.
func claimant(name, clusterIP string, minute int) *corev1.Service {
	s := withExternalIP(name, clusterIP, "192.0.2.50", 80)
	s.CreationTimestamp = metav1.NewTime(time.Date(2024, 1, 1, 0, minute, 0, 0, time.UTC))
	return s
}

// shared is what the kernel holds for the shared frontend: its virtual
// server's lines and its set members.
func shared(dump string) string {
	var b strings.Builder
	in := false
	for _, l := range strings.SplitAfter(dump, "\n") {
		switch {
		case strings.HasPrefix(l, "-A "):
			in = strings.Contains(l, "192.0.2.50:80")
		case strings.HasPrefix(l, "set ") || strings.HasPrefix(l, "addr "):
			in = strings.Contains(l, "192.0.2.50")
		}
		if in {
			b.WriteString(l)
		}
	}
	return b.String()
}

// The older Service ("zulu", with an endpoint) wins the shared frontend.
const zuluServes = `-A -t 192.0.2.50:80 -s rr
  -a -t 192.0.2.50:80 -r 10.244.9.9:8080 -m -w 1
addr 192.0.2.50
set KUBE-IPVS-EXTERNAL 192.0.2.50,tcp:80
set KUBE-IPVS-FRONTENDS 192.0.2.50,tcp:80
set KUBE-IPVS-VIPS 192.0.2.50
`

func TestTwoServicesOneFrontend(t *testing.T) {
	r := newRig(t)
	// The newer one, without endpoints, arrives first.
	r.store.SetService(claimant("alpha", "10.96.0.61", 2))
	r.sync(false)
	r.store.SetService(claimant("zulu", "10.96.0.62", 1))
	r.store.SetSlice(slice("zulu", corev1.ProtocolTCP, 8080, ready("10.244.9.9")))
	r.sync(false)
	// alpha keeps nothing of it: in particular no no-endpoints member,
	// which would reject zulu's traffic.
	if got := shared(r.fake.Dump()); got != zuluServes {
		t.Fatalf("shared frontend:\n%s\nwant the older Service's only:\n%s", got, zuluServes)
	}
	// Nor a reference to the VIP: only the winner holds it.
	if n := r.rec.desired.addrRefs.count(r.rec.desired.state.Addrs, netip.MustParseAddr("192.0.2.50")); n != 1 {
		t.Fatalf("the shared VIP has %d references, want the winner's only", n)
	}
	if !strings.Contains(r.fake.Dump(), "-A -t 10.96.0.61:80") {
		t.Fatalf("alpha's own ClusterIP went too:\n%s", r.fake.Dump())
	}
	if len(r.warn.warnings) != 1 || !strings.HasPrefix(r.warn.warnings[0], "default/alpha DuplicateVirtualServer") {
		t.Fatalf("warnings %q, want one DuplicateVirtualServer on the newer Service", r.warn.warnings)
	}

	// A restart learns of them in name order (alpha first): same winner,
	// nothing to do.
	r.restart()
	r.fake.ResetCalls()
	if st := r.sync(false); st.Ops != 0 || mutating(r.fake) != 0 {
		t.Fatalf("restart planned %d ops: %v", st.Ops, r.fake.Log())
	}

	// The winner goes: the loser takes the frontend over in the same sync.
	r.store.DeleteService(model.ServiceName{Namespace: "default", Name: "zulu"})
	r.sync(false)
	want := `-A -t 192.0.2.50:80 -s rr
addr 192.0.2.50
set KUBE-IPVS-EXTERNAL 192.0.2.50,tcp:80
set KUBE-IPVS-FRONTENDS 192.0.2.50,tcp:80
set KUBE-IPVS-NO-ENDPOINTS 192.0.2.50,tcp:80
set KUBE-IPVS-VIPS 192.0.2.50
`
	if got := shared(r.fake.Dump()); got != want {
		t.Fatalf("after the winner went:\n%s\nwant the other's:\n%s", got, want)
	}
}

// TestLoserTakesOverWhenTheWinnerMoves: the winner changing its external
// IP frees the frontend, which the waiting Service takes.
func TestLoserTakesOverWhenTheWinnerMoves(t *testing.T) {
	r := newRig(t)
	r.store.SetService(claimant("zulu", "10.96.0.62", 1))
	r.store.SetSlice(slice("zulu", corev1.ProtocolTCP, 8080, ready("10.244.9.9")))
	r.store.SetService(claimant("alpha", "10.96.0.61", 2))
	r.store.SetSlice(slice("alpha", corev1.ProtocolTCP, 8080, ready("10.244.8.8")))
	r.sync(false)
	if got := shared(r.fake.Dump()); got != zuluServes {
		t.Fatalf("shared frontend:\n%s\nwant:\n%s", got, zuluServes)
	}
	moved := claimant("zulu", "10.96.0.62", 1)
	moved.Spec.ExternalIPs = []string{"192.0.2.51"}
	r.store.SetService(moved)
	r.sync(false)
	want := strings.ReplaceAll(zuluServes, "10.244.9.9", "10.244.8.8")
	if got := shared(r.fake.Dump()); got != want {
		t.Fatalf("after the winner moved:\n%s\nwant the waiting Service's:\n%s", got, want)
	}
	if !strings.Contains(r.fake.Dump(), "-a -t 192.0.2.51:80 -r 10.244.9.9:8080") {
		t.Fatalf("the winner's new frontend missing:\n%s", r.fake.Dump())
	}
	r.fake.ResetCalls()
	if st := r.sync(true); st.Ops != 0 {
		t.Fatalf("a full sync after the takeover planned %d ops: %v", st.Ops, r.fake.Log())
	}
}

// servesFor tells which Service's endpoint the kernel sends a frontend to.
func servesFor(t *testing.T, dump, frontend, endpoint string) bool {
	t.Helper()
	return strings.Contains(dump, "-a -t "+frontend+" -r "+endpoint+" ")
}

// A Service that lists a Service CIDR address as an external IP before
// the allocator hands it out does not keep it from the Service given it
// as its ClusterIP, in either order of arrival and across a restart: the
// ClusterIP:port serves its own Service, the squatter's other ports on
// that address are not served (the ClusterIP is not its to extend), and
// the squatter gets them back when the ClusterIP's Service goes.
func TestClusterIPBeatsAnOlderExternalIP(t *testing.T) {
	for _, order := range []string{"squatter first", "owner first"} {
		t.Run(order, func(t *testing.T) {
			r := newRig(t)
			squat := withExternalIP("squat", "10.96.0.70", "10.96.0.99", 80)
			squat.Spec.Ports = append(squat.Spec.Ports, corev1.ServicePort{Name: "q", Protocol: corev1.ProtocolTCP, Port: 8080})
			squat.CreationTimestamp = metav1.NewTime(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
			squatSlice := slice("squat", corev1.ProtocolTCP, 9000, ready("10.244.9.1"))
			squatSlice.Ports = append(squatSlice.Ports, discoveryv1.EndpointPort{Name: ptr("q"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(9001))})
			owner := service("owner", "10.96.0.99", corev1.ProtocolTCP, 80)
			owner.CreationTimestamp = metav1.NewTime(time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC))
			add := []func(){
				func() { r.store.SetService(squat); r.store.SetSlice(squatSlice) },
				func() {
					r.store.SetService(owner)
					r.store.SetSlice(slice("owner", corev1.ProtocolTCP, 8080, ready("10.244.9.2")))
				},
			}
			if order == "owner first" {
				add[0], add[1] = add[1], add[0]
			}
			add[0]()
			r.sync(false)
			add[1]()
			r.sync(false)
			check := func(when string) {
				dump := r.fake.Dump()
				if !servesFor(t, dump, "10.96.0.99:80", "10.244.9.2:8080") || servesFor(t, dump, "10.96.0.99:80", "10.244.9.1:9000") {
					t.Errorf("%s: the ClusterIP does not serve its own Service only:\n%s", when, dump)
				}
				if strings.Contains(dump, "10.96.0.99:8080") {
					t.Errorf("%s: the squatter serves another port on the ClusterIP:\n%s", when, dump)
				}
				if !strings.Contains(dump, "-A -t 10.96.0.70:8080") {
					t.Errorf("%s: the squatter's own ClusterIP went too:\n%s", when, dump)
				}
			}
			check("after both")
			var reasons []string
			for _, w := range r.warn.warnings {
				reasons = append(reasons, strings.TrimSuffix(strings.Fields(w)[1], ":"))
			}
			if got := strings.Join(reasons, " "); got != "DuplicateVirtualServer ClusterIPClaimed" && got != "ClusterIPClaimed DuplicateVirtualServer" {
				t.Errorf("warnings %q", r.warn.warnings)
			}
			r.restart()
			r.sync(false)
			check("after a restart")

			r.store.DeleteService(model.ServiceName{Namespace: "default", Name: "owner"})
			r.sync(false)
			dump := r.fake.Dump()
			if !servesFor(t, dump, "10.96.0.99:80", "10.244.9.1:9000") || !servesFor(t, dump, "10.96.0.99:8080", "10.244.9.1:9001") {
				t.Errorf("the squatter does not get its external IP back once the ClusterIP is free:\n%s", dump)
			}
		})
	}
}

// A load-balancer ingress IP (its controller's) wins a frontend over an
// older Service's external IP (anyone's claim).
func TestLoadBalancerIPBeatsAnOlderExternalIP(t *testing.T) {
	r := newRig(t)
	old := claimant("old", "10.96.0.61", 1)
	r.store.SetService(old)
	r.store.SetSlice(slice("old", corev1.ProtocolTCP, 8080, ready("10.244.9.1")))
	r.sync(false)
	lb := service("lb", "10.96.0.62", corev1.ProtocolTCP, 80)
	lb.CreationTimestamp = metav1.NewTime(time.Date(2024, 1, 1, 0, 30, 0, 0, time.UTC))
	lb.Spec.Type = corev1.ServiceTypeLoadBalancer
	lb.Spec.Ports[0].NodePort = 30099
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.50"}}
	r.store.SetService(lb)
	r.store.SetSlice(slice("lb", corev1.ProtocolTCP, 8080, ready("10.244.9.2")))
	r.sync(false)
	if dump := r.fake.Dump(); !servesFor(t, dump, "192.0.2.50:80", "10.244.9.2:8080") || servesFor(t, dump, "192.0.2.50:80", "10.244.9.1:8080") {
		t.Errorf("the load-balancer IP does not serve its own Service only:\n%s", dump)
	}
}
