package reconciler

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/objects"
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
	r.store.SetNodeAddrs("node-b", objects.NodeAddrs{Addrs: []netip.Addr{netip.MustParseAddr("192.168.1.11")}})
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
	r.store.SetNodeAddrs("node-c", objects.NodeAddrs{Addrs: []netip.Addr{netip.MustParseAddr("192.168.1.50")}})
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

// TestClusterIPsAreNeverReserved: a cluster CIDR that overlaps the
// Service CIDR reserves no ClusterIP (the allocator's): every ClusterIP
// is served, while an external IP inside it stays refused.
func TestClusterIPsAreNeverReserved(t *testing.T) {
	r := newRigWith(t, func(o *Options) {
		o.ReservedCIDRs = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}
	})
	r.store.SetNode(node("192.168.1.10"))
	web := service("web", "10.96.0.10", corev1.ProtocolTCP, 80)
	web.Spec.ExternalIPs = []string{"10.96.5.5"}
	r.store.SetService(web)
	r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2")))
	r.sync(false)
	dump := r.fake.Dump()
	for _, want := range []string{"-A -t 10.96.0.10:80", "addr 10.96.0.10", "set KUBE-IPVS-VIPS 10.96.0.10"} {
		if !strings.Contains(dump, want) {
			t.Errorf("a ClusterIP inside a reserved CIDR: %q missing:\n%s", want, dump)
		}
	}
	if strings.Contains(dump, "10.96.5.5") {
		t.Errorf("an external IP inside a reserved CIDR is claimed:\n%s", dump)
	}
}

// TestLoadBalancerIPOnThisHost: a load-balancer IP that kube-vip or
// keepalived put on this host's own interface is served there, as
// kube-proxy serves it, but neither bound on the agent's link nor guarded
// as a VIP (it is not the agent's); an external IP there is refused, and
// so is a load-balancer IP that is a Node's address.
func TestLoadBalancerIPOnThisHost(t *testing.T) {
	r := newRig(t)
	r.store.SetNode(node("192.168.1.10"))
	r.store.SetHostAddrs([]netip.Addr{netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("192.168.1.77")})
	lb := func(name, clusterIP, ingress string, port int32) *corev1.Service {
		s := service(name, clusterIP, corev1.ProtocolTCP, port)
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.Ports[0].NodePort = 30000 + port
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ingress}}
		return s
	}
	ext := service("ext", "10.96.0.12", corev1.ProtocolTCP, 81)
	ext.Spec.ExternalIPs = []string{"192.168.1.77"}
	for _, s := range []*corev1.Service{lb("vip", "10.96.0.10", "192.168.1.77", 80), lb("node", "10.96.0.11", "192.168.1.10", 82), ext} {
		r.store.SetService(s)
		r.store.SetSlice(slice(s.Name, corev1.ProtocolTCP, 8080, ready("10.244.1.2")))
	}
	r.sync(false)
	dump := r.fake.Dump()
	for _, want := range []string{"-A -t 192.168.1.77:80", "-a -t 192.168.1.77:80 -r 10.244.1.2:8080", "set KUBE-IPVS-FRONTENDS 192.168.1.77,tcp:80"} {
		if !strings.Contains(dump, want) {
			t.Errorf("a load-balancer IP on this host: %q missing:\n%s", want, dump)
		}
	}
	for _, unwanted := range []string{"addr 192.168.1.77", "KUBE-IPVS-VIPS 192.168.1.77", "192.168.1.77:81", "192.168.1.10:82", "KUBE-IPVS-VIPS 192.168.1.10"} {
		if strings.Contains(dump, unwanted) {
			t.Errorf("%q in the kernel:\n%s", unwanted, dump)
		}
	}
	if got := r.rec.View().refused; got != 2 {
		t.Errorf("%d refused, want the external IP on this host and the load-balancer IP on the Node's address", got)
	}
	for _, full := range []bool{false, true} {
		if st := r.sync(full); st.Ops != 0 {
			t.Errorf("full %v: %d operations after the first sync, want none", full, st.Ops)
		}
	}
}
