package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/snapshot"
)

// NodeCIDR mode waits for the Node's pod CIDRs as kube-proxy does, and
// fails with kube-proxy's reasons when they never come.
func TestWaitPodCIDRs(t *testing.T) {
	ctx := context.Background()
	store := snapshot.NewStore()
	if err := waitPodCIDRs(ctx, store, "node-a", time.Millisecond, zap.NewNop()); err == nil || !strings.Contains(err.Error(), `timeout waiting for node "node-a" to exist`) {
		t.Errorf("no Node: %v", err)
	}
	store.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	if err := waitPodCIDRs(ctx, store, "node-a", time.Millisecond, zap.NewNop()); err == nil || !strings.Contains(err.Error(), `timeout waiting for PodCIDR allocation on node "node-a"`) {
		t.Errorf("no pod CIDRs: %v", err)
	}
	// Given later: the wait ends then (the timeout is only a backstop).
	done := make(chan error, 1)
	go func() { done <- waitPodCIDRs(ctx, store, "node-a", time.Hour, zap.NewNop()) }()
	store.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}}})
	if err := <-done; err != nil {
		t.Errorf("pod CIDRs given: %v", err)
	}
}
