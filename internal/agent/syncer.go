package agent

import (
	"context"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/reconciler"
)

// Listener follows the syncs: told when each begins, and when it ended,
// after it published its view (reconciler.View). The health tracker
// (health.Tracker) and the health-check ports (healthcheck.Server) are
// listeners. Called from the runner's goroutine; a listener must not block.
type Listener interface {
	SyncBegan()
	SyncEnded(err error)
}

// syncer is the runner's sync: the reconciler's, with its listeners told.
type syncer struct {
	rec       *reconciler.Reconciler
	listeners []Listener
}

func (s syncer) sync(ctx context.Context, full bool) (time.Duration, error) {
	for _, l := range s.listeners {
		l.SyncBegan()
	}
	st, err := s.rec.Sync(ctx, full)
	for _, l := range s.listeners {
		l.SyncEnded(err)
	}
	return st.Requeue, err
}
