package reconciler

import (
	"context"
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/metrics"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
)

// syncMetrics feeds a reconciler's metrics (nil: none) and remembers which
// Services failed to translate, whose count is a gauge.
type syncMetrics struct {
	m       *metrics.Metrics
	invalid map[model.ServiceName]struct{}
}

// translated notes the outcome of one Service's translation. A deleted
// Service translates to nothing without error, so it leaves the set too.
func (s *syncMetrics) translated(name model.ServiceName, err error) {
	if err == nil {
		delete(s.invalid, name)
		return
	}
	if s.invalid == nil {
		s.invalid = map[model.ServiceName]struct{}{}
	}
	s.invalid[name] = struct{}{}
}

// synced records a finished sync.
func (s *syncMetrics) synced(st Status) {
	s.m.ObserveSync(metrics.Sync{
		End:      st.Time.Add(st.Duration),
		Duration: st.Duration,
		Full:     st.Full,
		Failed:   st.Err != nil,
		Services: st.Services,
	})
}

// Table counts what the agent holds in the kernel now. It walks every
// virtual server, so it is meant for a metrics scrape, not for each sync;
// like Sync it must not run concurrently with other calls.
func (r *Reconciler) Table() metrics.Table {
	t := metrics.Table{
		BoundVIPs: len(r.observed.Addrs),
		Draining:  len(r.drains),
		Invalid:   len(r.metrics.invalid),
	}
	for k := range r.desired.state.Services {
		if have, ok := r.observed.Services[k]; ok {
			t.VirtualServers++
			t.RealServers += len(have.Reals)
		}
	}
	return t
}

// instrument wraps a dataplane so that every operation sent to the kernel
// is counted by kind and result, and deleted conntrack entries are summed.
// Counting at this boundary sees exactly what apply sends, held-back
// operations excluded, without touching apply's logic.
func instrument(dp dataplane.Dataplane, m *metrics.Metrics) dataplane.Dataplane {
	if m == nil {
		return dp
	}
	for k := plan.AddService; k <= plan.DeleteSetEntry; k++ {
		m.KnownOps(k.String())
	}
	return instrumented{Dataplane: dp, m: m}
}

type instrumented struct {
	dataplane.Dataplane
	m *metrics.Metrics
}

func (d instrumented) op(k plan.Kind, err error) error {
	d.m.Op(k.String(), err)
	return err
}

func (d instrumented) AddService(ctx context.Context, vs model.VirtualServer) error {
	return d.op(plan.AddService, d.Dataplane.AddService(ctx, vs))
}

func (d instrumented) UpdateService(ctx context.Context, vs model.VirtualServer) error {
	return d.op(plan.UpdateService, d.Dataplane.UpdateService(ctx, vs))
}

func (d instrumented) DeleteService(ctx context.Context, k model.VSKey) error {
	return d.op(plan.DeleteService, d.Dataplane.DeleteService(ctx, k))
}

func (d instrumented) AddReal(ctx context.Context, k model.VSKey, rs model.RealServer) error {
	return d.op(plan.AddReal, d.Dataplane.AddReal(ctx, k, rs))
}

func (d instrumented) UpdateReal(ctx context.Context, k model.VSKey, rs model.RealServer) error {
	return d.op(plan.UpdateReal, d.Dataplane.UpdateReal(ctx, k, rs))
}

func (d instrumented) DeleteReal(ctx context.Context, k model.VSKey, rs netip.AddrPort) error {
	return d.op(plan.DeleteReal, d.Dataplane.DeleteReal(ctx, k, rs))
}

func (d instrumented) AddAddr(ctx context.Context, a netip.Addr) error {
	return d.op(plan.BindAddr, d.Dataplane.AddAddr(ctx, a))
}

func (d instrumented) DeleteAddr(ctx context.Context, a netip.Addr) error {
	return d.op(plan.UnbindAddr, d.Dataplane.DeleteAddr(ctx, a))
}

func (d instrumented) AddSetEntry(ctx context.Context, e model.SetEntry) error {
	return d.op(plan.AddSetEntry, d.Dataplane.AddSetEntry(ctx, e))
}

func (d instrumented) DeleteSetEntry(ctx context.Context, e model.SetEntry) error {
	return d.op(plan.DeleteSetEntry, d.Dataplane.DeleteSetEntry(ctx, e))
}

func (d instrumented) FlushConntrack(ctx context.Context, p model.Protocol, rs netip.AddrPort) (int, error) {
	n, err := d.Dataplane.FlushConntrack(ctx, p, rs)
	d.m.ConntrackDeleted(n)
	return n, err
}

func (d instrumented) FlushConntrackDest(ctx context.Context, p model.Protocol, dst netip.AddrPort) (int, error) {
	n, err := d.Dataplane.FlushConntrackDest(ctx, p, dst)
	d.m.ConntrackDeleted(n)
	return n, err
}
