package translate

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

type tcase struct {
	name   string
	svc    *corev1.Service
	slices []*discoveryv1.EndpointSlice
	node   *corev1.Node // nil: testNode()
	noNode bool         // translate without a Node
	cfg    func(*Config)
	want   string // render() output, compared line by line after trimming
}

func runCases(t *testing.T, cases []tcase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			node := tc.node
			if node == nil && !tc.noNode {
				node = testNode()
			}
			r := Service(tc.svc, tc.slices, node, cfg)
			if r.Err != nil || r.Skipped != "" {
				t.Fatalf("unexpected Err=%v Skipped=%q", r.Err, r.Skipped)
			}
			if got, want := lines(render(r)), lines(tc.want); got != want {
				t.Errorf("got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestFrontendsAndProtocols(t *testing.T) {
	runCases(t, []tcase{{
		name:   "ClusterIP with two endpoints",
		svc:    service(),
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.1.1"), ep("10.0.1.2"))},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			  -r 10.0.1.2:8080 -m -w 1
			addr 10.96.0.10`,
	}, {
		name: "empty protocol is TCP on both sides; UDP and SCTP ports",
		svc: service(portsOpt(
			svcPort("web", "", 80, 0),
			svcPort("dns", corev1.ProtocolUDP, 53, 0),
			svcPort("sig", corev1.ProtocolSCTP, 3868, 0))),
		slices: []*discoveryv1.EndpointSlice{slice("s", discoveryv1.AddressTypeIPv4,
			[]discoveryv1.EndpointPort{sport("web", "", 8080), sport("dns", corev1.ProtocolUDP, 5353), sport("sig", corev1.ProtocolSCTP, 3868)},
			ep("10.0.1.1"))},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			-A -u 10.96.0.10:53 -s rr
			  -r 10.0.1.1:5353 -m -w 1
			-A --sctp-service 10.96.0.10:3868 -s rr
			  -r 10.0.1.1:3868 -m -w 1
			addr 10.96.0.10`,
	}, {
		name: "ports matched by name (and protocol), not by order or number",
		svc: service(portsOpt(
			svcPort("http", corev1.ProtocolTCP, 80, 0),
			svcPort("metrics", corev1.ProtocolTCP, 9090, 0))),
		slices: []*discoveryv1.EndpointSlice{slice("s", discoveryv1.AddressTypeIPv4,
			[]discoveryv1.EndpointPort{
				sport("metrics", corev1.ProtocolTCP, 9100),
				sport("http", corev1.ProtocolTCP, 8080),
				sport("http", corev1.ProtocolUDP, 7777),  // same name, other protocol: not ours
				sport("admin", corev1.ProtocolTCP, 9999), // no such Service port
			},
			ep("10.0.1.1"))},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			-A -t 10.96.0.10:9090 -s rr
			  -r 10.0.1.1:9100 -m -w 1
			addr 10.96.0.10`,
	}, {
		name: "an unnamed slice port serves the only, unnamed Service port",
		svc:  service(portsOpt(svcPort("", corev1.ProtocolTCP, 80, 0))),
		slices: []*discoveryv1.EndpointSlice{slice("s", discoveryv1.AddressTypeIPv4,
			[]discoveryv1.EndpointPort{{Port: ptr32(8080)}}, ep("10.0.1.1"))},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			addr 10.96.0.10`,
	}, {
		name:   "IPv6 single-stack",
		svc:    service(clusterIPsOpt("fd00:96::10")),
		slices: []*discoveryv1.EndpointSlice{slice("s6", discoveryv1.AddressTypeIPv6, nil, ep("fd00:10::1"))},
		want: `
			-A -t [fd00:96::10]:80 -s rr
			  -r [fd00:10::1]:8080 -m -w 1
			addr fd00:96::10`,
	}, {
		name: "dual-stack: each family gets its own family's endpoints",
		svc:  service(clusterIPsOpt("10.96.0.10", "fd00:96::10")),
		slices: []*discoveryv1.EndpointSlice{
			v4(ep("10.0.1.1")),
			slice("s6", discoveryv1.AddressTypeIPv6, nil, ep("fd00:10::1")),
		},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			-A -t [fd00:96::10]:80 -s rr
			  -r [fd00:10::1]:8080 -m -w 1
			addr 10.96.0.10
			addr fd00:96::10`,
	}, {
		name: "dual-stack with IPv6 disabled: only IPv4",
		svc:  service(clusterIPsOpt("fd00:96::10", "10.96.0.10"), externalIPsOpt("2001:db8::1")),
		cfg:  func(c *Config) { c.IPv6 = false },
		slices: []*discoveryv1.EndpointSlice{
			v4(ep("10.0.1.1")),
			slice("s6", discoveryv1.AddressTypeIPv6, nil, ep("fd00:10::1")),
		},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			addr 10.96.0.10`,
	}, {
		name: "dual-stack with IPv4 disabled: only IPv6",
		svc:  service(clusterIPsOpt("10.96.0.10", "fd00:96::10")),
		cfg:  func(c *Config) { c.IPv4 = false },
		slices: []*discoveryv1.EndpointSlice{
			v4(ep("10.0.1.1")),
			slice("s6", discoveryv1.AddressTypeIPv6, nil, ep("fd00:10::1")),
		},
		want: `
			-A -t [fd00:96::10]:80 -s rr
			  -r [fd00:10::1]:8080 -m -w 1
			addr fd00:96::10`,
	}, {
		name: "FQDN slices and wrong-family addresses are ignored",
		svc:  service(),
		slices: []*discoveryv1.EndpointSlice{
			slice("fqdn", discoveryv1.AddressTypeFQDN, nil, ep("db.example.com")),
			v4(ep("10.0.1.1"), ep("fd00:10::9"), ep("not-an-ip")),
		},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			addr 10.96.0.10`,
	}, {
		name: "an endpoint in two slices is one real server, with its best conditions",
		svc:  service(),
		slices: []*discoveryv1.EndpointSlice{
			slice("a", discoveryv1.AddressTypeIPv4, nil, ep("10.0.1.1", servingTerminating), ep("10.0.1.2")),
			slice("b", discoveryv1.AddressTypeIPv4, nil, ep("10.0.1.1"), ep("10.0.1.2")),
		},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			  -r 10.0.1.2:8080 -m -w 1
			addr 10.96.0.10`,
	}, {
		name: "a Service with only spec.clusterIP (no clusterIPs) still works",
		svc:  service(func(s *corev1.Service) { s.Spec.ClusterIPs = nil }),
		want: `
			-A -t 10.96.0.10:80 -s rr
			addr 10.96.0.10`,
	}, {
		name: "external IPs are bound and served",
		svc:  service(externalIPsOpt("198.51.100.7", "2001:db8::7")),
		slices: []*discoveryv1.EndpointSlice{
			v4(ep("10.0.1.1")),
			slice("s6", discoveryv1.AddressTypeIPv6, nil, ep("fd00:10::1")),
		},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			-A -t 198.51.100.7:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			-A -t [2001:db8::7]:80 -s rr
			  -r [fd00:10::1]:8080 -m -w 1
			addr 10.96.0.10
			addr 198.51.100.7
			addr 2001:db8::7`,
	}, {
		name: "NodePort: the node port on the primary node addresses, which are not bound",
		svc:  service(typeOpt(corev1.ServiceTypeNodePort), portsOpt(svcPort("http", corev1.ProtocolTCP, 80, 30080))),
		slices: []*discoveryv1.EndpointSlice{
			v4(ep("10.0.1.1")),
			slice("s6", discoveryv1.AddressTypeIPv6, nil, ep("fd00:10::1")),
		},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			-A -t 192.168.1.10:30080 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			-A -t [fd00:1::10]:30080 -s rr
			  -r [fd00:10::1]:8080 -m -w 1
			addr 10.96.0.10`,
	}, {
		name:   "NodePort on a node without a Node object: no node port frontends",
		svc:    service(typeOpt(corev1.ServiceTypeNodePort), portsOpt(svcPort("http", corev1.ProtocolTCP, 80, 30080))),
		noNode: true,
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.1.1"))},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			addr 10.96.0.10`,
	}, {
		name: "LoadBalancer: ingress IPs bound, ipMode Proxy and hostname ingress left alone, node port served",
		svc: service(typeOpt(corev1.ServiceTypeLoadBalancer), portsOpt(svcPort("http", corev1.ProtocolTCP, 80, 30080)),
			ingressOpt("198.51.100.9"), func(s *corev1.Service) {
				proxy := corev1.LoadBalancerIPModeProxy
				s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress,
					corev1.LoadBalancerIngress{IP: "198.51.100.10", IPMode: &proxy},
					corev1.LoadBalancerIngress{Hostname: "lb.example.com"})
			}),
		cfg:    func(c *Config) { c.IPv6 = false },
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.1.1"))},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			-A -t 192.168.1.10:30080 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			-A -t 198.51.100.9:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			addr 10.96.0.10
			addr 198.51.100.9`,
	}, {
		name: "LoadBalancer without node ports (allocateLoadBalancerNodePorts false)",
		svc:  service(typeOpt(corev1.ServiceTypeLoadBalancer), ingressOpt("198.51.100.9")),
		cfg:  func(c *Config) { c.IPv6 = false },
		want: `
			-A -t 10.96.0.10:80 -s rr
			-A -t 198.51.100.9:80 -s rr
			addr 10.96.0.10
			addr 198.51.100.9`,
	}, {
		name: "ingress IPs of a Service that is no longer type LoadBalancer are ignored",
		svc:  service(ingressOpt("198.51.100.9")),
		want: `
			-A -t 10.96.0.10:80 -s rr
			addr 10.96.0.10`,
	}, {
		name: "an external IP equal to the ClusterIP makes one virtual server",
		svc:  service(externalIPsOpt("10.96.0.10")),
		want: `
			-A -t 10.96.0.10:80 -s rr
			addr 10.96.0.10`,
	}, {
		name: "a Service port without endpoints still gets its virtual server",
		svc:  service(),
		want: `
			-A -t 10.96.0.10:80 -s rr
			addr 10.96.0.10`,
	}, {
		name: "a ClusterIP Service without an allocated IP has nothing to serve",
		svc:  service(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil }),
		want: ``,
	}})
}

func ptr32(v int32) *int32 { return &v }

func TestWeights(t *testing.T) {
	runCases(t, []tcase{{
		name: "nil conditions mean ready",
		svc:  service(),
		slices: []*discoveryv1.EndpointSlice{v4(
			ep("10.0.1.1"),
			ep("10.0.1.2", cond(boolp(true), nil, nil)),
		)},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			  -r 10.0.1.2:8080 -m -w 1
			addr 10.96.0.10`,
	}, {
		name: "with a ready endpoint, serving terminating endpoints stay at weight 0",
		svc:  service(),
		slices: []*discoveryv1.EndpointSlice{v4(
			ep("10.0.1.1"),
			ep("10.0.1.2", servingTerminating),
			ep("10.0.1.3", goneTerminating), // not serving: left for the planner to drain
			ep("10.0.1.4", notReady),        // failing readiness: never a real server
		)},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			  -r 10.0.1.2:8080 -m -w 0
			addr 10.96.0.10`,
	}, {
		name: "without a ready endpoint, serving terminating endpoints get weight 1",
		svc:  service(),
		slices: []*discoveryv1.EndpointSlice{v4(
			ep("10.0.1.2", servingTerminating),
			ep("10.0.1.3", goneTerminating),
			ep("10.0.1.4", notReady),
		)},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.2:8080 -m -w 1
			addr 10.96.0.10`,
	}, {
		name: "nil serving takes the ready value: not ready and terminating is not serving",
		svc:  service(),
		slices: []*discoveryv1.EndpointSlice{v4(
			ep("10.0.1.1", cond(boolp(false), nil, boolp(true))),
			ep("10.0.1.2", cond(boolp(false), nil, nil)),
		)},
		want: `
			-A -t 10.96.0.10:80 -s rr
			addr 10.96.0.10`,
	}, {
		name: "the fallback is per family",
		svc:  service(clusterIPsOpt("10.96.0.10", "fd00:96::10")),
		slices: []*discoveryv1.EndpointSlice{
			v4(ep("10.0.1.1"), ep("10.0.1.2", servingTerminating)),
			slice("s6", discoveryv1.AddressTypeIPv6, nil, ep("fd00:10::2", servingTerminating)),
		},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			  -r 10.0.1.2:8080 -m -w 0
			-A -t [fd00:96::10]:80 -s rr
			  -r [fd00:10::2]:8080 -m -w 1
			addr 10.96.0.10
			addr fd00:96::10`,
	}})
}

func TestTrafficPolicies(t *testing.T) {
	np := portsOpt(svcPort("http", corev1.ProtocolTCP, 80, 30080))
	v4only := func(c *Config) { c.IPv6 = false }
	runCases(t, []tcase{{
		name: "externalTrafficPolicy Local: node port, external IP and LB IP use local endpoints, ClusterIP all",
		svc:  service(typeOpt(corev1.ServiceTypeLoadBalancer), np, externalLocal, externalIPsOpt("198.51.100.7"), ingressOpt("198.51.100.9")),
		cfg:  v4only,
		slices: []*discoveryv1.EndpointSlice{v4(
			ep("10.0.1.1", onNode("n1")),
			ep("10.0.2.1", onNode("n2")),
		)},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			  -r 10.0.2.1:8080 -m -w 1
			-A -t 192.168.1.10:30080 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			-A -t 198.51.100.7:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			-A -t 198.51.100.9:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			-A -f 1291596675 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			  -r 10.0.2.1:8080 -m -w 1
			addr 10.96.0.10
			addr 198.51.100.7
			addr 198.51.100.9`,
	}, {
		name:   "externalTrafficPolicy Local without a local endpoint: empty virtual server; local sources reach every endpoint by mark",
		svc:    service(typeOpt(corev1.ServiceTypeNodePort), np, externalLocal),
		cfg:    v4only,
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.2.1", onNode("n2")))},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.2.1:8080 -m -w 1
			-A -t 192.168.1.10:30080 -s rr
			-A -f 1291596675 -s rr
			  -r 10.0.2.1:8080 -m -w 1
			addr 10.96.0.10`,
	}, {
		name: "Local policy falls back to local serving terminating endpoints even when remote ones are ready",
		svc:  service(typeOpt(corev1.ServiceTypeNodePort), np, externalLocal),
		cfg:  v4only,
		slices: []*discoveryv1.EndpointSlice{v4(
			ep("10.0.1.1", onNode("n1"), servingTerminating),
			ep("10.0.2.1", onNode("n2")),
		)},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 0
			  -r 10.0.2.1:8080 -m -w 1
			-A -t 192.168.1.10:30080 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			-A -f 1291596675 -s rr
			  -r 10.0.1.1:8080 -m -w 0
			  -r 10.0.2.1:8080 -m -w 1
			addr 10.96.0.10`,
	}, {
		name: "internalTrafficPolicy Local: ClusterIP uses local endpoints, external IPs all",
		svc:  service(internalLocal, externalIPsOpt("198.51.100.7")),
		slices: []*discoveryv1.EndpointSlice{v4(
			ep("10.0.1.1", onNode("n1")),
			ep("10.0.2.1", onNode("n2")),
			ep("10.0.3.1"), // no node name: never local
		)},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			-A -t 198.51.100.7:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			  -r 10.0.2.1:8080 -m -w 1
			  -r 10.0.3.1:8080 -m -w 1
			addr 10.96.0.10
			addr 198.51.100.7`,
	}, {
		name:   "internalTrafficPolicy Local without a local endpoint: empty virtual server",
		svc:    service(internalLocal),
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.2.1", onNode("n2")))},
		want: `
			-A -t 10.96.0.10:80 -s rr
			addr 10.96.0.10`,
	}, {
		name:   "Local policy on an agent without a node name matches nothing",
		svc:    service(internalLocal),
		cfg:    func(c *Config) { c.NodeName = "" },
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.1.1"))},
		want: `
			-A -t 10.96.0.10:80 -s rr
			addr 10.96.0.10`,
	}, {
		name: "a local copy of a duplicated endpoint counts as local",
		svc:  service(internalLocal),
		slices: []*discoveryv1.EndpointSlice{
			slice("a", discoveryv1.AddressTypeIPv4, nil, ep("10.0.1.1")),
			slice("b", discoveryv1.AddressTypeIPv4, nil, ep("10.0.1.1", onNode("n1"))),
		},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			addr 10.96.0.10`,
	}, {
		name: "a ready copy of a duplicated endpoint wins over a terminating one listed first",
		svc:  service(),
		slices: []*discoveryv1.EndpointSlice{
			slice("a", discoveryv1.AddressTypeIPv4, nil, ep("10.0.1.1", servingTerminating), ep("10.0.1.2")),
			slice("b", discoveryv1.AddressTypeIPv4, nil, ep("10.0.1.1")),
		},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			  -r 10.0.1.2:8080 -m -w 1
			addr 10.96.0.10`,
	}, {
		name: "a ready copy of a duplicated endpoint wins over a terminating one listed after",
		svc:  service(),
		slices: []*discoveryv1.EndpointSlice{
			slice("a", discoveryv1.AddressTypeIPv4, nil, ep("10.0.1.1"), ep("10.0.1.2")),
			slice("b", discoveryv1.AddressTypeIPv4, nil, ep("10.0.1.1", servingTerminating)),
		},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			  -r 10.0.1.2:8080 -m -w 1
			addr 10.96.0.10`,
	}})
}

func TestTopology(t *testing.T) {
	// Three ready endpoints: one on this node (n1, zone z1), one elsewhere in
	// z1, one in z2; hints as the EndpointSlice controller would set them.
	zoned := func(extra ...discoveryv1.Endpoint) []*discoveryv1.EndpointSlice {
		return []*discoveryv1.EndpointSlice{v4(append([]discoveryv1.Endpoint{
			ep("10.0.1.1", onNode("n1"), zoneHints("z1")),
			ep("10.0.1.2", onNode("n2"), zoneHints("z1")),
			ep("10.0.2.1", onNode("n3"), zoneHints("z2")),
		}, extra...)...)}
	}
	sameZone := `
		-A -t 10.96.0.10:80 -s rr
		  -r 10.0.1.1:8080 -m -w 1
		  -r 10.0.1.2:8080 -m -w 1
		addr 10.96.0.10`
	all := `
		-A -t 10.96.0.10:80 -s rr
		  -r 10.0.1.1:8080 -m -w 1
		  -r 10.0.1.2:8080 -m -w 1
		  -r 10.0.2.1:8080 -m -w 1
		addr 10.96.0.10`
	noZoneLabel := testNode()
	noZoneLabel.Labels = nil
	runCases(t, []tcase{{
		name:   "PreferClose: zone hints",
		svc:    service(distributionOpt(corev1.ServiceTrafficDistributionPreferClose)),
		slices: zoned(),
		want:   sameZone,
	}, {
		name:   "PreferSameZone: zone hints",
		svc:    service(distributionOpt(corev1.ServiceTrafficDistributionPreferSameZone)),
		slices: zoned(),
		want:   sameZone,
	}, {
		name:   "topology-mode Auto annotation: zone hints",
		svc:    service(annotationOpt(corev1.AnnotationTopologyMode, "Auto")),
		slices: zoned(),
		want:   sameZone,
	}, {
		name:   "deprecated topology-aware-hints annotation: zone hints",
		svc:    service(annotationOpt(corev1.DeprecatedAnnotationTopologyAwareHints, "auto")),
		slices: zoned(),
		want:   sameZone,
	}, {
		name:   "hints are honoured whenever present, as kube-proxy does",
		svc:    service(),
		slices: zoned(),
		want:   sameZone,
	}, {
		name: "PreferSameNode: node hints",
		svc:  service(distributionOpt(corev1.ServiceTrafficDistributionPreferSameNode)),
		slices: []*discoveryv1.EndpointSlice{v4(
			ep("10.0.1.1", onNode("n1"), nodeHints("n1"), zoneHints("z1")),
			ep("10.0.1.2", onNode("n2"), nodeHints("n2"), zoneHints("z1")),
			ep("10.0.2.1", onNode("n3"), nodeHints("n3"), zoneHints("z2")),
		)},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			addr 10.96.0.10`,
	}, {
		name: "PreferSameNode with no endpoint hinted for this node falls back to zone hints",
		svc:  service(distributionOpt(corev1.ServiceTrafficDistributionPreferSameNode)),
		slices: []*discoveryv1.EndpointSlice{v4(
			ep("10.0.1.2", onNode("n2"), nodeHints("n2"), zoneHints("z1")),
			ep("10.0.1.3", onNode("n4"), nodeHints("n4"), zoneHints("z1")),
			ep("10.0.2.1", onNode("n3"), nodeHints("n3"), zoneHints("z2")),
		)},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.2:8080 -m -w 1
			  -r 10.0.1.3:8080 -m -w 1
			addr 10.96.0.10`,
	}, {
		name: "PreferSameNode with incomplete node hints falls back to zone hints",
		svc:  service(distributionOpt(corev1.ServiceTrafficDistributionPreferSameNode)),
		slices: []*discoveryv1.EndpointSlice{v4(
			ep("10.0.1.1", onNode("n1"), nodeHints("n1"), zoneHints("z1")),
			ep("10.0.1.2", onNode("n2"), zoneHints("z1")),
			ep("10.0.2.1", onNode("n3"), nodeHints("n3"), zoneHints("z2")),
		)},
		want: sameZone,
	}, {
		name: "PreferSameNode with neither usable node nor zone hints: all endpoints",
		svc:  service(distributionOpt(corev1.ServiceTrafficDistributionPreferSameNode)),
		slices: []*discoveryv1.EndpointSlice{v4(
			ep("10.0.1.1", onNode("n1"), nodeHints("n1")),
			ep("10.0.1.2", onNode("n2")),
			ep("10.0.2.1", onNode("n3"), nodeHints("n3")),
		)},
		want: all,
	}, {
		name:   "a ready endpoint without a zone hint: all endpoints",
		svc:    service(distributionOpt(corev1.ServiceTrafficDistributionPreferClose)),
		slices: zoned(ep("10.0.3.1", onNode("n5"))),
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			  -r 10.0.1.2:8080 -m -w 1
			  -r 10.0.2.1:8080 -m -w 1
			  -r 10.0.3.1:8080 -m -w 1
			addr 10.96.0.10`,
	}, {
		name:   "a not-ready endpoint without a hint does not disable topology",
		svc:    service(distributionOpt(corev1.ServiceTrafficDistributionPreferClose)),
		slices: zoned(ep("10.0.3.1", onNode("n5"), notReady)),
		want:   sameZone,
	}, {
		name: "no endpoint hinted for this node's zone: all endpoints",
		svc:  service(distributionOpt(corev1.ServiceTrafficDistributionPreferClose)),
		slices: []*discoveryv1.EndpointSlice{v4(
			ep("10.0.1.1", onNode("n1"), zoneHints("z3")),
			ep("10.0.1.2", onNode("n2"), zoneHints("z3")),
			ep("10.0.2.1", onNode("n3"), zoneHints("z2")),
		)},
		want: all,
	}, {
		name:   "node without a zone label: all endpoints",
		svc:    service(distributionOpt(corev1.ServiceTrafficDistributionPreferClose)),
		node:   noZoneLabel,
		slices: zoned(),
		want:   all,
	}, {
		name:   "no Node object: all endpoints",
		svc:    service(distributionOpt(corev1.ServiceTrafficDistributionPreferClose)),
		noNode: true,
		slices: zoned(),
		want:   all,
	}, {
		name: "terminating endpoints outside the zone are not kept at weight 0",
		svc:  service(distributionOpt(corev1.ServiceTrafficDistributionPreferClose)),
		slices: zoned(
			ep("10.0.1.9", onNode("n2"), zoneHints("z1"), servingTerminating),
			ep("10.0.2.9", onNode("n3"), zoneHints("z2"), servingTerminating),
		),
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			  -r 10.0.1.2:8080 -m -w 1
			  -r 10.0.1.9:8080 -m -w 0
			addr 10.96.0.10`,
	}, {
		name: "no ready endpoint: serving terminating endpoints of every zone",
		svc:  service(distributionOpt(corev1.ServiceTrafficDistributionPreferClose)),
		slices: []*discoveryv1.EndpointSlice{v4(
			ep("10.0.1.9", onNode("n2"), zoneHints("z1"), servingTerminating),
			ep("10.0.2.9", onNode("n3"), zoneHints("z2"), servingTerminating),
		)},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.9:8080 -m -w 1
			  -r 10.0.2.9:8080 -m -w 1
			addr 10.96.0.10`,
	}, {
		name:   "Local policy ignores topology; Cluster frontends of the same Service use it",
		svc:    service(typeOpt(corev1.ServiceTypeNodePort), portsOpt(svcPort("http", corev1.ProtocolTCP, 80, 30080)), internalLocal),
		cfg:    func(c *Config) { c.IPv6 = false },
		slices: zoned(ep("10.0.2.2", onNode("n1"), zoneHints("z2"))),
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			  -r 10.0.2.2:8080 -m -w 1
			-A -t 192.168.1.10:30080 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			  -r 10.0.1.2:8080 -m -w 1
			addr 10.96.0.10`,
	}})
}

func TestOptions(t *testing.T) {
	sched := func(s string) svcOpt { return annotationOpt(AnnotationScheduler, s) }
	flags := func(s string) svcOpt { return annotationOpt(AnnotationSchedulerFlags, s) }
	runCases(t, []tcase{{
		name: "--scheduler applies to every virtual server",
		svc:  service(externalIPsOpt("198.51.100.7")),
		cfg:  func(c *Config) { c.Scheduler = "wlc" },
		want: `
			-A -t 10.96.0.10:80 -s wlc
			-A -t 198.51.100.7:80 -s wlc
			addr 10.96.0.10
			addr 198.51.100.7`,
	}, {
		name: "scheduler annotation overrides the flag",
		svc:  service(sched("lc")),
		want: `
			-A -t 10.96.0.10:80 -s lc
			addr 10.96.0.10`,
	}, {
		name: "sh flags",
		svc:  service(sched("sh"), flags("sh-fallback, sh-port")),
		want: `
			-A -t 10.96.0.10:80 -s sh -b sh-fallback,sh-port
			addr 10.96.0.10`,
	}, {
		name: "mh flags with mh from --scheduler",
		svc:  service(flags("mh-port")),
		cfg:  func(c *Config) { c.Scheduler = "mh" },
		want: `
			-A -t 10.96.0.10:80 -s mh -b mh-port
			addr 10.96.0.10`,
	}, {
		name: "empty flags annotation sets no flag",
		svc:  service(flags("")),
		want: `
			-A -t 10.96.0.10:80 -s rr
			addr 10.96.0.10`,
	}, {
		name: "ClientIP affinity: persistent with the default 3 hours",
		svc:  service(affinityOpt(0)),
		want: `
			-A -t 10.96.0.10:80 -s rr -p 10800
			addr 10.96.0.10`,
	}, {
		name: "ClientIP affinity with its timeout, and sh flags",
		svc:  service(affinityOpt(60), sched("sh"), flags("sh-port")),
		want: `
			-A -t 10.96.0.10:80 -s sh -p 60 -b sh-port
			addr 10.96.0.10`,
	}})
}

func TestErrors(t *testing.T) {
	cases := []struct {
		name  string
		svc   *corev1.Service
		cfg   func(*Config)
		wants []string // substrings of the error
	}{
		{"unknown scheduler annotation", service(annotationOpt(AnnotationScheduler, "fastest")),
			nil, []string{"default/web", AnnotationScheduler, `"fastest"`}},
		{"empty scheduler annotation", service(annotationOpt(AnnotationScheduler, "")),
			nil, []string{"default/web", `unknown scheduler ""`}},
		{"sh flag with rr", service(annotationOpt(AnnotationSchedulerFlags, "sh-port")),
			nil, []string{"default/web", AnnotationSchedulerFlags, `"sh-port" needs scheduler sh, not rr`}},
		{"mh flag with sh", service(annotationOpt(AnnotationScheduler, "sh", AnnotationSchedulerFlags, "mh-fallback")),
			nil, []string{`"mh-fallback" needs scheduler mh, not sh`}},
		{"sh flag with mh from --scheduler", service(annotationOpt(AnnotationSchedulerFlags, "sh-fallback")),
			func(c *Config) { c.Scheduler = "mh" }, []string{`"sh-fallback" needs scheduler sh, not mh`}},
		{"unknown flag", service(annotationOpt(AnnotationScheduler, "sh", AnnotationSchedulerFlags, "sh-fast")),
			nil, []string{`unknown flag "sh-fast"`}},
		{"drain timeout not a duration", service(annotationOpt(AnnotationDrainTimeout, "soon")),
			nil, []string{"default/web", AnnotationDrainTimeout, `"soon"`}},
		{"negative drain timeout", service(annotationOpt(AnnotationDrainTimeout, "-1s")),
			nil, []string{"default/web", AnnotationDrainTimeout, "must not be negative"}},
		{"every bad annotation is reported", service(annotationOpt(AnnotationScheduler, "x", AnnotationDrainTimeout, "y")),
			nil, []string{AnnotationScheduler, AnnotationDrainTimeout}},
		{"unknown protocol", service(portsOpt(svcPort("x", "ICMP", 1, 0))),
			nil, []string{"default/web", `port "x"`, `"ICMP"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			r := Service(tc.svc, []*discoveryv1.EndpointSlice{v4(ep("10.0.1.1"))}, testNode(), cfg)
			if r.Err == nil {
				t.Fatalf("no error; got:\n%s", render(r))
			}
			for _, w := range tc.wants {
				if !strings.Contains(r.Err.Error(), w) {
					t.Errorf("error %q does not mention %q", r.Err, w)
				}
			}
			if len(r.Services) != 0 || len(r.Addrs) != 0 || r.Skipped != "" {
				t.Errorf("an invalid Service must produce nothing, got Skipped=%q:\n%s", r.Skipped, render(r))
			}
		})
	}
}

func TestSkipped(t *testing.T) {
	cases := []struct {
		name      string
		svc       *corev1.Service
		proxyName string
		want      string // substring of Skipped
	}{
		{"headless", service(clusterIPsOpt(corev1.ClusterIPNone)), "", "headless"},
		{"ExternalName", service(typeOpt(corev1.ServiceTypeExternalName), func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.ExternalName = "", nil, "db.example.com"
		}), "", "ExternalName"},
		{"another proxy's Service", service(labelOpt(model.LabelServiceProxyName, "other")), "", `"other"`},
		{"another proxy's Service, with our own name set", service(labelOpt(model.LabelServiceProxyName, "other")), "kube-ipvs", `"other"`},
		{"empty proxy name label is still another proxy's", service(labelOpt(model.LabelServiceProxyName, "")), "kube-ipvs", model.LabelServiceProxyName},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.ServiceProxyName = tc.proxyName
			r := Service(tc.svc, []*discoveryv1.EndpointSlice{v4(ep("10.0.1.1"))}, testNode(), cfg)
			if !strings.Contains(r.Skipped, tc.want) {
				t.Errorf("Skipped = %q, want it to mention %q", r.Skipped, tc.want)
			}
			if r.Err != nil || len(r.Services) != 0 || len(r.Addrs) != 0 {
				t.Errorf("a skipped Service must produce nothing, got Err=%v:\n%s", r.Err, render(r))
			}
		})
	}
}

func TestServiceProxyName(t *testing.T) {
	ours := func(c *Config) { c.ServiceProxyName = "kube-ipvs" }
	foreign := v4(ep("10.0.9.9"))
	foreign.Name = "foreign"
	foreign.Labels[model.LabelServiceProxyName] = "other"
	runCases(t, []tcase{{
		name:   "a Service labelled with our proxy name is ours; another proxy's slice is ignored",
		svc:    service(labelOpt(model.LabelServiceProxyName, "kube-ipvs")),
		cfg:    ours,
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.1.1")), foreign},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			addr 10.96.0.10`,
	}, {
		name:   "an unlabelled Service is served whatever our proxy name",
		svc:    service(),
		cfg:    ours,
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.1.1"))},
		want: `
			-A -t 10.96.0.10:80 -s rr
			  -r 10.0.1.1:8080 -m -w 1
			addr 10.96.0.10`,
	}})
}

func TestDeletedService(t *testing.T) {
	r := Service(nil, []*discoveryv1.EndpointSlice{v4(ep("10.0.1.1"))}, testNode(), testConfig())
	if r.Err != nil || r.Skipped != "" || len(r.Services) != 0 || len(r.Addrs) != 0 || len(r.Meta) != 0 {
		t.Errorf("deleted Service: want an empty Result, got %+v", r)
	}
}
