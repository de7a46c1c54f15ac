package translate

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// TestLocalSources checks what serves a Local-policy Service's external
// destinations to this node's pods and to the node itself: a firewall-mark
// virtual server with the endpoints a Cluster policy would choose (as
// kube-proxy's iptables and nftables modes send such traffic to the
// Service's cluster-wide chain), and a LOCAL-SOURCES member with its mark
// per load-balancer IP, external IP and NodePort, while those frontends
// keep this node's endpoints for everyone else.
func TestLocalSources(t *testing.T) {
	np := portsOpt(svcPort("http", corev1.ProtocolTCP, 80, 30080))
	lb := func(s *corev1.Service) {
		typeOpt(corev1.ServiceTypeLoadBalancer)(s)
		np(s)
		ingressOpt("192.0.2.10")(s)
		externalIPsOpt("198.51.100.7")(s)
	}
	v4only := func(c *Config) { c.IPv6 = false }
	mark := LocalSourcesMark(model.ServiceName{Namespace: "default", Name: "web"}, "http", model.TCP, false, 0)
	mark6 := LocalSourcesMark(model.ServiceName{Namespace: "default", Name: "web"}, "http", model.TCP, true, 0)
	members := func(m uint32, addrs ...string) string {
		var b strings.Builder
		for _, a := range addrs {
			fmt.Fprintf(&b, "KUBE-IPVS-LOCAL-SOURCES %s skbmark %#x\n", a, m)
		}
		return b.String()
	}
	for _, tc := range []struct {
		name        string
		svc         *corev1.Service
		slices      []*discoveryv1.EndpointSlice
		cfg         func(*Config)
		wantVS      string // the firewall-mark virtual servers, render()'s lines
		wantMembers string
	}{{
		name:        "no local endpoint: every endpoint for local sources, LB IP, external IP and NodePort",
		svc:         service(lb, externalLocal),
		cfg:         v4only,
		slices:      []*discoveryv1.EndpointSlice{v4(ep("10.0.2.1", onNode("n2")), ep("10.0.3.1", onNode("n3")))},
		wantVS:      fmt.Sprintf("-A -f %d -s rr\n-r 10.0.2.1:8080 -m -w 1\n-r 10.0.3.1:8080 -m -w 1", mark),
		wantMembers: members(mark, "192.0.2.10,tcp:80", "192.168.1.10,tcp:30080", "198.51.100.7,tcp:80"),
	}, {
		name:        "a local endpoint too: local sources still reach every endpoint, as kube-proxy's iptables mode",
		svc:         service(lb, externalLocal),
		cfg:         v4only,
		slices:      []*discoveryv1.EndpointSlice{v4(ep("10.0.1.1", onNode("n1")), ep("10.0.2.1", onNode("n2")))},
		wantVS:      fmt.Sprintf("-A -f %d -s rr\n-r 10.0.1.1:8080 -m -w 1\n-r 10.0.2.1:8080 -m -w 1", mark),
		wantMembers: members(mark, "192.0.2.10,tcp:80", "192.168.1.10,tcp:30080", "198.51.100.7,tcp:80"),
	}, {
		name:   "no usable endpoint anywhere: nothing, everyone is rejected",
		svc:    service(lb, externalLocal),
		cfg:    v4only,
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.2.1", onNode("n2"), notReady))},
	}, {
		name:   "Cluster policy: nothing, every frontend has every endpoint",
		svc:    service(lb),
		cfg:    v4only,
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.2.1", onNode("n2")))},
	}, {
		name:   "internalTrafficPolicy Local alone: the ClusterIP is not an external destination",
		svc:    service(lb, internalLocal),
		cfg:    v4only,
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.2.1", onNode("n2")))},
	}, {
		name: "the Cluster policy's topology: zone hints narrow local sources' endpoints",
		svc:  service(lb, externalLocal),
		cfg:  v4only,
		slices: []*discoveryv1.EndpointSlice{v4(
			ep("10.0.2.1", onNode("n2"), zoneHints("z1")),
			ep("10.0.3.1", onNode("n3"), zoneHints("z2")),
		)},
		wantVS:      fmt.Sprintf("-A -f %d -s rr\n-r 10.0.2.1:8080 -m -w 1", mark),
		wantMembers: members(mark, "192.0.2.10,tcp:80", "192.168.1.10,tcp:30080", "198.51.100.7,tcp:80"),
	}, {
		name: "each family its own mark",
		svc:  service(lb, externalLocal, ingressOpt("192.0.2.10", "2001:db8::10"), clusterIPsOpt("10.96.0.10", "fd00:96::10")),
		slices: []*discoveryv1.EndpointSlice{
			v4(ep("10.0.2.1", onNode("n2"))),
			slice("web-v6", discoveryv1.AddressTypeIPv6, nil, ep("fd00:10::2", onNode("n2"))),
		},
		wantVS: fmt.Sprintf("-A -f %d -s rr\n-r 10.0.2.1:8080 -m -w 1\n-A -f %d -s rr\n-r [fd00:10::2]:8080 -m -w 1",
			min(mark, mark6), max(mark, mark6)),
		wantMembers: members(mark, "192.0.2.10,tcp:80", "192.168.1.10,tcp:30080", "198.51.100.7,tcp:80") +
			strings.ReplaceAll(members(mark6, "2001:db8::10,tcp:80", "fd00:1::10,tcp:30080"), "KUBE-IPVS-", "KUBE-IPVS6-"),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			res := Service(tc.svc, tc.slices, testNode(), cfg)
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			if got, want := strings.Join(markedServices(res), "\n"), tc.wantVS; got != want {
				t.Errorf("firewall-mark virtual servers:\n%s\nwant:\n%s", got, want)
			}
			var got strings.Builder
			for _, e := range res.SetEntries {
				if strings.Contains(e.Set(), "LOCAL-SOURCES") {
					got.WriteString(e.String() + "\n")
				}
			}
			if got.String() != tc.wantMembers {
				t.Errorf("members:\n%s\nwant:\n%s", got.String(), tc.wantMembers)
			}
			for i, s := range res.Services {
				if s.Key.FWMark != 0 && res.Meta[i].Kind != KindLocalSources {
					t.Errorf("%s: kind %s, want %s", s.Key, res.Meta[i].Kind, KindLocalSources)
				}
			}
		})
	}
}

// markedServices renders the firewall-mark virtual servers of a result.
func markedServices(r Result) []string {
	var out []string
	for _, s := range r.Services {
		if s.Key.FWMark == 0 {
			continue
		}
		out = append(out, "-A "+s.VirtualServer.String())
		for _, rs := range s.Reals.All() {
			out = append(out, rs.String())
		}
	}
	return out
}

// TestLocalSourcesMark checks that the marks stay clear of the masquerade
// bit, whichever it is, and of the small marks of hand-made services.
func TestLocalSourcesMark(t *testing.T) {
	for bit := range 32 {
		masq := uint32(1) << bit
		for i := range 200 {
			name := model.ServiceName{Namespace: "ns", Name: fmt.Sprintf("svc-%d", i)}
			m := LocalSourcesMark(name, "p", model.TCP, i%2 == 0, masq)
			if m&masq != 0 || m < 1<<16 || m >= 1<<31 {
				t.Fatalf("mark %#x for %s with masquerade mark %#x", m, name, masq)
			}
			if m != LocalSourcesMark(name, "p", model.TCP, i%2 == 0, masq) {
				t.Fatal("the mark is not a function of its inputs")
			}
		}
	}
}
