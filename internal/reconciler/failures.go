package reconciler

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
)

// maxJoined is how many errors a joined error spells out; the rest are
// counted. A sync of thousands of failing operations must log a line, not
// hundreds of kilobytes.
const maxJoined = 5

// Backoff of a Service whose operations failed: retried this soon, then
// twice as late after each further failure, up to the ceiling.
const (
	serviceRetryFirst = time.Second
	serviceRetryMax   = 5 * time.Minute
)

// outcome is what apply did: how many operations it tried and what failed,
// sorted into the failures of single Services and the ones that say the
// kernel or the agent itself is unusable.
type outcome struct {
	// planned counts the operations planned, attempted those tried.
	planned, attempted, failed int
	errs                       []error // every failure, in order
	// services are the Services whose operations failed, with their first
	// error; unowned counts failures no held Service claims (removals of
	// what is no longer wanted).
	services map[model.ServiceName]error
	unowned  int
	systemic []error
	// stale: a failure says the cached observed state may be wrong (the
	// kernel answered "exists" or "does not exist"), so the next sync must
	// re-read the kernel.
	stale bool
}

// fail records a failed operation of name (zero: no Service claims it).
func (o *outcome) fail(op plan.Op, err error, name model.ServiceName, owned bool) {
	o.failed++
	err = fmt.Errorf("%s: %w", op, err)
	o.errs = append(o.errs, err)
	switch {
	case systemic(err):
		o.systemic = append(o.systemic, err)
	case owned:
		if o.services == nil {
			o.services = map[model.ServiceName]error{}
		}
		if _, ok := o.services[name]; !ok {
			o.services[name] = err
		}
	default:
		o.unowned++
	}
	if errors.Is(err, dataplane.ErrExist) || errors.Is(err, dataplane.ErrNotExist) {
		o.stale = true
	}
}

// stopped records that cancellation left n of total operations untried.
func (o *outcome) stopped(n, total int, cause error) {
	o.systemic = append(o.systemic, fmt.Errorf("stopped with %d of %d operations not tried: %w", n, total, cause))
}

// err is the sync's error: nil unless a failure was systemic. Systemic
// are: an error that says the agent cannot talk to the kernel at all
// (cancelled or timed out, a closed socket, no permission), or every
// operation failing when they belong to more than one Service (one
// Service's operations all failing says nothing about the kernel; everyone's
// failing does). Any other failure is one Service's (a scheduler the
// kernel lacks, a value it refuses): it is reported on that Service and
// retried with backoff, and leaves the sync, and with it /healthz and the
// health-check ports, green.
func (o *outcome) err() error {
	if len(o.systemic) > 0 {
		return joinCapped(o.systemic)
	}
	if o.failed > 1 && o.failed == o.attempted && (len(o.services) > 1 || o.unowned > 0) {
		return fmt.Errorf("every operation failed: %w", joinCapped(o.errs))
	}
	return nil
}

// systemic tells whether an operation's error is about the agent's access
// to the kernel rather than about the one object it changed.
func systemic(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrClosed)
}

// joinCapped joins errors like errors.Join, spelling out the first
// maxJoined and counting the rest.
func joinCapped(errs []error) error {
	if len(errs) <= maxJoined {
		return errors.Join(errs...)
	}
	head := append(errs[:maxJoined:maxJoined], fmt.Errorf("and %d more", len(errs)-maxJoined))
	return errors.Join(head...)
}

// serviceOf names the Service an operation is for: the held Service whose
// frontend it changes. Removals of what no Service holds any more, hairpin
// members and addresses belong to none.
func (r *Reconciler) serviceOf(op plan.Op) (model.ServiceName, bool) {
	k := op.VS.Key
	switch op.Kind {
	case plan.AddSetEntry, plan.DeleteSetEntry:
		var ok bool
		if k, ok = plan.FrontendOf(op.Entry); !ok {
			return model.ServiceName{}, false
		}
	case plan.BindAddr, plan.UnbindAddr:
		return model.ServiceName{}, false
	}
	name, ok := r.desired.owner[k]
	return name, ok
}

// failure is a Service whose operations failed: its first error, how many
// syncs in a row failed it, and when it is retried.
type failure struct {
	err   error
	count int
	next  time.Time
}

// noteFailures marks the Services whose operations failed (log, Event once
// per distinct error, backoff), clears the ones in scope that now applied
// cleanly, and asks the runner back when the earliest retry is due.
func (r *Reconciler) noteFailures(st *Status, out outcome, tried map[model.ServiceName]struct{}) {
	for name := range tried {
		if _, failed := out.services[name]; failed {
			continue
		}
		if f, ok := r.failing[name]; ok {
			r.log.Info("service programmed after failures", zap.Stringer("service", name), zap.Int("failures", f.count))
			delete(r.failing, name)
		}
	}
	for name, err := range out.services {
		f := r.failing[name]
		if f == nil {
			f = &failure{}
			r.failing[name] = f
		}
		if f.err == nil || f.err.Error() != err.Error() {
			r.warn(name, "FailedToProgram", err)
		}
		f.err, f.count = err, f.count+1
		f.next = st.Time.Add(retryDelay(f.count))
	}
	if out.unowned > 0 && len(out.systemic) == 0 {
		// Not any Service's: a full sync re-reads the kernel and retries.
		r.log.Warn("operations failed", zap.Int("failed", out.unowned), zap.Error(joinCapped(out.errs)))
		r.needFull = true
	}
	if out.stale {
		r.needFull = true
	}
	st.Failing = len(r.failing)
	for _, f := range r.failing {
		if d := max(f.next.Sub(st.Time), time.Millisecond); st.Requeue == 0 || d < st.Requeue {
			st.Requeue = d
		}
	}
}

// retryDelay is the backoff after the nth failure in a row.
func retryDelay(n int) time.Duration {
	d := serviceRetryFirst
	for ; n > 1 && d < serviceRetryMax; n-- {
		d *= 2
	}
	return min(d, serviceRetryMax)
}

// dueRetries lists the failing Services whose retry is due at now.
func (r *Reconciler) dueRetries(now time.Time) []model.ServiceName {
	var out []model.ServiceName
	for name, f := range r.failing {
		if !now.Before(f.next) {
			out = append(out, name)
		}
	}
	return out
}
