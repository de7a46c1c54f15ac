package translate

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

func renderEntries(r Result) string {
	var b strings.Builder
	for _, e := range r.SetEntries {
		b.WriteString(e.String() + "\n")
	}
	return b.String()
}

func TestSetEntries(t *testing.T) {
	httpSlice := func(eps ...discoveryv1.Endpoint) []*discoveryv1.EndpointSlice {
		return []*discoveryv1.EndpointSlice{v4(eps...)}
	}
	lb := func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.Ports[0].NodePort = 30080
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
	}
	ranges := func(s *corev1.Service) {
		s.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24", " 203.0.113.7/32", "fd00::/8"}
	}
	tests := []struct {
		name   string
		svc    *corev1.Service
		slices []*discoveryv1.EndpointSlice
		want   string
	}{
		{
			name:   "ClusterIP with a local and a remote endpoint",
			svc:    service(),
			slices: httpSlice(ep("10.244.1.5", onNode("n1")), ep("10.244.2.7", onNode("n2"))),
			want: `KUBE-IPVS-CLUSTER-IP 10.96.0.10,tcp:80
KUBE-IPVS-FRONTENDS 10.96.0.10,tcp:80
KUBE-IPVS-LOOP-BACK 10.244.1.5,tcp:8080,10.244.1.5
KUBE-IPVS-VIPS 10.96.0.10
`,
		},
		{
			name:   "an endpoint that names no node is not local: no hairpin member (kube-proxy's IsLocal)",
			svc:    service(),
			slices: httpSlice(ep("10.244.1.5")),
			want:   "KUBE-IPVS-CLUSTER-IP 10.96.0.10,tcp:80\nKUBE-IPVS-FRONTENDS 10.96.0.10,tcp:80\nKUBE-IPVS-VIPS 10.96.0.10\n",
		},
		{
			name: "no endpoints: rejected",
			svc:  service(),
			want: "KUBE-IPVS-CLUSTER-IP 10.96.0.10,tcp:80\nKUBE-IPVS-FRONTENDS 10.96.0.10,tcp:80\nKUBE-IPVS-NO-ENDPOINTS 10.96.0.10,tcp:80\nKUBE-IPVS-VIPS 10.96.0.10\n",
		},
		{
			name:   "only terminating endpoints still listed at weight 0 count as none",
			svc:    service(),
			slices: httpSlice(ep("10.244.2.7", onNode("n2"), cond(boolp(false), boolp(false), boolp(true)))),
			want:   "KUBE-IPVS-CLUSTER-IP 10.96.0.10,tcp:80\nKUBE-IPVS-FRONTENDS 10.96.0.10,tcp:80\nKUBE-IPVS-NO-ENDPOINTS 10.96.0.10,tcp:80\nKUBE-IPVS-VIPS 10.96.0.10\n",
		},
		{
			name:   "LoadBalancer, Cluster policy, source ranges of its family",
			svc:    service(lb, ranges),
			slices: httpSlice(ep("10.244.2.7", onNode("n2"))),
			want: `KUBE-IPVS-CLUSTER-IP 10.96.0.10,tcp:80
KUBE-IPVS-EXTERNAL 192.0.2.10,tcp:80
KUBE-IPVS-EXTERNAL 192.168.1.10,tcp:30080
KUBE-IPVS-FRONTENDS 10.96.0.10,tcp:80
KUBE-IPVS-FRONTENDS 192.0.2.10,tcp:80
KUBE-IPVS-FRONTENDS 192.168.1.10,tcp:30080
KUBE-IPVS-LB-FW 192.0.2.10,tcp:80
KUBE-IPVS-LB-SOURCE-CIDR 192.0.2.10,tcp:80,198.51.100.0/24
KUBE-IPVS-LB-SOURCE-CIDR 192.0.2.10,tcp:80,203.0.113.7/32
KUBE-IPVS-VIPS 10.96.0.10
KUBE-IPVS-VIPS 192.0.2.10
KUBE-IPVS6-EXTERNAL fd00:1::10,tcp:30080
KUBE-IPVS6-FRONTENDS fd00:1::10,tcp:30080
KUBE-IPVS6-NO-ENDPOINTS fd00:1::10,tcp:30080
`,
		},
		{
			name:   "LoadBalancer, Local policy without a local endpoint: kept source, rejected",
			svc:    service(lb, externalLocal),
			slices: httpSlice(ep("10.244.2.7", onNode("n2"))),
			want: `KUBE-IPVS-CLUSTER-IP 10.96.0.10,tcp:80
KUBE-IPVS-FRONTENDS 10.96.0.10,tcp:80
KUBE-IPVS-FRONTENDS 192.0.2.10,tcp:80
KUBE-IPVS-FRONTENDS 192.168.1.10,tcp:30080
KUBE-IPVS-LOCAL-SOURCES 192.0.2.10,tcp:80 skbmark 0x4cfc3383
KUBE-IPVS-LOCAL-SOURCES 192.168.1.10,tcp:30080 skbmark 0x4cfc3383
KUBE-IPVS-NO-ENDPOINTS 192.0.2.10,tcp:80
KUBE-IPVS-NO-ENDPOINTS 192.168.1.10,tcp:30080
KUBE-IPVS-VIPS 10.96.0.10
KUBE-IPVS-VIPS 192.0.2.10
KUBE-IPVS6-FRONTENDS fd00:1::10,tcp:30080
KUBE-IPVS6-NO-ENDPOINTS fd00:1::10,tcp:30080
`,
		},
		{
			name: "external IP, UDP",
			svc: service(externalIPsOpt("192.0.2.20"), func(s *corev1.Service) {
				s.Spec.Ports[0].Protocol = corev1.ProtocolUDP
			}),
			slices: []*discoveryv1.EndpointSlice{slice("web-1", discoveryv1.AddressTypeIPv4,
				[]discoveryv1.EndpointPort{sport("http", corev1.ProtocolUDP, 5353)}, ep("10.244.1.5", onNode("n1")))},
			want: `KUBE-IPVS-CLUSTER-IP 10.96.0.10,udp:80
KUBE-IPVS-EXTERNAL 192.0.2.20,udp:80
KUBE-IPVS-FRONTENDS 10.96.0.10,udp:80
KUBE-IPVS-FRONTENDS 192.0.2.20,udp:80
KUBE-IPVS-LOOP-BACK 10.244.1.5,udp:5353,10.244.1.5
KUBE-IPVS-VIPS 10.96.0.10
KUBE-IPVS-VIPS 192.0.2.20
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Service(tt.svc, tt.slices, testNode(), testConfig())
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			if got := renderEntries(res); got != tt.want {
				t.Errorf("entries:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestHealthCheck(t *testing.T) {
	hc := func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.Ports[0].NodePort = 30080
		s.Spec.HealthCheckNodePort = 32000
	}
	tests := []struct {
		name   string
		svc    *corev1.Service
		slices []*discoveryv1.EndpointSlice
		want   *HealthCheck
	}{
		{"Cluster policy has none", service(hc), nil, nil},
		{"Local, no endpoints", service(hc, externalLocal), nil, &HealthCheck{Port: 32000, LocalEndpoints: 0}},
		{"Local, two local ready, one remote, one local not ready", service(hc, externalLocal),
			[]*discoveryv1.EndpointSlice{v4(ep("10.244.1.5", onNode("n1")), ep("10.244.1.6", onNode("n1")),
				ep("10.244.2.7", onNode("n2")), ep("10.244.1.9", onNode("n1"), cond(boolp(false), nil, nil)))},
			&HealthCheck{Port: 32000, LocalEndpoints: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Service(tt.svc, tt.slices, testNode(), testConfig()).HealthCheck
			if tt.want != nil {
				tt.want.Service.Namespace, tt.want.Service.Name = "default", "web"
			}
			if (got == nil) != (tt.want == nil) || got != nil && *got != *tt.want {
				t.Errorf("health check %+v, want %+v", got, tt.want)
			}
		})
	}
}
