package reconciler

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// kubeProxys puts in the fake kernel what kube-proxy left: a virtual
// server with its real server and, unless nodePort, its address bound on
// kube-ipvs0.
func (r *rig) kubeProxys(k model.VSKey, real string, nodePort bool) {
	r.t.Helper()
	ctx := context.Background()
	if err := r.fake.Do(ctx, model.Op{Kind: model.AddService, VS: model.VirtualServer{Key: k, Scheduler: "rr"}}); err != nil {
		r.t.Fatal(err)
	}
	if err := r.fake.Do(ctx, model.Op{Kind: model.AddReal, VS: model.VirtualServer{Key: k}, RS: model.RealServer{Addr: netip.MustParseAddrPort(real), Weight: 1}}); err != nil {
		r.t.Fatal(err)
	}
	if !nodePort {
		if err := r.fake.Do(ctx, model.Op{Kind: model.BindAddr, Addr: k.Addr}); err != nil {
			r.t.Fatal(err)
		}
	}
}

// TestExcludedCIDRsMeanKubeProxys: --ipvs-exclude-cidrs is kube-proxy's
// guard against deleting other tools' virtual servers there, not a ban on
// Services there. A Service whose external IP is inside is served, and
// when it goes its virtual server and address go with it; keepalived's
// there is neither taken over nor deleted; kube-proxy's there (its address
// on kube-ipvs0) that no Service names is left as it is.
func TestExcludedCIDRsMeanKubeProxys(t *testing.T) {
	excluded := func(o *Options) { o.Exclude = []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24")} }
	leftover := model.NewVSKey(model.TCP, netip.MustParseAddr("192.168.1.201"), 80)
	const kubeProxys = "-A -t 192.168.1.201:80 -s rr\n  -a -t 192.168.1.201:80 -r 10.244.9.9:80 -m -w 1\n"
	for _, tc := range []struct {
		name    string
		foreign bool
		served  string // the kernel with the Service
		warning string
	}{
		{name: "nothing there", served: `-A -t 10.96.0.40:443 -s rr
  -a -t 10.96.0.40:443 -r 10.244.1.8:8443 -m -w 1
-A -t 192.168.1.200:443 -s rr
  -a -t 192.168.1.200:443 -r 10.244.1.8:8443 -m -w 1
` + kubeProxys + `addr 10.96.0.40
addr 192.168.1.200
addr 192.168.1.201
`},
		{name: "keepalived's there", foreign: true, served: `-A -t 10.96.0.40:443 -s rr
  -a -t 10.96.0.40:443 -r 10.244.1.8:8443 -m -w 1
` + keepalived + kubeProxys + `addr 10.96.0.40
addr 192.168.1.201
`, warning: "default/lb ForeignVirtualServer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRigWith(t, excluded)
			r.kubeProxys(leftover, "10.244.9.9:80", false)
			if tc.foreign {
				r.withKeepalived()
			}
			r.store.SetService(withExternalIP("lb", "10.96.0.40", "192.168.1.200", 443))
			r.store.SetSlice(slice("lb", corev1.ProtocolTCP, 8443, ready("10.244.1.8")))
			r.sync(false)
			r.sync(true)
			r.expectDump(tc.served)
			if got := strings.Join(r.warn.warnings, "\n"); !strings.HasPrefix(got, tc.warning) || (tc.warning == "") != (got == "") {
				t.Fatalf("warnings %q, want %q", r.warn.warnings, tc.warning)
			}
			r.store.DeleteService(model.ServiceName{Namespace: "default", Name: "lb"})
			r.sync(false)
			r.sync(true)
			want := kubeProxys + "addr 192.168.1.201\n"
			if tc.foreign {
				want = keepalived + want
			}
			r.expectDump(want)
		})
	}
}

// TestExcludedKubeProxysAdopted: kube-proxy's virtual server inside
// --ipvs-exclude-cidrs that a Service names is taken over in place (its
// real servers made the Service's, never deleted and made again), as
// kube-proxy takes over whatever a Service names; once recorded as ours
// it goes with the Service.
func TestExcludedKubeProxysAdopted(t *testing.T) {
	r := newRigWith(t, func(o *Options) { o.Exclude = []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24")} })
	k := model.NewVSKey(model.TCP, netip.MustParseAddr("192.168.1.200"), 443)
	r.kubeProxys(k, "10.244.9.9:8443", false)
	r.store.SetService(withExternalIP("lb", "10.96.0.40", "192.168.1.200", 443))
	r.store.SetSlice(slice("lb", corev1.ProtocolTCP, 8443, ready("10.244.1.8")))
	r.sync(false)
	r.sync(true)
	r.expectDump(`-A -t 10.96.0.40:443 -s rr
  -a -t 10.96.0.40:443 -r 10.244.1.8:8443 -m -w 1
-A -t 192.168.1.200:443 -s rr
  -a -t 192.168.1.200:443 -r 10.244.1.8:8443 -m -w 1
addr 10.96.0.40
addr 192.168.1.200
`)
	if n := r.fake.Calls()["DeleteService"]; n != 0 {
		t.Fatalf("%d virtual servers deleted: kube-proxy's was made again, not taken over", n)
	}
	if len(r.warn.warnings) != 0 {
		t.Fatalf("warnings %q", r.warn.warnings)
	}
	r.store.DeleteService(model.ServiceName{Namespace: "default", Name: "lb"})
	r.sync(false)
	r.expectDump("")
}

// TestNamedNodePortAdopted: a cluster whose API server has its own
// --service-node-port-range keeps kube-proxy's NodePorts through a
// migration: a virtual server on the node address whose port a Service
// names as its nodePort is taken over in place, whatever --nodeport-range
// says, and removed with the Service; one on a port no Service names,
// outside the range, is left alone (it could be any tool's).
func TestNamedNodePortAdopted(t *testing.T) {
	r := newRig(t)
	r.store.SetNode(node("192.168.1.10"))
	np := model.NewVSKey(model.TCP, netip.MustParseAddr("192.168.1.10"), 20080)
	other := model.NewVSKey(model.TCP, netip.MustParseAddr("192.168.1.10"), 20081)
	r.kubeProxys(np, "10.244.9.9:8080", true)
	r.kubeProxys(other, "10.244.9.9:8081", true)
	s := service("np", "10.96.0.30", corev1.ProtocolTCP, 80)
	s.Spec.Type = corev1.ServiceTypeNodePort
	s.Spec.Ports[0].NodePort = 20080
	r.store.SetService(s)
	r.store.SetSlice(slice("np", corev1.ProtocolTCP, 8080, ready("10.244.1.7")))
	r.sync(false)
	r.sync(true)
	const others = "-A -t 192.168.1.10:20081 -s rr\n  -a -t 192.168.1.10:20081 -r 10.244.9.9:8081 -m -w 1\n"
	r.expectDump(`-A -t 10.96.0.30:80 -s rr
  -a -t 10.96.0.30:80 -r 10.244.1.7:8080 -m -w 1
-A -t 192.168.1.10:20080 -s rr
  -a -t 192.168.1.10:20080 -r 10.244.1.7:8080 -m -w 1
` + others + "addr 10.96.0.30\n")
	if n := r.fake.Calls()["DeleteService"]; n != 0 {
		t.Fatalf("%d virtual servers deleted: kube-proxy's NodePort was made again, not taken over", n)
	}
	if len(r.warn.warnings) != 0 {
		t.Fatalf("warnings %q", r.warn.warnings)
	}
	// The views, on their own goroutine, read the nodePorts as the sync.
	if ops, err := r.rec.Diff(context.Background()); err != nil || len(ops) != 0 {
		t.Fatalf("drift after the sync: %v %v", ops, err)
	}
	r.store.DeleteService(model.ServiceName{Namespace: "default", Name: "np"})
	r.sync(false)
	r.sync(true)
	r.expectDump(others)
	if len(r.rec.desired.nodePorts) != 0 || len(*r.rec.pubNodePorts.Load()) != 0 {
		t.Fatalf("nodePorts named after the Service went: %v, published %v", r.rec.desired.nodePorts, *r.rec.pubNodePorts.Load())
	}
}
