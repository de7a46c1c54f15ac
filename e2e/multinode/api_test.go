package multinode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	zoneLabel      = "topology.kubernetes.io/zone"
	proxyNameLabel = "service.kubernetes.io/service-proxy-name"
	ns             = "default"
)

func newClient(kubeconfig string) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	// The VM's CPU is emulated: generous.
	cfg.Timeout = 30 * time.Second
	cfg.QPS, cfg.Burst = 50, 100
	return kubernetes.NewForConfig(cfg)
}

// applyRBAC creates the ServiceAccount, ClusterRole and ClusterRoleBinding
// of the shipped manifest: the agents' identity can do what they grant.
func applyRBAC(ctx context.Context, c kubernetes.Interface, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	n := 0
	for i, doc := range bytes.Split(data, []byte("\n---")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return fmt.Errorf("%s document %d: %w", path, i+1, err)
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = c.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		default:
			continue
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %T from %s: %w", obj, path, err)
		}
		n++
	}
	if n < 3 {
		return fmt.Errorf("%s: want a ServiceAccount, a ClusterRole and a ClusterRoleBinding, found %d of them", path, n)
	}
	return nil
}

// nodeObject is node i as the kubelet would register it: its address,
// hostname and zone labels, and its pod CIDR.
func nodeObject(n *node) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{
			"kubernetes.io/hostname": n.name, "kubernetes.io/os": "linux", zoneLabel: n.zone,
		}},
		Spec: corev1.NodeSpec{PodCIDR: podCIDR(n.i), PodCIDRs: []string{podCIDR(n.i)}},
	}
}

func createNode(ctx context.Context, c kubernetes.Interface, n *node) error {
	got, err := c.CoreV1().Nodes().Create(ctx, nodeObject(n), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create Node %s: %w", n.name, err)
	}
	got.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: nodeAddr(n.i)},
		{Type: corev1.NodeHostName, Address: n.name},
	}
	if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("set Node %s addresses: %w", n.name, err)
	}
	return nil
}

// svcSpec is what the test needs of a Service.
type svcSpec struct {
	name, clusterIP, app string
	typ                  corev1.ServiceType
	etpLocal, itpLocal   bool
	distribution         string
	proxyName            string
	tcpNodePort          int32 // 0: none
	udpNodePort          int32 // 0: no UDP port
	healthCheckNodePort  int32
	externalIPs          []string
}

func (s svcSpec) object() *corev1.Service {
	o := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: ns, Labels: map[string]string{}},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: s.clusterIP, Selector: map[string]string{"app": s.app},
			Ports: []corev1.ServicePort{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80,
				TargetPort: intstr.FromInt32(podTCPPort), NodePort: s.tcpNodePort}},
		},
	}
	if s.typ != "" {
		o.Spec.Type = s.typ
	}
	if s.udpNodePort != 0 || s.typ == "" {
		o.Spec.Ports = append(o.Spec.Ports, corev1.ServicePort{Name: "udp", Protocol: corev1.ProtocolUDP, Port: 53,
			TargetPort: intstr.FromInt32(podUDPPort), NodePort: s.udpNodePort})
	}
	o.Spec.ExternalIPs = s.externalIPs
	if s.etpLocal {
		o.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		o.Spec.HealthCheckNodePort = s.healthCheckNodePort
	}
	if s.itpLocal {
		p := corev1.ServiceInternalTrafficPolicyLocal
		o.Spec.InternalTrafficPolicy = &p
	}
	if s.distribution != "" {
		o.Spec.TrafficDistribution = &s.distribution
	}
	if s.proxyName != "" {
		o.Labels[proxyNameLabel] = s.proxyName
	}
	return o
}

// pod is one echo backend or client "pod": a namespace behind a node.
type pod struct {
	name, app, addr    string
	node               *node
	ready, terminating bool
	echo               *proc
}

// sliceFor is the EndpointSlice the EndpointSlice controller would write
// for svc from pods: one endpoint per pod with the app, its node and zone,
// and zone hints when the Service asks for a traffic distribution.
func sliceFor(s svcSpec, pods []*pod, svc *corev1.Service) *discoveryv1.EndpointSlice {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	tcpName, udpName := "tcp", "udp"
	tp, up := int32(podTCPPort), int32(podUDPPort)
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: s.name + "-1", Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: s.name, discoveryv1.LabelManagedBy: "cluster-e2e",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &tcpName, Protocol: &tcp, Port: &tp}},
	}
	if len(svc.Spec.Ports) > 1 {
		sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: &udpName, Protocol: &udp, Port: &up})
	}
	// The proxy-name label is copied to the slice, as the controller does.
	if v, ok := svc.Labels[proxyNameLabel]; ok {
		sl.Labels[proxyNameLabel] = v
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].name < pods[j].name })
	for _, p := range pods {
		if p.app != s.app {
			continue
		}
		// A terminating pod still runs and serves until it is gone.
		ready, serving, term := p.ready && !p.terminating, p.ready || p.terminating, p.terminating
		node, zone := p.node.name, p.node.zone
		ep := discoveryv1.Endpoint{
			Addresses:  []string{p.addr},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &term},
			NodeName:   &node, Zone: &zone,
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.name},
		}
		if s.distribution != "" {
			ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: zone}}}
		}
		sl.Endpoints = append(sl.Endpoints, ep)
	}
	return sl
}
