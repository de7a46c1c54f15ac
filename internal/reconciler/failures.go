package reconciler

import (
	"errors"
	"net/netip"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// Backoff of a Service whose operations failed: retried this soon, then
// twice as late after each further failure, up to the ceiling.
const (
	serviceRetryFirst = time.Second
	serviceRetryMax   = 5 * time.Minute
)

// failure is a Service, or an operation no Service holds, whose
// operations failed: its first error, how many syncs in a row failed it,
// and when it is retried.
type failure struct {
	err   error
	count int
	next  time.Time
}

// due tells whether the failure's retry is due at now.
func (f *failure) due(now time.Time) bool { return !now.Before(f.next) }

// addTo puts what k names in scope, with the address it is on, so that
// an incremental sync plans its operation again; it returns that address
// (zero for a virtual server without one).
func (k strayKey) addTo(scope plan.Scope) netip.Addr {
	switch {
	case k.addr.IsValid():
		scope.Addrs[k.addr] = struct{}{}
		return k.addr
	case k.entry != model.SetEntry{}:
		scope.Sets[k.entry] = struct{}{}
		if fk, ok := plan.FrontendOf(k.entry); ok {
			scope.Keys[fk] = struct{}{}
		}
		scope.Addrs[k.entry.Addr()] = struct{}{}
		return k.entry.Addr()
	}
	scope.Keys[k.vs] = struct{}{}
	if k.vs.Addr.IsValid() {
		scope.Addrs[k.vs.Addr] = struct{}{}
	}
	return k.vs.Addr
}

// noteFailures marks the Services and the operations of no Service that
// failed (log, Event once per distinct error, backoff), clears the ones
// this sync tried again that now applied cleanly (or were no longer
// wanted), and asks the runner back when the earliest retry is due. A
// systemic failure is the kernel's, not theirs: the runner retries the
// whole sync, after a fresh read of the kernel.
func (r *Reconciler) noteFailures(st *Status, out outcome, tried map[model.ServiceName]struct{}) {
	if len(out.systemic) == 0 {
		r.noteServices(st.Time, out, tried)
		r.noteStrays(st.Time, out)
	}
	if out.stale {
		r.needFull = true
	}
	if slices.ContainsFunc(out.errs, func(err error) bool { return errors.Is(err, dataplane.ErrFull) }) {
		// A set too small for its members (an older agent's, or one
		// someone made again) is replaced when the shim is ensured: the
		// next sync ensures it before the retries are due.
		r.shimCfg = shim.Config{}
	}
	st.Failing = len(r.failing)
	for _, f := range r.failing {
		st.requeue(f.next)
	}
	for _, f := range r.strays {
		st.requeue(f.next)
	}
}

// requeue asks for a sync by next at the latest.
func (st *Status) requeue(next time.Time) { st.requeueIn(next.Sub(st.Time)) }

// requeueIn asks for another sync within d.
func (st *Status) requeueIn(d time.Duration) {
	d = max(d, time.Millisecond)
	if st.Requeue == 0 || d < st.Requeue {
		st.Requeue = d
	}
}

// noteServices is noteFailures for the Services.
func (r *Reconciler) noteServices(now time.Time, out outcome, tried map[model.ServiceName]struct{}) {
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
		f.next = now.Add(retryDelay(f.count))
	}
}

// noteStrays is noteFailures for the operations no Service holds: each is
// retried with backoff, as a Service is, by an incremental sync that puts
// it in scope (retryStrays); the kernel is not re-read for them.
func (r *Reconciler) noteStrays(now time.Time, out outcome) {
	cleared := 0
	for k, f := range r.strays {
		if _, failed := out.strays[k]; !failed && f.due(now) {
			delete(r.strays, k)
			cleared++
		}
	}
	if cleared > 0 {
		r.log.Info("operations of no Service applied after failures", zap.Int("applied", cleared), zap.Int("retrying", len(r.strays)))
	}
	var news []error // failures not logged before: one line for them all
	for k, err := range out.strays {
		f := r.strays[k]
		if f == nil {
			f = &failure{}
			r.strays[k] = f
		}
		if f.err == nil || f.err.Error() != err.Error() {
			news = append(news, err)
		}
		f.err, f.count = err, f.count+1
		f.next = now.Add(retryDelay(f.count))
	}
	if len(news) > 0 {
		r.log.Warn("operations of no Service failed", zap.Int("failed", len(news)), zap.Int("retrying", len(r.strays)), zap.Error(joinCapped(news)))
	}
}

// retryDelay is the backoff after the nth failure in a row.
func retryDelay(n int) time.Duration { return backoff(n, serviceRetryFirst, serviceRetryMax) }

// backoff is first after the first failure in a row, then twice as long
// after each further one, up to ceiling.
func backoff(n int, first, ceiling time.Duration) time.Duration {
	d := first
	for ; n > 1 && d < ceiling; n-- {
		d *= 2
	}
	return min(d, ceiling)
}

// dueRetries lists the failing Services whose retry is due at now.
func (r *Reconciler) dueRetries(now time.Time) []model.ServiceName {
	var out []model.ServiceName
	for name, f := range r.failing {
		if f.due(now) {
			out = append(out, name)
		}
	}
	return out
}

// backingOff lists the failing Services whose retry is not due at now and
// that did not change themselves: a sync that re-translates them anyway (a
// full one, or after a Node change) holds their operations back, so that
// their backoff holds whatever else syncs. A Service whose own object
// changed is tried at once: its owner may have fixed it.
func (r *Reconciler) backingOff(now time.Time, changed []model.ServiceName) map[model.ServiceName]bool {
	out := map[model.ServiceName]bool{}
	for name, f := range r.failing {
		if !f.due(now) {
			out[name] = true
		}
	}
	for _, name := range changed {
		delete(out, name)
	}
	return out
}

// widenRetries puts in an incremental sync's scope what the kernel holds
// on the addresses of the retries due: the failed operations of no Service
// whose retry is due, and the frontends of the failing Services retried
// (due). A retry's translation equals the one whose operations failed, so
// its own scope lacks what the kernel still holds and no translation
// names (a member to remove), and what the failure held back (apply's
// holdAddr and kept): the address's binding, its virtual servers and
// every set member on it.
func (r *Reconciler) widenRetries(now time.Time, scope plan.Scope, due []model.ServiceName) {
	addrs := map[netip.Addr]struct{}{}
	for k, f := range r.strays {
		if f.due(now) {
			if a := k.addTo(scope); a.IsValid() {
				addrs[a] = struct{}{}
			}
		}
	}
	for _, name := range due {
		res := r.desired.whole[name]
		for _, svc := range res.Services {
			if svc.Key.Addr.IsValid() {
				addrs[svc.Key.Addr] = struct{}{}
			}
		}
		for _, a := range res.Addrs {
			addrs[a] = struct{}{}
		}
	}
	if len(addrs) == 0 {
		return
	}
	for a := range addrs {
		scope.Addrs[a] = struct{}{}
	}
	on := func(a netip.Addr) bool { _, ok := addrs[a]; return ok }
	r.widenOn(scope, on, func(k model.VSKey) bool { return on(k.Addr) })
}

// errBackingOff is what a held-back operation counts as in the applier:
// failed, for what its failure holds back, without being sent.
var errBackingOff = errors.New("backing off until its retry is due")

// backsOff tells whether op belongs to a Service or is an operation of no
// Service whose retry is not due.
func (r *Reconciler) backsOff(op model.Op, now time.Time) bool {
	if name, ok := r.serviceOf(op); ok {
		return r.holding[name]
	}
	f, ok := r.strays[strayOf(op)]
	return ok && !f.due(now)
}
