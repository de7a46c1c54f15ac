// Package fake is an in-memory kernel that implements dataplane.Dataplane.
// It behaves like the Linux IPVS and address code does (EEXIST, ENOENT and
// ESRCH become the dataplane errors; the kernel's hashed flag shows in dumps;
// the table survives the link's deletion) and it can be told to fail, so that
// the reconciler's tests can replay any state and any fault without root.
// It passes the same contract suite (dataplanetest) as the linux package,
// and is laid out the same way: one file per part of dataplane.Dataplane
// (ipvs.go, link.go, shim.go, conntrack.go); control.go is the test side.
package fake

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"sync"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// Call describes one method call, for fault injection.
type Call struct {
	// Method names the call: a Dataplane method ("Observe", "EnsureShim"),
	// or, for each operation Apply makes, the kernel request it is:
	// "AddService", "UpdateService", "DeleteService", "AddReal",
	// "UpdateReal", "DeleteReal", "AddAddr" (BindAddr), "DeleteAddr"
	// (UnbindAddr), "AddSetEntry", "DeleteSetEntry".
	Method string
	// N counts the calls of Method, from 1 (this one included).
	N int
	// Arg is the call's subject: model.VirtualServer (Add/UpdateService),
	// model.VSKey (DeleteService, Conns), dataplane.RealRef (Add/Update/
	// DeleteReal), netip.Addr (Add/DeleteAddr), dataplane.Timeouts,
	// dataplane.StaleFlows (ClearConntrack), or nil.
	Arg any
}

// Fake is the in-memory kernel. Its methods are safe for concurrent use
// (the interface does not require it, but test helpers may poke at it from
// another goroutine).
type Fake struct {
	mu sync.Mutex

	// IPVS (ipvs.go): the table, every real server's counters, timeouts.
	services map[model.VSKey]*model.Service
	conns    map[dataplane.RealRef]model.Conns
	timeouts dataplane.Timeouts

	// Link (link.go): whether it exists, its addresses, what Init set.
	link    bool
	addrs   map[netip.Addr]struct{}
	sysctls map[string]string
	// noIPv6: IPv6 is disabled on the link (SetIPv6Disabled).
	noIPv6 bool

	// Netfilter (shim.go): the sets that exist with their members, the
	// config the rules were last written for (nil: no rules), how many
	// times rules were written, and kube-proxy's leftovers.
	sets          map[string]*ipset
	shimCfg       *shim.Config
	ruleWrites    int
	kubeProxyLeft bool

	// Conntrack (conntrack.go): the live entries with how many of each,
	// and how many times each family's table was read (IPv4, IPv6).
	flows   map[ConntrackFlow]int
	ctDumps [2]int

	closed     bool
	calls      map[string]int
	log        []Call
	failNext   map[string][]error
	failWhen   func(Call) error
	observeErr error

	// watchers are Watch's reports (notify.go).
	watchers    map[int]func(dataplane.Event)
	nextWatcher int
}

var _ dataplane.Dataplane = (*Fake)(nil)

// New returns an empty kernel: no services, no link, default timeouts.
func New() *Fake {
	return &Fake{
		services: map[model.VSKey]*model.Service{},
		conns:    map[dataplane.RealRef]model.Conns{},
		addrs:    map[netip.Addr]struct{}{},
		sysctls:  map[string]string{},
		timeouts: dataplane.Timeouts{TCP: defaultTCPTimeout, TCPFin: defaultTCPFinTimeout, UDP: defaultUDPTimeout},
		flows:    map[ConntrackFlow]int{},
		sets:     map[string]*ipset{},
		calls:    map[string]int{},
		failNext: map[string][]error{},
	}
}

// begin records a call and decides whether it fails before touching state:
// a closed fake, a done context, a queued FailNext error or FailWhen.
// The caller holds f.mu.
func (f *Fake) begin(ctx context.Context, method string, arg any) error {
	f.calls[method]++
	c := Call{Method: method, N: f.calls[method], Arg: arg}
	f.log = append(f.log, c)
	if f.closed {
		return fmt.Errorf("%s: dataplane is closed", method)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	if q := f.failNext[method]; len(q) > 0 {
		f.failNext[method] = q[1:]
		return q[0]
	}
	if f.failWhen != nil {
		if err := f.failWhen(c); err != nil {
			return err
		}
	}
	return nil
}

// Observe returns a deep copy of the table, the link's addresses and every
// real server's counters. Flags carry model.FlagHashed as the kernel's do.
func (f *Fake) Observe(ctx context.Context) (dataplane.Observation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "Observe", nil); err != nil {
		return dataplane.Observation{}, err
	}
	if f.observeErr != nil {
		return dataplane.Observation{}, f.observeErr
	}
	obs := dataplane.Observation{State: model.NewState(), Conns: map[dataplane.RealRef]model.Conns{}}
	for k, svc := range f.services {
		c := svc.Clone()
		c.Flags |= model.FlagHashed
		obs.State.Services[k] = c
		for _, rs := range svc.Reals.All() {
			ref := dataplane.RealRef{VS: k, RS: rs.Addr}
			obs.Conns[ref] = f.conns[ref]
		}
	}
	maps.Copy(obs.State.Addrs, f.addrs)
	obs.State.Sets = f.members()
	return obs, nil
}

// Scan hands v what Observe returns but the counters, in no particular
// order but each virtual server before its real servers, as the kernel's
// read does. It fails as Observe does.
func (f *Fake) Scan(ctx context.Context, v dataplane.Visitor) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "Scan", nil); err != nil {
		return err
	}
	if f.observeErr != nil {
		return f.observeErr
	}
	for k, svc := range f.services {
		if v.Service != nil {
			vs := svc.VirtualServer
			vs.Flags |= model.FlagHashed
			v.Service(vs)
		}
		for _, rs := range svc.Reals.All() {
			if v.Real != nil {
				v.Real(k, rs)
			}
		}
	}
	for a := range f.addrs {
		if v.Addr != nil {
			v.Addr(a)
		}
	}
	for _, set := range f.sets {
		for e := range set.members {
			if v.Member != nil {
				v.Member(e)
			}
		}
	}
	return nil
}

// Close makes every later call fail, as a closed netlink socket would.
func (f *Fake) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["Close"]++
	f.closed = true
	return nil
}
