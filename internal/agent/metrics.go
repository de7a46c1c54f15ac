package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/kube-ipvs/kube-ipvs/internal/health"
	"github.com/kube-ipvs/kube-ipvs/internal/metrics"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/objects"
)

// newMetrics builds the agent's registry as kube-proxy's: the Go runtime
// (every runtime metric, as component-base registers it) and process
// collectors, its build info, client-go's request metrics (installed as
// client-go's reporter), the change counters read from store, and the
// reconciler's metrics for the families served. Library code never touches
// the global registry.
func newMetrics(families model.Families, store *objects.Store, version string) (*prometheus.Registry, *metrics.Metrics, error) {
	reg := prometheus.NewRegistry()
	if err := errors.Join(
		reg.Register(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsAll))),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
		reg.Register(metrics.NewChanges(families, storeChanges(store))),
		metrics.RegisterBuildInfo(reg, metrics.BuildOf(version)),
	); err != nil {
		return nil, nil, fmt.Errorf("register runtime metrics: %w", err)
	}
	rc, err := metrics.NewRESTClient(reg)
	if err != nil {
		return nil, nil, err
	}
	rc.Install()
	m, err := metrics.New(reg, families)
	return reg, m, err
}

// registerCollectors registers the scrape-time collectors, which read the
// published view.
func registerCollectors(p debugPages, reg *prometheus.Registry) error {
	if err := reg.Register(metrics.NewTable(p.table)); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	return nil
}

// storeChanges reads the store's change counts for the metrics.
func storeChanges(store *objects.Store) func() metrics.Changes {
	return func() metrics.Changes {
		c := store.Counts()
		return metrics.Changes{Services: c.ServiceChanges, Slices: c.SliceChanges,
			ServicesPending: c.ServicesPending, SlicesPending: c.SlicesPending}
	}
}

// countAnswer counts a health answer in kube-proxy's
// kubeproxy_proxy_healthz_total or kubeproxy_proxy_livez_total.
func countAnswer(m *metrics.Metrics) func(path string, code int) {
	return func(path string, code int) {
		switch path {
		case health.PathHealthz:
			m.Healthz(code)
		case health.PathLivez:
			m.Livez(code)
		}
	}
}

// triggers are what asks the runner for a sync: the store's change
// notifications, each noted when it arrived (kube-proxy's
// last_queued_timestamp, which against the last sync's timestamp tells a
// stuck agent from an idle one, and the health tracker's queued change),
// and the rescan's repair cue.
func (a *agent) triggers(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	poke := func() {
		select {
		case out <- struct{}{}:
		default: // one pending trigger is enough: the runner coalesces
		}
	}
	changes, repairs := a.src.store.Notify(), a.rec.RescanWake()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-changes:
				a.m.Queued(time.Now())
				a.hz.Queued()
				poke()
			case <-repairs:
				poke()
			}
		}
	}()
	return out
}
