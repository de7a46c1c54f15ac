package reconciler

import (
	"errors"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/metrics"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/snapshot"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// maxTriggers bounds the trigger times kept for one Service: a Service
// whose operations keep failing must not grow them with every slice update.
// The earliest are kept; they measure the longest wait.
const maxTriggers = 64

// syncMetrics feeds a reconciler's metrics (nil: none) and keeps what they
// are computed from across syncs: the Services that failed to translate
// (a gauge), the Services a Local traffic policy leaves without local
// endpoints (kube-proxy's gauge), and the trigger times of the slice
// changes taken in and not yet in the kernel (kube-proxy's network
// programming latency).
type syncMetrics struct {
	m        *metrics.Metrics
	invalid  map[model.ServiceName]struct{}
	noLocal  map[model.ServiceName]translate.NoLocal
	triggers map[model.ServiceName][]snapshot.Trigger
}

// took keeps the trigger times of the changes a sync took from the store.
func (s *syncMetrics) took(ts []snapshot.Trigger) {
	if len(ts) == 0 {
		return
	}
	if s.triggers == nil {
		s.triggers = map[model.ServiceName][]snapshot.Trigger{}
	}
	for _, t := range ts {
		if len(s.triggers[t.Service]) < maxTriggers {
			s.triggers[t.Service] = append(s.triggers[t.Service], t)
		}
	}
}

// translated notes the outcome of one Service's translation. A deleted
// Service translates to nothing without error, so it leaves the sets too.
// A Service that fails to translate keeps its last good state, so its
// no-local-endpoints mark stays; its pending changes will never be
// programmed as they are, so their trigger times are dropped.
func (s *syncMetrics) translated(name model.ServiceName, res translate.Result) {
	if res.Err != nil {
		if s.invalid == nil {
			s.invalid = map[model.ServiceName]struct{}{}
		}
		s.invalid[name] = struct{}{}
		delete(s.triggers, name)
		return
	}
	delete(s.invalid, name)
	if res.NoLocalEndpoints == (translate.NoLocal{}) {
		delete(s.noLocal, name)
		return
	}
	if s.noLocal == nil {
		s.noLocal = map[model.ServiceName]translate.NoLocal{}
	}
	s.noLocal[name] = res.NoLocalEndpoints
}

// programmed is called after a sync succeeded at now: every change taken
// in is in the kernel but those of the Services whose operations failed
// (retried with backoff; their trigger times wait for the retry that
// succeeds). It records their network programming latency and kube-proxy's
// no-local-endpoints gauges, which kube-proxy too sets after each
// successful sync.
func (s *syncMetrics) programmed(now time.Time, failing map[model.ServiceName]*failure) {
	for name, ts := range s.triggers {
		if _, ok := failing[name]; ok {
			continue
		}
		for _, t := range ts {
			s.m.NetworkProgrammed(t.IPv6, now.Sub(t.Time))
		}
		delete(s.triggers, name)
	}
	var n metrics.NoLocal
	for _, nl := range s.noLocal {
		for i, has := range [2]bool{nl.Internal.IPv4, nl.Internal.IPv6} {
			if has {
				n.Internal[i]++
			}
		}
		for i, has := range [2]bool{nl.External.IPv4, nl.External.IPv6} {
			if has {
				n.External[i]++
			}
		}
	}
	s.m.SetNoLocalEndpoints(n)
}

// shim counts a failed write of the netfilter shim's rules, by family.
func (s *syncMetrics) shim(err error) {
	var re *dataplane.RestoreError
	if errors.As(err, &re) {
		s.m.RestoreFailed(re.IPv6)
	}
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
	for k := model.AddService; k <= model.DeleteSetEntry; k++ {
		m.KnownOps(k.String())
	}
}
