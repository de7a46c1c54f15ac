package source

import (
	"strings"
	"unique"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// The informers keep every Service, EndpointSlice and the Node for as long
// as they exist, and most of what the API server sends is never read here
// (managedFields, most annotations, status conditions). These
// transforms (cache.TransformFunc, run on each object before the informer
// caches it) keep only what the handlers, translate, the Events and the
// views read, so the caches and the Store (which shares their objects)
// hold that and nothing else: the agent's memory follows the table, not
// the objects' size. A field read later must
// be kept here, or it reads as empty: transform_test.go translates objects
// before and after, and any difference fails it.

// keptAnnotations are the Service annotations anything here reads.
var keptAnnotations = []string{corev1.AnnotationLoadBalancerSourceRangesKey}

// keptAnnotationPrefix is kube-ipvs' own annotations (translate.Annotation*).
const keptAnnotationPrefix = "kube-ipvs.io/"

// meta keeps what identifies an object and orders it (name, UID,
// resourceVersion, creationTimestamp, deletionTimestamp), and the labels
// and annotations whose keys keep says to keep.
func meta(m *metav1.ObjectMeta, keepLabel, keepAnnotation func(string) bool) {
	m.ManagedFields = nil
	m.OwnerReferences = nil
	m.Finalizers = nil
	m.GenerateName = ""
	m.Labels = only(m.Labels, keepLabel)
	m.Annotations = only(m.Annotations, keepAnnotation)
	m.Namespace = intern(m.Namespace)
}

// only returns the entries of m whose keys keep says to keep; nil when none.
func only(m map[string]string, keep func(string) bool) map[string]string {
	var out map[string]string
	for k, v := range m {
		if keep(k) {
			if out == nil {
				out = map[string]string{}
			}
			out[intern(k)] = v
		}
	}
	return out
}

// intern shares one copy of a string repeated across objects (namespaces,
// node and zone names, label keys): each decoded object has its own.
func intern(s string) string { return unique.Make(s).Value() }

func none(string) bool { return false }

// transformService trims a Service to what translate, the handlers'
// selector and the Events read: its spec, the ingress of its status, the
// proxy-name label, the source-ranges annotation and kube-ipvs' own.
func transformService(obj any) (any, error) {
	s, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil // a tombstone: left as it is
	}
	meta(&s.ObjectMeta, func(k string) bool { return k == model.LabelServiceProxyName }, func(k string) bool {
		return strings.HasPrefix(k, keptAnnotationPrefix) || k == keptAnnotations[0]
	})
	s.Spec.Selector = nil // the endpoint controller's business, not ours
	s.Status.Conditions = nil
	return s, nil
}

// transformSlice trims an EndpointSlice to what translate and the store
// read: its Service and proxy-name labels, the last-change trigger time
// (kube-proxy's network programming latency is measured from it), and per
// endpoint its addresses, conditions, node, zone, hints and the name of
// its pod.
func transformSlice(obj any) (any, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	meta(&s.ObjectMeta, func(k string) bool {
		return k == discoveryv1.LabelServiceName || k == model.LabelServiceProxyName || k == corev1.IsHeadlessService
	}, func(k string) bool { return k == corev1.EndpointsLastChangeTriggerTime })
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		ep.Hostname = nil
		ep.DeprecatedTopology = nil
		ep.NodeName = internPtr(ep.NodeName)
		ep.Zone = internPtr(ep.Zone)
		if ep.TargetRef != nil {
			ep.TargetRef = &corev1.ObjectReference{Kind: intern(ep.TargetRef.Kind), Name: ep.TargetRef.Name}
		}
	}
	return s, nil
}

func internPtr(p *string) *string {
	if p == nil {
		return nil
	}
	s := intern(*p)
	return &s
}

// transformNode trims this node's Node to its addresses, spec and the
// topology labels: the images, conditions and volumes a kubelet reports
// are large and never read.
func transformNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	meta(&n.ObjectMeta, func(k string) bool {
		return strings.HasPrefix(k, "topology.kubernetes.io/") || k == corev1.LabelHostname
	}, none)
	n.Status = corev1.NodeStatus{Addresses: n.Status.Addresses}
	return n, nil
}

// transformNodeAddrs trims any Node to its name, addresses and pod CIDRs:
// all the agent keeps of the Nodes other than its own, one small object
// per Node.
func transformNodeAddrs(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion},
		Spec:       corev1.NodeSpec{PodCIDR: n.Spec.PodCIDR, PodCIDRs: n.Spec.PodCIDRs},
		Status:     corev1.NodeStatus{Addresses: n.Status.Addresses},
	}, nil
}
