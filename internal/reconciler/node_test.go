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

// A Node update that changes nothing translation reads (the kubelet's
// status heartbeat, volumes in use, another controller's annotation)
// translates no Service again; one of its addresses, pod CIDRs or topology
// labels does, as kube-proxy's node handlers act on those only.
func TestNodeUpdateTranslatesOnlyWhatItChanges(t *testing.T) {
	r := newRig(t)
	n := node("192.168.1.10")
	n.ResourceVersion = "1"
	r.store.SetNode(n)
	r.store.SetService(service("web", "10.96.0.10", corev1.ProtocolTCP, 80))
	r.sync(false)
	for _, tt := range []struct {
		name   string
		change func(n *corev1.Node)
		want   int
	}{
		{"kubelet status", func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
		}, 0},
		{"volumes in use", func(n *corev1.Node) { n.Status.VolumesInUse = []corev1.UniqueVolumeName{"kubernetes.io/csi/vol-1"} }, 0},
		{"annotation", func(n *corev1.Node) { n.Annotations = map[string]string{"example.com/owner": "team-a"} }, 0},
		{"tainted for deletion", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "ToBeDeletedByClusterAutoscaler", Effect: corev1.TaintEffectNoSchedule}}
		}, 0},
		{"zone", func(n *corev1.Node) { n.Labels = map[string]string{corev1.LabelTopologyZone: "zone-b"} }, 1},
		{"pod CIDRs", func(n *corev1.Node) { n.Spec.PodCIDRs = []string{"10.244.1.0/24"} }, 1},
		{"address", func(n *corev1.Node) { n.Status.Addresses[0].Address = "192.168.1.12" }, 1},
	} {
		n = n.DeepCopy()
		n.ResourceVersion += "1"
		tt.change(n)
		r.store.SetNode(n)
		if st := r.sync(false); st.Services != tt.want {
			t.Errorf("%s: %d Services translated, want %d", tt.name, st.Services, tt.want)
		}
	}
}
