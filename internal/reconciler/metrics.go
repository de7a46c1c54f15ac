package reconciler

import (
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

// knownOps makes every operation kind show in the counters from the
// start, at zero, so a dashboard's rate() has a series before the first one.
func knownOps(m *metrics.Metrics) {
	for k := plan.AddService; k <= plan.DeleteSetEntry; k++ {
		m.KnownOps(k.String())
	}
}
