package main

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// The zone label is set and then removed, and nothing else of the Node
// changes: kube-proxy exits when its node's addresses change.
func TestSetZone(t *testing.T) {
	ctx := context.Background()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "vm", Labels: map[string]string{"kubernetes.io/hostname": "vm"}},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.2.15"}}},
	}
	cs := fake.NewClientset(node)
	c := newCluster(cs, 1, 1, "vm", 0)
	get := func() *corev1.Node {
		n, err := cs.CoreV1().Nodes().Get(ctx, "vm", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := c.setZone(ctx, "bench-full-sync"); err != nil {
		t.Fatal(err)
	}
	if n := get(); n.Labels[corev1.LabelTopologyZone] != "bench-full-sync" || n.Labels["kubernetes.io/hostname"] != "vm" || len(n.Status.Addresses) != 1 {
		t.Errorf("after setting: %v, %v", n.Labels, n.Status.Addresses)
	}
	if err := c.setZone(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if n := get(); len(n.Labels) != 1 || n.Labels["kubernetes.io/hostname"] != "vm" || len(n.Status.Addresses) != 1 {
		t.Errorf("after removing: %v, %v", n.Labels, n.Status.Addresses)
	}
}
