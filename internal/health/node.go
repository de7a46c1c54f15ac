package health

import corev1 "k8s.io/api/core/v1"

// ToBeDeletedTaint is the taint the cluster autoscaler puts on a Node it
// is about to delete.
const ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// NodeEligible tells whether a Node may take load-balancer traffic, as
// kube-proxy's /healthz judges it: not once it is being deleted or the
// cluster autoscaler has tainted it for deletion (so that load balancers
// drain it first), and not when it is unknown (nil).
func NodeEligible(n *corev1.Node) bool {
	if n == nil || !n.DeletionTimestamp.IsZero() {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Key == ToBeDeletedTaint {
			return false
		}
	}
	return true
}
