package reconciler

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func node(ip string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}},
	}
}

// A new Node address moves every NodePort: the Node change re-translates
// all Services, and the old node address's virtual server is ours to remove.
func TestNodeChangeMovesNodePorts(t *testing.T) {
	r := newRig(t)
	r.store.SetNode(node("192.168.1.10"))
	web := service("web", "10.96.0.10", corev1.ProtocolTCP, 80)
	web.Spec.Type = corev1.ServiceTypeNodePort
	web.Spec.Ports[0].NodePort = 30080
	r.store.SetService(web)
	r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2")))
	r.sync(false)
	if !strings.Contains(r.fake.Dump(), "-A -t 192.168.1.10:30080 -s rr") {
		t.Fatalf("no NodePort on the node address:\n%s", r.fake.Dump())
	}
	r.store.SetNode(node("192.168.1.11"))
	st := r.sync(false)
	dump := r.fake.Dump()
	if !strings.Contains(dump, "-A -t 192.168.1.11:30080 -s rr") || strings.Contains(dump, "192.168.1.10:30080") || st.Services != 1 {
		t.Fatalf("after the node's address changed (services %d):\n%s", st.Services, dump)
	}
}

// The view carries what the last sync knew of the Node, for /healthz:
// unknown before one is seen, then eligible until the cluster autoscaler
// taints it for deletion, unknown again once it is gone.
func TestViewFollowsNodeEligibility(t *testing.T) {
	r := newRig(t)
	if got := r.rec.View().Node; got != (NodeStatus{}) {
		t.Fatalf("before any sync: %+v", got)
	}
	r.sync(false)
	if got := r.rec.View().Node; got != (NodeStatus{}) {
		t.Fatalf("no Node in the store: %+v", got)
	}
	n := node("192.168.1.10")
	r.store.SetNode(n)
	r.sync(false)
	if got := r.rec.View().Node; got != (NodeStatus{Seen: true, Eligible: true}) {
		t.Fatalf("a plain Node: %+v", got)
	}
	tainted := n.DeepCopy()
	tainted.Spec.Taints = []corev1.Taint{{Key: "ToBeDeletedByClusterAutoscaler", Effect: corev1.TaintEffectNoSchedule}}
	r.store.SetNode(tainted)
	before := r.rec.View().Node
	r.sync(false)
	if got := r.rec.View().Node; got != (NodeStatus{Seen: true, Eligible: false}) || before != (NodeStatus{Seen: true, Eligible: true}) {
		t.Fatalf("tainted for deletion: %+v (before the sync %+v)", got, before)
	}
	r.store.SetNode(nil)
	r.sync(false)
	if got := r.rec.View().Node; got != (NodeStatus{}) {
		t.Fatalf("Node gone: %+v", got)
	}
}
