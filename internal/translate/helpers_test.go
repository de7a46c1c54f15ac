package translate

import (
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Builders keep the tables readable: a Service, slices and endpoints are
// written as a base plus the few fields a case is about.

func testConfig() Config {
	return Config{
		NodeName:          "n1",
		Scheduler:         "rr",
		NodePortAddresses: []string{NodePortPrimary},
		Families:          model.Families{IPv4: true, IPv6: true},
		DrainTimeout:      2 * time.Minute,
	}
}

func testNode() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{corev1.LabelTopologyZone: "z1"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeHostName, Address: "n1"},
			{Type: corev1.NodeExternalIP, Address: "203.0.113.5"},
			{Type: corev1.NodeInternalIP, Address: "192.168.1.10"},
			{Type: corev1.NodeInternalIP, Address: "192.168.1.11"},
			{Type: corev1.NodeInternalIP, Address: "fd00:1::10"},
		}},
	}
}

type svcOpt func(*corev1.Service)

// service is "default/web", type ClusterIP 10.96.0.10, port http 80/TCP.
func service(opts ...svcOpt) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  "10.96.0.10",
			ClusterIPs: []string{"10.96.0.10"},
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func clusterIPsOpt(ips ...string) svcOpt {
	return func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = ips[0], ips }
}

func portsOpt(ps ...corev1.ServicePort) svcOpt {
	return func(s *corev1.Service) { s.Spec.Ports = ps }
}

func svcPort(name string, proto corev1.Protocol, port, nodePort int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Protocol: proto, Port: port, NodePort: nodePort}
}

func typeOpt(t corev1.ServiceType) svcOpt { return func(s *corev1.Service) { s.Spec.Type = t } }

func externalIPsOpt(ips ...string) svcOpt {
	return func(s *corev1.Service) { s.Spec.ExternalIPs = ips }
}

func ingressOpt(ips ...string) svcOpt {
	return func(s *corev1.Service) {
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
	}
}

func annotationOpt(kv ...string) svcOpt {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		for i := 0; i < len(kv); i += 2 {
			s.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func labelOpt(k, v string) svcOpt {
	return func(s *corev1.Service) { s.Labels = map[string]string{k: v} }
}

func externalLocal(s *corev1.Service) {
	s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
}

func internalLocal(s *corev1.Service) {
	p := corev1.ServiceInternalTrafficPolicyLocal
	s.Spec.InternalTrafficPolicy = &p
}

func distributionOpt(d string) svcOpt {
	return func(s *corev1.Service) { s.Spec.TrafficDistribution = &d }
}

func affinityOpt(timeout int32) svcOpt {
	return func(s *corev1.Service) {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		if timeout > 0 {
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &timeout}}
		}
	}
}

// sport is an EndpointSlice port; proto "" leaves the protocol unset.
func sport(name string, proto corev1.Protocol, port int32) discoveryv1.EndpointPort {
	p := discoveryv1.EndpointPort{Name: &name, Port: &port}
	if proto != "" {
		p.Protocol = &proto
	}
	return p
}

// slice is an EndpointSlice of the given family with port http 8080/TCP
// unless ports are given.
func slice(name string, family discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	if ports == nil {
		ports = []discoveryv1.EndpointPort{sport("http", corev1.ProtocolTCP, 8080)}
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: family,
		Ports:       ports,
		Endpoints:   eps,
	}
}

func v4(eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return slice("web-v4", discoveryv1.AddressTypeIPv4, nil, eps...)
}

type epOpt func(*discoveryv1.Endpoint)

// ep is a ready endpoint (conditions left nil) on no node.
func ep(addr string, opts ...epOpt) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr}}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func boolp(b bool) *bool { return &b }

func onNode(n string) epOpt { return func(e *discoveryv1.Endpoint) { e.NodeName = &n } }

// cond sets the three conditions; nil leaves one unset.
func cond(ready, serving, terminating *bool) epOpt {
	return func(e *discoveryv1.Endpoint) {
		e.Conditions = discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating}
	}
}

var (
	notReady           = cond(boolp(false), boolp(false), boolp(false))
	servingTerminating = cond(boolp(false), boolp(true), boolp(true))
	goneTerminating    = cond(boolp(false), boolp(false), boolp(true))
)

func zoneHints(zones ...string) epOpt {
	return func(e *discoveryv1.Endpoint) {
		if e.Hints == nil {
			e.Hints = &discoveryv1.EndpointHints{}
		}
		for _, z := range zones {
			e.Hints.ForZones = append(e.Hints.ForZones, discoveryv1.ForZone{Name: z})
		}
	}
}

func nodeHints(nodes ...string) epOpt {
	return func(e *discoveryv1.Endpoint) {
		if e.Hints == nil {
			e.Hints = &discoveryv1.EndpointHints{}
		}
		for _, n := range nodes {
			e.Hints.ForNodes = append(e.Hints.ForNodes, discoveryv1.ForNode{Name: n})
		}
	}
}

// render prints a Result the way ipvsadm would add it: one "-A" line per
// virtual server, its real servers below, then the VIPs.
func render(r Result) string {
	var b strings.Builder
	for _, s := range r.Services {
		b.WriteString("-A " + s.VirtualServer.String() + "\n")
		for _, rs := range s.Reals.All() {
			b.WriteString("  " + rs.String() + "\n")
		}
	}
	for _, a := range r.Addrs {
		b.WriteString("addr " + a.String() + "\n")
	}
	return b.String()
}

// lines trims each line so that tables may indent their expectations.
func lines(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}
