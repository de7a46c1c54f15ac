package reconciler

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/observed"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
)

// maxJoined is how many errors a joined error spells out; the rest are
// counted. A sync of thousands of failing operations must log a line, not
// hundreds of kilobytes.
const maxJoined = 5

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
	// removed is what the applied operations took out of the kernel.
	removed removed
}

// removed lists, in the order applied, what applied operations took out of
// the kernel, for the cleanup that follows an apply (conntrack): each real
// server removed, every real server of a virtual server deleted with it,
// and each set member removed. A zero member is a real server's entry.
type removed []gone

type gone struct {
	real   dataplane.RealRef
	member model.SetEntry
}

// note adds what op took out of the kernel, op being applied and cache
// the observed cache it is not yet folded into.
func (rm *removed) note(op model.Op, cache *observed.Cache) {
	if !op.Kind.Removes() {
		return
	}
	k := op.VS.Key
	switch {
	case op.Target() == model.TargetMember:
		*rm = append(*rm, gone{member: op.Entry})
	case op.Kind == model.DeleteReal:
		*rm = append(*rm, gone{real: dataplane.RealRef{VS: k, RS: op.RS.Addr}})
	case op.Kind == model.DeleteService:
		if svc, ok := cache.Service(k); ok {
			for _, rs := range svc.Reals.All() {
				*rm = append(*rm, gone{real: dataplane.RealRef{VS: k, RS: rs.Addr}})
			}
		}
	}
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
	if op.Kind.Removes() || op.Target() == model.TargetAddr {
		return model.ServiceName{}, false
	}
	k := op.VS.Key
	if op.Target() == model.TargetMember {
		var ok bool
		if k, ok = plan.FrontendOf(op.Entry); !ok {
			return model.ServiceName{}, false
		}
	}
	name, ok := r.desired.owner[k]
	return name, ok
}

// strayKey names what an operation no Service holds changes: an address
// (bind, unbind), a set member, or a virtual server (removals).
type strayKey struct {
	vs    model.VSKey
	addr  netip.Addr
	entry model.SetEntry
}

// strayOf is the strayKey of an operation.
func strayOf(op model.Op) strayKey {
	switch op.Target() {
	case model.TargetAddr:
		return strayKey{addr: op.Addr}
	case model.TargetMember:
		return strayKey{entry: op.Entry}
	}
	return strayKey{vs: op.VS.Key}
}
