package reconciler

import (
	"context"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// firstServices are served before any other Service when the agent
// starts: default/kubernetes is how the node's pods (and, in-cluster, its
// own agents) reach the API server, and a fresh node needs it while the
// start's whole plan (minutes of kernel work at tens of thousands of
// Services) is still ahead.
var firstServices = []model.ServiceName{{Namespace: "default", Name: "kubernetes"}}

// serveFirst brings the firstServices the store holds in step before the
// start's whole translation and plan, as an incremental sync of their own
// would: translated, planned in their scope against the kernel just read,
// applied. The whole plan that follows sees them done. A failure here is
// only logged: the whole plan holds whatever did not reach the kernel and
// tries it again, and reports it. It returns the operations it planned.
func (r *Reconciler) serveFirst(ctx context.Context, node *corev1.Node, now time.Time) int {
	start := time.Now() // the log's, not a measurement's
	var names []model.ServiceName
	for _, name := range firstServices {
		// A ClusterIP another Service lists too is decided by the whole
		// translation (the older one wins): served alone first, it would
		// flip to the other and back.
		if !r.opt.Store.ClusterIPShared(name) {
			names = append(names, name)
		}
	}
	cfg := r.translateConfig()
	r.node, r.nodePortAddrs = nodeStatus(node), translate.NodePortAddrs(node, cfg)
	scope := plan.NewScope()
	var served []model.ServiceName
	for i, t := range translateAll(r.opt.Store, names, node, cfg, r.memos) {
		if t.svc == nil || t.res.Err != nil {
			continue // absent, or failing: the whole plan says why
		}
		r.desired.replace(names[i], t.res, t.svc.CreationTimestamp.Time, scope)
		served = append(served, names[i])
	}
	if len(served) == 0 {
		return 0
	}
	r.reserved = r.reservedAddrs(node)
	desired, observed := r.scoped(scope, false)
	// The start's read has every real server's connections: one that left
	// drains as in any sync.
	r.drainKept(desired, observed, readNow(r.obs.Conn), now)
	passes, _ := r.passes(desired, observed, false) // refusals: the whole plan says them
	out := r.apply(ctx, passes, now)
	r.log.Info("served first", zap.Stringers("services", served), zap.Int("ops", out.planned),
		zap.Int("failed", out.failed), zap.Duration("took", time.Since(start)))
	return out.planned
}
