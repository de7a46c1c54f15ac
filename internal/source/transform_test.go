package source

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

func ptrTo[T any](v T) *T { return &v }

// richService uses every field translate reads, and carries what it
// does not (managedFields, foreign labels and annotations, conditions).
func richService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "shop", Name: "web", UID: "u-1", ResourceVersion: "7",
			CreationTimestamp: metav1.Time{Time: time.Unix(1_700_000_000, 0)},
			Labels:            map[string]string{"app": "web", model.LabelServiceProxyName: ""},
			Annotations: map[string]string{
				translate.AnnotationScheduler: "sh", translate.AnnotationSchedulerFlags: "sh-port",
				translate.AnnotationDrainTimeout: "30s", corev1.AnnotationLoadBalancerSourceRangesKey: "10.0.0.0/8",
				"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 500),
			},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}},
			OwnerReferences: []metav1.OwnerReference{{Kind: "Thing", Name: "x"}},
			Finalizers:      []string{"service.kubernetes.io/load-balancer-cleanup"},
		},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00::10"},
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			IPFamilyPolicy:        ptrTo(corev1.IPFamilyPolicyRequireDualStack),
			ExternalIPs:           []string{"192.0.2.50"},
			Selector:              map[string]string{"app": "web"},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: 31000,
			InternalTrafficPolicy: ptrTo(corev1.ServiceInternalTrafficPolicyCluster),
			SessionAffinity:       corev1.ServiceAffinityClientIP,
			SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptrTo(int32(600))}},
			TrafficDistribution:   ptrTo("PreferClose"),
			Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080},
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 30053},
			},
		},
		Status: corev1.ServiceStatus{
			LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{
				{IP: "198.51.100.7", IPMode: ptrTo(corev1.LoadBalancerIPModeVIP)}, {IP: "198.51.100.8", IPMode: ptrTo(corev1.LoadBalancerIPModeProxy)},
			}},
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}},
		},
	}
}

func richSlice() *discoveryv1.EndpointSlice {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "shop", Name: "web-abc", GenerateName: "web-", UID: "u-2", ResourceVersion: "8",
			Labels:        map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io", "app": "web"},
			Annotations:   map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2026-12-01T04:00:00Z"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptrTo("http"), Protocol: &tcp, Port: ptrTo(int32(8080))},
			{Name: ptrTo("dns"), Protocol: &udp, Port: ptrTo(int32(53))},
		},
	}
	for i, c := range []struct {
		addr, node, zone   string
		ready, terminating bool
	}{
		{"10.244.1.2", "node-a", "zone-a", true, false},
		{"10.244.2.2", "node-b", "zone-b", true, false},
		{"10.244.1.3", "node-a", "zone-a", false, true},
		{"10.244.3.2", "node-c", "zone-a", true, false},
	} {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{c.addr},
			Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(c.ready), Serving: ptrTo(true), Terminating: ptrTo(c.terminating)},
			NodeName:   ptrTo(c.node), Zone: ptrTo(c.zone), Hostname: ptrTo("h"),
			Hints:              &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: c.zone}}, ForNodes: []discoveryv1.ForNode{{Name: c.node}}},
			TargetRef:          &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "web-" + string(rune('a'+i)), UID: "p"},
			DeprecatedTopology: map[string]string{"kubernetes.io/hostname": c.node},
		})
	}
	return s
}

func richNode() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "n-1", ResourceVersion: "9",
			Labels:        map[string]string{corev1.LabelTopologyZone: "zone-a", corev1.LabelHostname: "node-a", "role": "worker"},
			Annotations:   map[string]string{"node.alpha.kubernetes.io/ttl": "0"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.1"}, {Type: corev1.NodeInternalIP, Address: "2001:db8::1"}},
			Images:    []corev1.ContainerImage{{Names: []string{"registry/image:tag"}, SizeBytes: 1}},
		},
	}
}

// TestTransformsKeepWhatTranslateReads: a Service, its slice and the Node
// translate to the same result, warnings included, before and after the
// informers' transforms, on several configurations; and what the
// transforms are for is gone.
func TestTransformsKeepWhatTranslateReads(t *testing.T) {
	for _, cfg := range []translate.Config{
		{NodeName: "node-a", Scheduler: "rr", Families: model.Families{IPv4: true, IPv6: true}, DrainTimeout: time.Minute,
			NodePortAddresses: []string{translate.NodePortPrimary}},
		{NodeName: "node-b", Scheduler: "wrr", Families: model.Families{IPv4: true}, DrainTimeout: time.Minute,
			NodePortAddresses: []string{"192.0.2.0/24"}, HostAddrs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}},
	} {
		before := translate.Service(richService(), []*discoveryv1.EndpointSlice{richSlice()}, richNode(), cfg)
		svc, slice, node := richService(), richSlice(), richNode()
		mustTransform(t, transformService, svc)
		mustTransform(t, transformSlice, slice)
		mustTransform(t, transformNode, node)
		after := translate.Service(svc, []*discoveryv1.EndpointSlice{slice}, node, cfg)
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("node %s: translation differs after the transforms:\nbefore %+v\nafter  %+v", cfg.NodeName, before, after)
		}
		if len(before.Services) == 0 || before.Err != nil {
			t.Fatalf("the fixture translates to nothing: %+v", before)
		}
		if svc.ManagedFields != nil || slice.ManagedFields != nil || node.ManagedFields != nil || len(node.Status.Images) != 0 ||
			len(svc.Annotations) != 4 || len(svc.Labels) != 1 || len(slice.Labels) != 1 || len(slice.Annotations) != 1 ||
			slice.Endpoints[0].DeprecatedTopology != nil || slice.Endpoints[0].TargetRef.UID != "" || svc.Spec.Selector != nil {
			t.Fatalf("left in place: %+v\n%+v\n%+v", svc.ObjectMeta, slice, node.ObjectMeta)
		}
	}
}

func mustTransform(t *testing.T, fn func(any) (any, error), obj any) {
	t.Helper()
	out, err := fn(obj)
	if err != nil || out != obj {
		t.Fatalf("transform: %v (same object: %v)", err, out == obj)
	}
}

// TestTransformKeepsTranslateAnnotations: every annotation translate reads
// is kept by the Service transform.
func TestTransformKeepsTranslateAnnotations(t *testing.T) {
	for _, a := range []string{translate.AnnotationScheduler, translate.AnnotationSchedulerFlags, translate.AnnotationDrainTimeout, corev1.AnnotationLoadBalancerSourceRangesKey} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{a: "v"}}}
		mustTransform(t, transformService, svc)
		if svc.Annotations[a] != "v" {
			t.Errorf("annotation %s dropped", a)
		}
	}
}

// TestTransformKeepsWhatHealthAndMetricsRead: the EndpointSlice's trigger
// time (network programming latency) and the Node's deletion and taints
// (/healthz's node eligibility) survive the transforms.
func TestTransformKeepsWhatHealthAndMetricsRead(t *testing.T) {
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		corev1.EndpointsLastChangeTriggerTime: "2026-12-01T00:00:00Z", "other": "x"}}}
	mustTransform(t, transformSlice, slice)
	if got := slice.Annotations; len(got) != 1 || got[corev1.EndpointsLastChangeTriggerTime] == "" {
		t.Errorf("slice annotations after the transform: %v, want only the trigger time", got)
	}
	now := metav1.Now()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "ToBeDeletedByClusterAutoscaler"}}}}
	mustTransform(t, transformNode, node)
	if node.DeletionTimestamp == nil || len(node.Spec.Taints) != 1 {
		t.Errorf("node after the transform: %+v %+v", node.ObjectMeta, node.Spec)
	}
}

// TestInformersCacheTrimmedObjects: what reaches the Store through the
// informers is trimmed.
func TestInformersCacheTrimmedObjects(t *testing.T) {
	_, store := startKubernetes(t, "")
	svc, slices := store.Service(model.ServiceName{Namespace: "default", Name: "web"})
	if svc == nil || len(slices) == 0 {
		t.Fatalf("web not in the store: %v %v", svc, slices)
	}
	if svc.ManagedFields != nil || slices[0].ManagedFields != nil || len(slices[0].Labels) != 1 {
		t.Fatalf("untrimmed: %+v %+v", svc.ObjectMeta, slices[0].ObjectMeta)
	}
	if n := store.Node(); n == nil || n.ManagedFields != nil {
		t.Fatalf("node: %+v", n)
	}
}
