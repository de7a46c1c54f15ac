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

// setLines is the "set" part of a dump.
func setLines(dump string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(dump, "\n") {
		if strings.HasPrefix(l, "set ") {
			b.WriteString(l)
		}
	}
	return b.String()
}

// lbLocal is a LoadBalancer Service with Local policy, a health-check
// port and source ranges.
func lbLocal() *corev1.Service {
	s := service("lb", "10.96.0.20", corev1.ProtocolTCP, 80)
	s.Spec.Type = corev1.ServiceTypeLoadBalancer
	s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	s.Spec.HealthCheckNodePort = 32100
	s.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24"}
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.20"}}
	return s
}

func TestShimMembersFollowServices(t *testing.T) {
	r := newRig(t)
	r.store.SetService(lbLocal())
	r.sync(false)
	want := `set KUBE-IPVS-CLUSTER-IP 10.96.0.20,tcp:80
set KUBE-IPVS-FRONTENDS 10.96.0.20,tcp:80
set KUBE-IPVS-FRONTENDS 192.0.2.20,tcp:80
set KUBE-IPVS-LB-FW 192.0.2.20,tcp:80
set KUBE-IPVS-LB-SOURCE-CIDR 192.0.2.20,tcp:80,198.51.100.0/24
set KUBE-IPVS-NO-ENDPOINTS 10.96.0.20,tcp:80
set KUBE-IPVS-NO-ENDPOINTS 192.0.2.20,tcp:80
set KUBE-IPVS-VIPS 10.96.0.20
set KUBE-IPVS-VIPS 192.0.2.20
`
	if got := setLines(r.fake.Dump()); got != want {
		t.Fatalf("members:\n%s\nwant:\n%s", got, want)
	}
	if hc := r.rec.View().HealthChecks(); len(hc) != 1 || hc[0].Port != 32100 || hc[0].LocalEndpoints != 0 {
		t.Fatalf("health checks %+v", hc)
	}
	// A local endpoint: the reject goes, the hairpin member comes, the
	// health check counts it.
	sl := slice("lb", corev1.ProtocolTCP, 8080, ready("10.244.1.7"))
	sl.Endpoints[0].NodeName = ptr("node-a")
	r.store.SetSlice(sl)
	r.sync(false)
	want = `set KUBE-IPVS-CLUSTER-IP 10.96.0.20,tcp:80
set KUBE-IPVS-FRONTENDS 10.96.0.20,tcp:80
set KUBE-IPVS-FRONTENDS 192.0.2.20,tcp:80
set KUBE-IPVS-LB-FW 192.0.2.20,tcp:80
set KUBE-IPVS-LB-SOURCE-CIDR 192.0.2.20,tcp:80,198.51.100.0/24
set KUBE-IPVS-LOCAL-SOURCES 192.0.2.20,tcp:80 skbmark 0x3c3c89c7
set KUBE-IPVS-LOOP-BACK 10.244.1.7,tcp:8080,10.244.1.7
set KUBE-IPVS-VIPS 10.96.0.20
set KUBE-IPVS-VIPS 192.0.2.20
`
	if got := setLines(r.fake.Dump()); got != want {
		t.Fatalf("members with an endpoint:\n%s\nwant:\n%s", got, want)
	}
	if hc := r.rec.View().HealthChecks(); len(hc) != 1 || hc[0].LocalEndpoints != 1 {
		t.Fatalf("health checks %+v", hc)
	}
	r.store.DeleteService(model.ServiceName{Namespace: "default", Name: "lb"})
	r.sync(false)
	if got := setLines(r.fake.Dump()); got != "" || len(r.rec.View().HealthChecks()) != 0 {
		t.Fatalf("after delete: members\n%s health checks %v", got, r.rec.View().HealthChecks())
	}
}

func TestShimRulesWrittenOncePerConfig(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	r.sync(true)
	r.restart()
	r.sync(true)
	if n := r.fake.RuleWrites(); n != 1 {
		t.Fatalf("rules written %d times, want once", n)
	}
	if cfg := r.fake.ShimConfig(); cfg == nil || !cfg.IPv4 || !cfg.IPv6 {
		t.Fatalf("shim config %+v, want both families as translated", cfg)
	}
}

func TestUDPFirstEndpointClearsStaleConntrack(t *testing.T) {
	r := newRig(t)
	r.store.SetService(service("dns", "10.96.0.53", corev1.ProtocolUDP, 53))
	r.store.SetService(service("web", "10.96.0.10", corev1.ProtocolTCP, 80))
	r.sync(false)
	dst := netip.MustParseAddrPort("10.96.0.53:53")
	r.fake.SetConntrackDest(model.UDP, dst, 3)
	r.store.SetSlice(slice("dns", corev1.ProtocolUDP, 53, ready("10.244.1.3")))
	r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2")))
	r.sync(false)
	if left := r.fake.Conntrack(); left != "" {
		t.Fatalf("conntrack entries to %s made while it had no endpoint are left:\n%s", dst, left)
	}
	// A second endpoint is not a first one.
	r.fake.PlantConntrack(fake.ConntrackFlow{Proto: model.UDP, Dst: dst, Reply: netip.MustParseAddrPort("10.244.1.3:53")}, 1)
	r.store.SetSlice(slice("dns", corev1.ProtocolUDP, 53, ready("10.244.1.3"), ready("10.244.2.3")))
	r.sync(false)
	if left, want := r.fake.Conntrack(), "udp dst 10.96.0.53:53 reply 10.244.1.3:53 x1\n"; left != want {
		t.Fatalf("conntrack entries left:\n%swant:\n%s", left, want)
	}
}

func TestFailedSourceFilterHoldsTheVIP(t *testing.T) {
	r := newRig(t)
	fw := shim.Firewall.Name(false)
	r.fake.FailWhen(func(c fake.Call) error {
		if e, ok := c.Arg.(model.SetEntry); ok && c.Method == "AddSetEntry" && e.Set() == fw {
			return errors.New("injected")
		}
		return nil
	})
	r.store.SetService(lbLocal())
	// One Service's failure: reported on it, not a failed sync.
	st := r.sync(false)
	if st.Failing != 1 || len(r.warn.warnings) != 1 || !strings.Contains(r.warn.warnings[0], "FailedToProgram") {
		t.Fatalf("a failed filter member went unreported: failing %d, warnings %q", st.Failing, r.warn.warnings)
	}
	dump := r.fake.Dump()
	if strings.Contains(dump, "addr 192.0.2.20") || !strings.Contains(dump, "addr 10.96.0.20") {
		t.Fatalf("the LB VIP went live without its filter (or the ClusterIP was held too):\n%s", dump)
	}
	r.fake.FailWhen(nil)
	r.clock.advance(st.Requeue) // the runner comes back when its retry is due
	if st := r.sync(false); st.Failing != 0 {
		t.Fatalf("still failing after the retry: %d", st.Failing)
	}
	if !strings.Contains(r.fake.Dump(), "addr 192.0.2.20") {
		t.Fatalf("the LB VIP not bound once its filter is in:\n%s", r.fake.Dump())
	}
}

func TestCleanupRemovesShimAndKubeProxyLeftovers(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	r.fake.SetKubeProxyLeftovers(true)
	opt := CleanupOptions{NodePortRange: model.PortRange{First: 30000, Last: 32767}}
	if _, err := Cleanup(context.Background(), r.fake, opt); err != nil {
		t.Fatal(err)
	}
	if r.fake.Dump() != "" || r.fake.ShimConfig() != nil || len(r.fake.SetNames()) != 0 {
		t.Fatalf("left: %q rules %v sets %v", r.fake.Dump(), r.fake.ShimConfig(), r.fake.SetNames())
	}
	if !r.fake.KubeProxyLeftovers() {
		t.Fatal("kube-proxy's leftovers removed without --kube-proxy")
	}
	opt.KubeProxy = true
	if _, err := Cleanup(context.Background(), r.fake, opt); err != nil {
		t.Fatal(err)
	}
	if r.fake.KubeProxyLeftovers() {
		t.Fatal("kube-proxy's leftovers survived --kube-proxy")
	}
}
