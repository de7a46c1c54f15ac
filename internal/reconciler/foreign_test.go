package reconciler

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// keepalived's virtual server, with its real server, on an address of its
// own interface (not kube-ipvs0).
const keepalived = `-A -t 192.168.1.200:443 -s wlc
  -a -t 192.168.1.200:443 -r 10.0.0.5:443 -m -w 1
`

func (r *rig) withKeepalived() {
	r.t.Helper()
	ctx := context.Background()
	k := model.NewVSKey(model.TCP, netip.MustParseAddr("192.168.1.200"), 443)
	if err := r.fake.Do(ctx, model.Op{Kind: model.AddService, VS: model.VirtualServer{Key: k, Scheduler: "wlc"}}); err != nil {
		r.t.Fatal(err)
	}
	if err := r.fake.Do(ctx, model.Op{Kind: model.AddReal, VS: model.VirtualServer{Key: k}, RS: model.RealServer{Addr: netip.MustParseAddrPort("10.0.0.5:443"), Weight: 1}}); err != nil {
		r.t.Fatal(err)
	}
}

// withExternalIP is a ClusterIP Service on port that also lists an
// external IP.
func withExternalIP(name, clusterIP, externalIP string, port int32) *corev1.Service {
	s := service(name, clusterIP, corev1.ProtocolTCP, port)
	s.Spec.ExternalIPs = []string{externalIP}
	return s
}

// TestForeignVirtualServerIsNeverTakenOver: a Service whose external IP
// and port are what keepalived already serves neither rewrites that
// virtual server nor binds its address nor names it in a set, is told so
// once, and when it goes keepalived's server stays. Its ClusterIP works.
func TestForeignVirtualServerIsNeverTakenOver(t *testing.T) {
	for _, tc := range []struct {
		name string
		port int32 // the Service's port on keepalived's address
	}{
		{"same address and port", 443},
		// Binding the address for port 80 would make keepalived's :443
		// look ours, to be taken over by the next full sync.
		{"same address, another port", 80},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.withKeepalived()
			r.store.SetService(withExternalIP("lb", "10.96.0.40", "192.168.1.200", tc.port))
			r.store.SetSlice(slice("lb", corev1.ProtocolTCP, 8443, ready("10.244.1.8")))
			r.sync(false)
			r.sync(true)
			dump := r.fake.Dump()
			if !strings.Contains(dump, keepalived) || strings.Contains(dump, "192.168.1.200,") || strings.Contains(dump, "addr 192.168.1.200") ||
				strings.Contains(dump, "-t 192.168.1.200:80 ") {
				t.Fatalf("keepalived's server taken over:\n%s", dump)
			}
			if !strings.Contains(dump, "-a -t 10.96.0.40:"+strconv.Itoa(int(tc.port))+" -r 10.244.1.8:8443") {
				t.Fatalf("the ClusterIP frontend not programmed:\n%s", dump)
			}
			if len(r.warn.warnings) != 1 || !strings.HasPrefix(r.warn.warnings[0], "default/lb ForeignVirtualServer") {
				t.Fatalf("warnings %q, want one ForeignVirtualServer on default/lb", r.warn.warnings)
			}
			if n := r.rec.View().Table().Refused; n != 1 {
				t.Fatalf("refused frontends %d, want 1", n)
			}
			r.store.DeleteService(model.ServiceName{Namespace: "default", Name: "lb"})
			r.sync(false)
			r.sync(true)
			if got := r.fake.Dump(); got != keepalived {
				t.Fatalf("after the Service went the kernel holds:\n%s\nwant keepalived's only:\n%s", got, keepalived)
			}
			if n := r.rec.View().Table().Refused; n != 0 {
				t.Fatalf("refused frontends %d after the Service went", n)
			}
		})
	}
}
