package reconciler

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
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
// sorted into the failures of single Services, of operations no Service
// holds, and the ones that say the kernel or the agent itself is unusable.
type outcome struct {
	// planned counts the operations planned, attempted those tried.
	planned, attempted, failed int
	errs                       []error // every failure, in order
	// services are the Services whose operations failed, with their first
	// error; strays the failed operations no held Service claims (hairpin
	// and VIPs members, binds, every removal), by
	// what they change.
	services map[model.ServiceName]error
	strays   map[strayKey]error
	systemic []error
	// stale: a failure says the cached observed state may be wrong (the
	// kernel answered "exists" or "does not exist"), so the next sync must
	// re-read the kernel.
	stale bool
}

// fail records a failed operation of name (zero: no Service claims it).
func (o *outcome) fail(op model.Op, err error, name model.ServiceName, owned bool) {
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
		if o.strays == nil {
			o.strays = map[strayKey]error{}
		}
		if k := strayOf(op); o.strays[k] == nil {
			o.strays[k] = err
		}
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
// (cancelled or timed out, a closed socket), and failed operations after
// which the kernel check fails too (see canary). An operation's own error,
// whatever its errno and however many Services share it, is that object's:
// a scheduler the kernel lacks, a value it refuses, an address of a family
// switched off (EACCES). It is reported on its Service and retried with
// backoff, and leaves the sync, and with it /healthz and the health-check
// ports, green.
func (o *outcome) err() error {
	if len(o.systemic) > 0 {
		return joinCapped(o.systemic)
	}
	return nil
}

// systemic tells whether an operation's error is about the agent's access
// to the kernel rather than about the one object it changed. A permission
// error is not: the kernel answers EACCES for one address of a family
// disabled on the link; a kernel refusing the agent everything is found
// by the canary.
func systemic(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) || errors.Is(err, fs.ErrClosed)
}

// canary decides, after operations failed for no systemic reason, whether
// the kernel refuses the agent as a whole: a cheap request every usable
// kernel answers (dataplane.Dataplane.Probe). Only its failure makes the
// sync fail; the count or the spread of the failures never does.
func (r *Reconciler) canary(ctx context.Context, out *outcome) {
	if out.failed == 0 || len(out.systemic) > 0 || ctx.Err() != nil {
		return
	}
	if err := r.opt.Dataplane.Probe(ctx); err != nil {
		out.systemic = append(out.systemic, fmt.Errorf("kernel check after %d failed operations: %w",
			out.failed, errors.Join(err, joinCapped(out.errs))))
	}
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
// frontend it creates or changes. Removals, hairpin members and addresses
// belong to none: a removal is of something no Service wants there any
// more (a frontend on an address that became reserved, say), so a failing
// Service's backoff never holds it (held, it would keep that address
// bound and guarded until the retry), and its own failure is retried as
// an operation of no Service, on its own key.
func (r *Reconciler) serviceOf(op model.Op) (model.ServiceName, bool) {
	k := op.VS.Key
	switch op.Kind {
	case model.DeleteReal, model.DeleteService, model.UnbindAddr, model.DeleteSetEntry:
		return model.ServiceName{}, false
	case model.AddSetEntry:
		var ok bool
		if k, ok = plan.FrontendOf(op.Entry); !ok {
			return model.ServiceName{}, false
		}
	case model.BindAddr:
		return model.ServiceName{}, false
	}
	name, ok := r.desired.owner[k]
	return name, ok
}

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

// strayKey names what an operation no Service holds changes: an address
// (bind, unbind), a set member, or a virtual server (removals).
type strayKey struct {
	vs    model.VSKey
	addr  netip.Addr
	entry model.SetEntry
}

// strayOf is the strayKey of an operation.
func strayOf(op model.Op) strayKey {
	switch op.Kind {
	case model.BindAddr, model.UnbindAddr:
		return strayKey{addr: op.Addr}
	case model.AddSetEntry, model.DeleteSetEntry:
		return strayKey{entry: op.Entry}
	}
	return strayKey{vs: op.VS.Key}
}

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
