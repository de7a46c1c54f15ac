package translate

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// TestNoLocalEndpoints follows kube-proxy's count of Services whose Local
// policy finds endpoints in the cluster but none on this node, per policy
// and family.
func TestNoLocalEndpoints(t *testing.T) {
	np := portsOpt(svcPort("http", corev1.ProtocolTCP, 80, 30080))
	v6Slice := func(eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return slice("web-v6", discoveryv1.AddressTypeIPv6, nil, eps...)
	}
	only4, only6, both := model.Families{IPv4: true}, model.Families{IPv6: true}, model.Families{IPv4: true, IPv6: true}
	for _, tc := range []struct {
		name   string
		svc    *corev1.Service
		slices []*discoveryv1.EndpointSlice
		want   NoLocal
	}{{
		name:   "Cluster policies never count",
		svc:    service(typeOpt(corev1.ServiceTypeNodePort), np),
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.2.1", onNode("n2")))},
	}, {
		name:   "internal Local, endpoints only elsewhere",
		svc:    service(internalLocal),
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.2.1", onNode("n2")))},
		want:   NoLocal{Internal: only4},
	}, {
		name:   "internal Local with a local endpoint",
		svc:    service(internalLocal),
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.1.1", onNode("n1")), ep("10.0.2.1", onNode("n2")))},
	}, {
		name:   "no usable endpoint anywhere: nothing to miss",
		svc:    service(internalLocal),
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.2.1", onNode("n2"), notReady), ep("10.0.2.2", onNode("n2"), goneTerminating))},
	}, {
		name:   "a serving terminating endpoint elsewhere is usable",
		svc:    service(internalLocal),
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.2.1", onNode("n2"), servingTerminating))},
		want:   NoLocal{Internal: only4},
	}, {
		name:   "a local serving terminating endpoint is local",
		svc:    service(internalLocal),
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.1.1", onNode("n1"), servingTerminating), ep("10.0.2.1", onNode("n2")))},
	}, {
		name:   "external Local counts for NodePorts; the ClusterIP follows Cluster",
		svc:    service(typeOpt(corev1.ServiceTypeNodePort), np, externalLocal),
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.2.1", onNode("n2")))},
		want:   NoLocal{External: only4},
	}, {
		name:   "both policies Local, by family",
		svc:    service(typeOpt(corev1.ServiceTypeNodePort), np, externalLocal, internalLocal, clusterIPsOpt("10.96.0.10", "fd00:96::10")),
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.1.1", onNode("n1"))), v6Slice(ep("fd00:10::2", onNode("n2")))},
		want:   NoLocal{Internal: only6, External: only6},
	}, {
		name:   "dual-stack, no local endpoint in either family",
		svc:    service(internalLocal, clusterIPsOpt("10.96.0.10", "fd00:96::10")),
		slices: []*discoveryv1.EndpointSlice{v4(ep("10.0.2.1", onNode("n2"))), v6Slice(ep("fd00:10::2", onNode("n2")))},
		want:   NoLocal{Internal: both},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			res := Service(tc.svc, tc.slices, testNode(), testConfig())
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			if res.NoLocalEndpoints != tc.want {
				t.Fatalf("no local endpoints %+v, want %+v\n%s", res.NoLocalEndpoints, tc.want, render(res))
			}
		})
	}
}
