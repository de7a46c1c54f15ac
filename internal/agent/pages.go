package agent

import (
	"context"

	"github.com/kube-ipvs/kube-ipvs/internal/metrics"
	"github.com/kube-ipvs/kube-ipvs/internal/reconciler"
	"github.com/kube-ipvs/kube-ipvs/internal/status"
)

// debugPages answer the debug pages (status, diff), /healthz's Node
// eligibility and /metrics' table from what the reconciler published
// after its last sync. None of them takes a lock or waits for a sync (the
// runner alone calls Sync), so a sync stuck in the kernel never stalls
// them.
type debugPages struct {
	rec  *reconciler.Reconciler
	node string
}

// Status implements server.Inspector.
func (p debugPages) Status() status.Report { return status.Build(p.node, p.rec.View()) }

// Diff implements server.Inspector.
func (p debugPages) Diff(ctx context.Context) ([]string, error) {
	ops, err := p.rec.Diff(ctx)
	lines := make([]string, len(ops))
	for i, op := range ops {
		lines[i] = op.String()
	}
	return lines, err
}

// table counts the kernel table for a scrape.
func (p debugPages) table() metrics.Table { return p.rec.View().Table() }

// nodeEligible is /healthz's verdict on the Node, as of the last sync.
// From a cluster (needNode), an unknown Node is not eligible, as in
// kube-proxy; a manifest folder need not hold a Node, and without one the
// node is eligible.
func (p debugPages) nodeEligible(needNode bool) func() bool {
	return func() bool {
		n := p.rec.View().Node
		if !n.Seen {
			return !needNode
		}
		return n.Eligible
	}
}
