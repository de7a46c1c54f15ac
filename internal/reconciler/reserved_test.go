package reconciler

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/snapshot"
)

// No Service claims a node's, the API server's or a pod's address: an
// external IP or load-balancer ingress IP there is refused (an Event, the
// refused count; one Event for the object), never bound nor listed as a VIP, while the Service's
// NodePort on the node's address and its other frontends are served. A
// Node that joins with an address a Service holds takes it back at the
// next (incremental) sync; one that leaves gives it up.
func TestReservedAddrsAreNeverClaimed(t *testing.T) {
	r := newRigWith(t, func(o *Options) {
		// The API server, and a kubeconfig's server that is the kubernetes
		// Service's ClusterIP (which stays the agent's to serve).
		o.ReservedAddrs = []netip.Addr{netip.MustParseAddr("192.168.1.2"), netip.MustParseAddr("10.96.0.1")}
		o.ReservedCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	})
	r.store.SetNode(node("192.168.1.10"))
	r.store.SetHostAddrs([]netip.Addr{netip.MustParseAddr("192.168.1.10")})
	r.store.SetNodeAddrs("node-b", snapshot.NodeAddrs{Addrs: []netip.Addr{netip.MustParseAddr("192.168.1.11")}})
	web := service("web", "10.96.0.10", corev1.ProtocolTCP, 80)
	web.Spec.Type = corev1.ServiceTypeLoadBalancer
	web.Spec.Ports[0].NodePort = 30080
	web.Spec.ExternalIPs = []string{"192.168.1.10", "192.168.1.11", "10.244.7.7", "192.168.1.50"}
	web.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.168.1.2"}}
	r.store.SetService(web)
	r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2")))
	r.store.SetService(service("kubernetes", "10.96.0.1", corev1.ProtocolTCP, 443))
	r.sync(false)
	dump := r.fake.Dump()
	for _, a := range []string{"192.168.1.10:80", "192.168.1.11", "10.244.7.7", "192.168.1.2", "KUBE-IPVS-VIPS 192.168.1.10"} {
		if strings.Contains(dump, a) {
			t.Errorf("%s is claimed:\n%s", a, dump)
		}
	}
	for _, want := range []string{"-A -t 192.168.1.10:30080", "-A -t 192.168.1.50:80", "addr 192.168.1.50", "-A -t 10.96.0.10:80", "-A -t 10.96.0.1:443", "addr 10.96.0.1"} {
		if !strings.Contains(dump, want) {
			t.Errorf("%q missing:\n%s", want, dump)
		}
	}
	reserved := func() int {
		n := 0
		for _, w := range r.warn.warnings {
			if strings.Contains(w, "ReservedAddress") {
				n++
			}
		}
		return n
	}
	if reserved() != 1 || r.rec.View().refused != 4 {
		t.Errorf("%d ReservedAddress warnings, %d refused, want 1 and 4: %q", reserved(), r.rec.View().refused, r.warn.warnings)
	}
	for _, a := range []string{"10.244.7.7:80", "192.168.1.2:80", "192.168.1.10:80", "192.168.1.11:80"} {
		if !slices.ContainsFunc(r.warn.warnings, func(w string) bool { return strings.Contains(w, a) }) {
			t.Errorf("the Event does not name %s: %q", a, r.warn.warnings)
		}
	}

	// node-c joins with the address the Service still holds; node-b leaves.
	r.store.SetNodeAddrs("node-c", snapshot.NodeAddrs{Addrs: []netip.Addr{netip.MustParseAddr("192.168.1.50")}})
	r.store.DeleteNodeAddrs("node-b")
	if st := r.sync(false); st.Full {
		t.Fatal("a full sync: the incremental one is what is tested")
	}
	dump = r.fake.Dump()
	if strings.Contains(dump, "192.168.1.50") {
		t.Errorf("a joining Node's address stays claimed:\n%s", dump)
	}
	for _, want := range []string{"-A -t 192.168.1.11:80", "addr 192.168.1.11", "set KUBE-IPVS-VIPS 192.168.1.11"} {
		if !strings.Contains(dump, want) {
			t.Errorf("the address of a Node gone: %q missing:\n%s", want, dump)
		}
	}
	// The frontend now refused is counted; the object was told of this
	// reason already, and is not told again until its next generation.
	if reserved() != 1 || r.rec.View().refused != 4 {
		t.Errorf("%d ReservedAddress warnings, %d refused, want 1 and 4: %q", reserved(), r.rec.View().refused, r.warn.warnings)
	}
}
