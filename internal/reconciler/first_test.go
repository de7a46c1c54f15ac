package reconciler

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// callAddr is the Service address a kernel call is about: a virtual
// server's, a real server's virtual server's, a VIP, or a set member's
// first address; false for calls about none.
func callAddr(c fake.Call) (netip.Addr, bool) {
	switch a := c.Arg.(type) {
	case model.VirtualServer:
		return a.Key.Addr, true
	case dataplane.RealRef:
		return a.VS.Addr, true
	case netip.Addr:
		return a, true
	case model.SetEntry:
		return a.Addr(), true
	}
	return netip.Addr{}, false
}

// The API server's Service is whole in the kernel (virtual server, real
// server, VIP, set members) before any other Service's first operation on
// a cold start, and the start ends in the same state as without it.
func TestColdStartServesKubernetesFirst(t *testing.T) {
	for _, tc := range []struct {
		name string
		// cold: the kernel starts empty; else the agent restarts on a full
		// table while the API server's endpoint moved (the old one, still
		// in use, must drain).
		cold bool
	}{
		{name: "cold start", cold: true},
		{name: "restart, endpoint moved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			for i := range 40 {
				name := fmt.Sprintf("svc-%02d", i)
				ip := fmt.Sprintf("10.96.1.%d", i+1)
				r.store.SetService(service(name, ip, corev1.ProtocolTCP, 80))
				r.store.SetSlice(slice(name, corev1.ProtocolTCP, 8080, ready(fmt.Sprintf("10.244.0.%d", i+1))))
			}
			api := service("kubernetes", "10.96.0.1", corev1.ProtocolTCP, 443)
			r.store.SetService(api)
			r.store.SetSlice(slice("kubernetes", corev1.ProtocolTCP, 6443, onNoNode("192.168.0.10")))
			old := dataplane.RealRef{VS: model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.1"), 443),
				RS: netip.MustParseAddrPort("192.168.0.10:6443")}
			if !tc.cold {
				r.sync(true)
				r.fake.SetConns(old, model.Conns{Active: 1}) // a client still talks to it
				r.restart()
				r.store.SetSlice(slice("kubernetes", corev1.ProtocolTCP, 6443, onNoNode("192.168.0.11")))
			}
			var order []string
			first := netip.MustParseAddr("10.96.0.1")
			r.fake.FailWhen(func(c fake.Call) error {
				if a, ok := callAddr(c); ok && c.Method != "Observe" {
					tag := "other"
					if a == first {
						tag = "kubernetes"
					}
					order = append(order, tag+" "+c.Method)
				}
				return nil
			})
			r.sync(true)
			seenOther, firstOps := false, 0
			for _, o := range order {
				switch {
				case o[:5] == "other":
					seenOther = true
				case seenOther:
					t.Fatalf("%q came after another Service's operation; order: %v", o, order)
				default:
					firstOps++
				}
			}
			if want := map[bool]int{true: 6, false: 2}[tc.cold]; firstOps != want {
				// Cold: the virtual server, its real server, the VIP and
				// three set members; moved: one real server in, one out.
				t.Fatalf("the API server's Service took %d operations before the rest, want %d; order: %v", firstOps, want, order)
			}
			if !tc.cold {
				// The endpoint that left drains at weight 0, as in any sync.
				svc := r.fake.State().Services[old.VS]
				if rs, ok := svc.Reals.Get(old.RS); !ok || rs.Weight != 0 {
					t.Fatalf("the API server's old endpoint is not draining at weight 0:\n%s", r.fake.Dump())
				}
			}
			if st := r.sync(true); st.Ops != 0 {
				t.Fatalf("a second full sync planned %d operations: the start did not converge", st.Ops)
			}
			if tc.cold {
				sameAsUnordered(t, r)
			}
		})
	}
}

// sameAsUnordered: the kernel r's start made is the one a start makes
// when the API server's Service is not served first (moved to another
// namespace, the same addresses).
func sameAsUnordered(t *testing.T, r *rig) {
	t.Helper()
	plain := newRig(t)
	for _, n := range r.store.ServiceNames() {
		svc, sl := r.store.Service(n)
		if n.Name == "kubernetes" {
			svc = svc.DeepCopy()
			svc.Namespace = "not-first"
			sl = slices.Clone(sl)
			for i, s := range sl {
				sl[i] = s.DeepCopy()
				sl[i].Namespace = "not-first"
			}
		}
		plain.store.SetService(svc)
		for _, s := range sl {
			plain.store.SetSlice(s)
		}
	}
	plain.sync(true)
	if got, want := r.fake.Dump(), plain.fake.Dump(); got != want {
		t.Fatalf("the start that served the API server first ends in\n%s\nwant (served in turn)\n%s", got, want)
	}
}

// Served first, a ClusterIP another Service lists too (a folder of
// manifests has no allocator) would go to the API server's Service alone
// and then, in the whole plan, to the older one: the start leaves it to
// the whole plan, and a restart plans nothing.
func TestServedFirstLeavesASharedClusterIPToTheWholePlan(t *testing.T) {
	r := newRig(t)
	r.store.SetService(service("api", "10.96.0.1", corev1.ProtocolTCP, 443)) // ranks first by name
	r.store.SetSlice(slice("api", corev1.ProtocolTCP, 6443, onNoNode("192.168.0.20")))
	r.store.SetService(service("kubernetes", "10.96.0.1", corev1.ProtocolTCP, 443))
	r.store.SetSlice(slice("kubernetes", corev1.ProtocolTCP, 6443, onNoNode("192.168.0.10")))
	r.sync(true)
	want := "-A -t 10.96.0.1:443 -s rr\n  -a -t 10.96.0.1:443 -r 192.168.0.20:6443 -m -w 1\naddr 10.96.0.1\n"
	r.expectDump(want)
	r.restart()
	if st := r.sync(true); st.Ops != 0 {
		t.Fatalf("a restart on an unchanged cluster planned %d operations:\n%s", st.Ops, r.fake.Dump())
	}
}
