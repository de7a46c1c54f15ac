package translate

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// renderMeta prints one line per virtual server: key, kind, port name,
// scheduler source, drain timeout.
func renderMeta(r Result) string {
	var out []string
	for _, s := range r.Services {
		m, ok := r.MetaOf(s.Key)
		if !ok {
			out = append(out, s.Key.String()+" NO META")
			continue
		}
		out = append(out, fmt.Sprintf("%s %s %s port=%s sched=%s drain=%s", s.Key, m.Service, m.Kind, m.PortName, m.SchedulerFrom, m.DrainTimeout))
	}
	if len(r.Meta) != len(r.Services) {
		out = append(out, fmt.Sprintf("%d meta for %d services", len(r.Meta), len(r.Services)))
	}
	return strings.Join(out, "\n")
}

func TestMeta(t *testing.T) {
	lb := func(opts ...svcOpt) *corev1.Service {
		return service(append([]svcOpt{
			typeOpt(corev1.ServiceTypeLoadBalancer),
			portsOpt(svcPort("http", corev1.ProtocolTCP, 80, 30080), svcPort("dns", corev1.ProtocolUDP, 53, 30053)),
			externalIPsOpt("198.51.100.7", "10.96.0.10"), // the second one is the ClusterIP: ClusterIP wins
			ingressOpt("198.51.100.9"),
		}, opts...)...)
	}
	cases := []struct {
		name string
		svc  *corev1.Service
		want string
	}{{
		name: "kinds and port names, defaults from the flags",
		svc:  lb(),
		want: `
			-t 10.96.0.10:80 default/web ClusterIP port=http sched=flag drain=2m0s
			-u 10.96.0.10:53 default/web ClusterIP port=dns sched=flag drain=2m0s
			-t 192.168.1.10:30080 default/web NodePort port=http sched=flag drain=2m0s
			-u 192.168.1.10:30053 default/web NodePort port=dns sched=flag drain=2m0s
			-t 198.51.100.7:80 default/web ExternalIP port=http sched=flag drain=2m0s
			-u 198.51.100.7:53 default/web ExternalIP port=dns sched=flag drain=2m0s
			-t 198.51.100.9:80 default/web LoadBalancer port=http sched=flag drain=2m0s
			-u 198.51.100.9:53 default/web LoadBalancer port=dns sched=flag drain=2m0s`,
	}, {
		name: "annotations: scheduler source and drain timeout",
		svc:  lb(annotationOpt(AnnotationScheduler, "wrr", AnnotationDrainTimeout, "45s")),
		want: `
			-t 10.96.0.10:80 default/web ClusterIP port=http sched=annotation drain=45s
			-u 10.96.0.10:53 default/web ClusterIP port=dns sched=annotation drain=45s
			-t 192.168.1.10:30080 default/web NodePort port=http sched=annotation drain=45s
			-u 192.168.1.10:30053 default/web NodePort port=dns sched=annotation drain=45s
			-t 198.51.100.7:80 default/web ExternalIP port=http sched=annotation drain=45s
			-u 198.51.100.7:53 default/web ExternalIP port=dns sched=annotation drain=45s
			-t 198.51.100.9:80 default/web LoadBalancer port=http sched=annotation drain=45s
			-u 198.51.100.9:53 default/web LoadBalancer port=dns sched=annotation drain=45s`,
	}, {
		name: "a zero drain timeout is allowed",
		svc:  service(annotationOpt(AnnotationDrainTimeout, "0s")),
		want: `-t 10.96.0.10:80 default/web ClusterIP port=http sched=flag drain=0s`,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.IPv6 = false
			r := Service(tc.svc, nil, testNode(), cfg)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if got, want := lines(renderMeta(r)), lines(tc.want); got != want {
				t.Errorf("got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestResultIsSorted checks the ordering promises on a Service whose
// frontends come out of Service() in a different order.
func TestResultIsSorted(t *testing.T) {
	svc := service(clusterIPsOpt("fd00:96::10", "10.96.0.10"),
		externalIPsOpt("2001:db8::1", "198.51.100.1", "10.0.0.1"),
		portsOpt(svcPort("b", corev1.ProtocolUDP, 53, 0), svcPort("a", corev1.ProtocolTCP, 53, 0)))
	r := Service(svc, nil, testNode(), testConfig())
	if !slices.IsSortedFunc(r.Services, func(a, b *model.Service) int { return a.Key.Compare(b.Key) }) {
		t.Errorf("services not sorted:\n%s", render(r))
	}
	want := addrs("10.0.0.1", "10.96.0.10", "198.51.100.1", "2001:db8::1", "fd00:96::10")
	if !slices.Equal(r.Addrs, want) {
		t.Errorf("Addrs = %v, want %v", r.Addrs, want)
	}
	if len(r.Services) != 10 {
		t.Errorf("want 10 virtual servers (5 addresses x 2 ports), got:\n%s", render(r))
	}
}

func TestNodePortAddrs(t *testing.T) {
	host := addrs("127.0.0.1", "192.168.1.10", "10.1.2.3", "::ffff:10.1.2.4", "fd00:1::10", "2001:db8:5::1")
	externalOnly := testNode()
	externalOnly.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeExternalIP, Address: "203.0.113.5"},
		{Type: corev1.NodeExternalIP, Address: "203.0.113.6"},
	}
	cases := []struct {
		name   string
		spec   []string
		node   *corev1.Node
		noNode bool
		v4, v6 bool
		want   []netip.Addr
	}{
		{"primary: first InternalIP of each family", []string{NodePortPrimary}, nil, false, true, true,
			addrs("192.168.1.10", "fd00:1::10")},
		{"primary, IPv4 only", []string{NodePortPrimary}, nil, false, true, false,
			addrs("192.168.1.10")},
		{"primary falls back to ExternalIPs", []string{NodePortPrimary}, externalOnly, false, true, true,
			addrs("203.0.113.5")},
		{"primary without a Node: none", []string{NodePortPrimary}, nil, true, true, true, nil},
		{"CIDRs select host addresses, mapped ones unmapped", []string{"10.0.0.0/8", "2001:db8::/32"}, nil, false, true, true,
			addrs("10.1.2.3", "10.1.2.4", "2001:db8:5::1")},
		{"CIDRs filtered by family", []string{"10.0.0.0/8", "2001:db8::/32"}, nil, false, false, true,
			addrs("2001:db8:5::1")},
		{"primary and a CIDR, deduped", []string{NodePortPrimary, "192.168.0.0/16"}, nil, false, true, false,
			addrs("192.168.1.10")},
		{"empty list: every host address", nil, nil, false, true, true,
			addrs("10.1.2.3", "10.1.2.4", "127.0.0.1", "192.168.1.10", "2001:db8:5::1", "fd00:1::10")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{NodePortAddresses: tc.spec, HostAddrs: host, Families: model.Families{IPv4: tc.v4, IPv6: tc.v6}, DrainTimeout: time.Minute}
			node := tc.node
			if node == nil && !tc.noNode {
				node = testNode()
			}
			if got := NodePortAddrs(node, cfg); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNodePortOnCIDRAddresses(t *testing.T) {
	cfg := testConfig()
	cfg.NodePortAddresses = []string{"10.1.0.0/16"}
	cfg.HostAddrs = addrs("10.1.2.3", "192.168.1.10")
	svc := service(typeOpt(corev1.ServiceTypeNodePort), portsOpt(svcPort("http", corev1.ProtocolTCP, 80, 30080)))
	r := Service(svc, nil, testNode(), cfg)
	want := `
		-A -t 10.1.2.3:30080 -s rr
		-A -t 10.96.0.10:80 -s rr
		addr 10.96.0.10`
	if got := lines(render(r)); got != lines(want) {
		t.Errorf("got:\n%s\nwant:\n%s", got, lines(want))
	}
}

// TestMetaEndpoints checks what views learn about each real server: every
// endpoint of the frontend's port and family (chosen or not), with its pod,
// node and conditions, shared by the frontends of that port.
func TestMetaEndpoints(t *testing.T) {
	pod := func(name string) epOpt {
		return func(e *discoveryv1.Endpoint) { e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: name} }
	}
	svc := service(typeOpt(corev1.ServiceTypeNodePort), portsOpt(svcPort("http", corev1.ProtocolTCP, 80, 30080)))
	r := Service(svc, []*discoveryv1.EndpointSlice{v4(
		ep("10.244.2.2", onNode("n2"), pod("web-2"), servingTerminating),
		ep("10.244.1.2", onNode("n1"), pod("web-1")),
		ep("10.244.3.2", notReady),
	)}, testNode(), testConfig())
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	var got []string
	for _, s := range r.Services {
		m, _ := r.MetaOf(s.Key)
		for _, e := range m.Endpoints {
			got = append(got, fmt.Sprintf("%s %s pod=%s node=%s r=%t s=%t t=%t", s.Key, e.Addr, e.Pod, e.Node, e.Ready, e.Serving, e.Terminating))
		}
	}
	want := `
		-t 10.96.0.10:80 10.244.1.2:8080 pod=web-1 node=n1 r=true s=true t=false
		-t 10.96.0.10:80 10.244.2.2:8080 pod=web-2 node=n2 r=false s=true t=true
		-t 10.96.0.10:80 10.244.3.2:8080 pod= node= r=false s=false t=false
		-t 192.168.1.10:30080 10.244.1.2:8080 pod=web-1 node=n1 r=true s=true t=false
		-t 192.168.1.10:30080 10.244.2.2:8080 pod=web-2 node=n2 r=false s=true t=true
		-t 192.168.1.10:30080 10.244.3.2:8080 pod= node= r=false s=false t=false`
	if g := lines(strings.Join(got, "\n")); g != lines(want) {
		t.Errorf("got:\n%s\nwant:\n%s", g, lines(want))
	}
	m, _ := r.MetaOf(model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80))
	if e, ok := m.Endpoint(netip.MustParseAddrPort("10.244.2.2:8080")); !ok || e.Pod != "web-2" {
		t.Errorf("Endpoint(10.244.2.2:8080) = %+v, %t", e, ok)
	}
	if _, ok := m.Endpoint(netip.MustParseAddrPort("10.244.2.2:9090")); ok {
		t.Error("an endpoint found under another port")
	}
}

func TestNodePodCIDRs(t *testing.T) {
	for _, tc := range []struct {
		spec corev1.NodeSpec
		want string
	}{
		{corev1.NodeSpec{}, "[]"},
		{corev1.NodeSpec{PodCIDR: "10.244.1.0/24"}, "[10.244.1.0/24]"},
		{corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"fd00:10:244:1::/64", "10.244.1.0/24"}}, "[10.244.1.0/24 fd00:10:244:1::/64]"},
		{corev1.NodeSpec{PodCIDRs: []string{"nope", "10.244.1.7/24", "10.244.2.0/24"}}, "[10.244.1.0/24]"},
	} {
		if got := fmt.Sprint(NodePodCIDRs(&corev1.Node{Spec: tc.spec})); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.spec, got, tc.want)
		}
	}
	if got := NodePodCIDRs(nil); got != nil {
		t.Errorf("no node: %v", got)
	}
}
