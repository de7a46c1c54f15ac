package agent

import (
	"context"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/objects"
)

// NodeCIDR mode waits for the Node's pod CIDRs as kube-proxy does, and
// fails with kube-proxy's reasons when they never come.
func TestWaitPodCIDRs(t *testing.T) {
	ctx := context.Background()
	store := objects.NewStore()
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

// The node's name is --hostname-override, else $NODE_NAME, else the
// hostname, lower-cased and trimmed, as kube-proxy resolves it.
func TestNodeName(t *testing.T) {
	host, _ := os.Hostname()
	for _, tc := range []struct{ override, env, want string }{
		{" Node-A ", "node-b", "node-a"},
		{"", "Node-B", "node-b"},
		{"  ", "", strings.ToLower(host)},
	} {
		t.Setenv("NODE_NAME", tc.env)
		if got := NodeName(tc.override); got != tc.want {
			t.Errorf("override %q, NODE_NAME %q: %q, want %q", tc.override, tc.env, got, tc.want)
		}
	}
}

// NodePorts never listen on loopback nor on IPv6 link-local addresses, as
// in kube-proxy's IPVS mode.
func TestNodePortCandidate(t *testing.T) {
	for addr, want := range map[string]bool{
		"192.0.2.10": true, "2001:db8::10": true,
		"127.0.0.1": false, "::1": false, "fe80::1": false,
	} {
		if got := nodePortCandidate(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s: %v, want %v", addr, got, want)
		}
	}
}
