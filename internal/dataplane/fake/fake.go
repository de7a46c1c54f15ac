// Package fake is an in-memory kernel that implements dataplane.Dataplane.
// It behaves like the Linux IPVS and address code does (EEXIST, ENOENT and
// ESRCH become the dataplane errors; the kernel's hashed flag shows in dumps;
// the table survives the link's deletion) and it can be told to fail, so that
// the reconciler's tests can replay any state and any fault without root.
// It passes the same contract suite (dataplanetest) as the linux package.
package fake

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"sync"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// Kernel defaults of IPVS' timeouts (ipvsadm --timeout on a fresh kernel).
const (
	defaultTCPTimeout    = 900 * time.Second
	defaultTCPFinTimeout = 120 * time.Second
	defaultUDPTimeout    = 300 * time.Second
)

// Call describes one method call, for fault injection.
type Call struct {
	// Method is the Dataplane method's name, e.g. "AddReal".
	Method string
	// N counts the calls of Method, from 1 (this one included).
	N int
	// Arg is the call's subject: model.VirtualServer (Add/UpdateService),
	// model.VSKey (DeleteService, Conns), dataplane.RealRef (Add/Update/
	// DeleteReal), netip.Addr (Add/DeleteAddr), dataplane.Timeouts,
	// ConntrackKey (FlushConntrack), or nil.
	Arg any
}

// ConntrackKey names the conntrack entries FlushConntrack deletes.
type ConntrackKey struct {
	Proto model.Protocol
	Real  netip.AddrPort
}

// Fake is the in-memory kernel. Its methods are safe for concurrent use
// (the interface does not require it, but test helpers may poke at it from
// another goroutine).
type Fake struct {
	mu sync.Mutex

	services map[model.VSKey]*model.Service
	conns    map[dataplane.RealRef]model.Conns
	link     bool
	addrs    map[netip.Addr]struct{}
	sysctls  map[string]string
	timeouts dataplane.Timeouts
	// conntrack counts live entries per (proto, real); flushes lists every
	// FlushConntrack call in order.
	conntrack map[ConntrackKey]int
	flushes   []ConntrackKey
	closed    bool

	// The shim: the sets that exist with their members, the config the
	// rules were last written for (nil: no rules), how many times rules
	// were written, and kube-proxy's leftovers.
	sets          map[string]map[model.SetEntry]struct{}
	shimCfg       *shim.Config
	ruleWrites    int
	kubeProxyLeft bool
	// conntrackDest counts live entries per (proto, original destination).
	conntrackDest map[ConntrackKey]int
	flushesDest   []ConntrackKey

	calls      map[string]int
	log        []Call
	failNext   map[string][]error
	failWhen   func(Call) error
	observeErr error
}

var _ dataplane.Dataplane = (*Fake)(nil)

// New returns an empty kernel: no services, no link, default timeouts.
func New() *Fake {
	return &Fake{
		services:      map[model.VSKey]*model.Service{},
		conns:         map[dataplane.RealRef]model.Conns{},
		addrs:         map[netip.Addr]struct{}{},
		sysctls:       map[string]string{},
		timeouts:      dataplane.Timeouts{TCP: defaultTCPTimeout, TCPFin: defaultTCPFinTimeout, UDP: defaultUDPTimeout},
		conntrack:     map[ConntrackKey]int{},
		sets:          map[string]map[model.SetEntry]struct{}{},
		conntrackDest: map[ConntrackKey]int{},
		calls:         map[string]int{},
		failNext:      map[string][]error{},
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

// Init creates the link if missing and sets the sysctls, like linux.Init.
func (f *Fake) Init(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "Init", nil); err != nil {
		return err
	}
	f.link = true
	for _, k := range []string{"net/ipv4/vs/conntrack", "net/ipv4/vs/expire_nodest_conn",
		"net/ipv4/vs/expire_quiescent_template", "net/ipv4/ip_forward"} {
		f.sysctls[k] = "1"
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
		for a := range svc.Reals {
			ref := dataplane.RealRef{VS: k, RS: a}
			obs.Conns[ref] = f.conns[ref]
		}
	}
	maps.Copy(obs.State.Addrs, f.addrs)
	for _, members := range f.sets {
		maps.Copy(obs.State.Sets, members)
	}
	return obs, nil
}

// Conns reads the counters of one service's reals; ErrNotExist if the
// service is missing (the kernel's ESRCH).
func (f *Fake) Conns(ctx context.Context, vs model.VSKey) (map[netip.AddrPort]model.Conns, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "Conns", vs); err != nil {
		return nil, err
	}
	svc, ok := f.services[vs]
	if !ok {
		return nil, fmt.Errorf("read connections of %s: %w", vs, dataplane.ErrNotExist)
	}
	out := make(map[netip.AddrPort]model.Conns, len(svc.Reals))
	for a := range svc.Reals {
		out[a] = f.conns[dataplane.RealRef{VS: vs, RS: a}]
	}
	return out, nil
}

// checkService rejects what the kernel rejects in a service: a scheduler
// with no module (ENOENT there, ErrUnsupported here) and a protocol IPVS
// does not balance.
func checkService(vs model.VirtualServer) error {
	if !config.ValidScheduler(vs.Scheduler) {
		return fmt.Errorf("scheduler %q: no ip_vs_%s module: %w", vs.Scheduler, vs.Scheduler, dataplane.ErrUnsupported)
	}
	if vs.Key.FWMark == 0 {
		switch vs.Key.Proto {
		case model.TCP, model.UDP, model.SCTP:
		default:
			return fmt.Errorf("protocol %s: IPVS balances TCP, UDP and SCTP only", vs.Key.Proto)
		}
		if !vs.Key.Addr.IsValid() {
			return errors.New("virtual server without an address")
		}
	}
	return nil
}

// AddService creates a virtual server; ErrExist if its key is taken.
func (f *Fake) AddService(ctx context.Context, vs model.VirtualServer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "AddService", vs); err != nil {
		return err
	}
	if _, ok := f.services[vs.Key]; ok {
		return fmt.Errorf("add virtual server %s: %w", vs.Key, dataplane.ErrExist)
	}
	if err := checkService(vs); err != nil {
		return fmt.Errorf("add virtual server %s: %w", vs.Key, err)
	}
	vs.Flags &^= model.FlagHashed
	f.services[vs.Key] = &model.Service{VirtualServer: vs, Reals: map[netip.AddrPort]model.RealServer{}}
	return nil
}

// UpdateService overwrites scheduler, flags and timeout, keeping the reals.
func (f *Fake) UpdateService(ctx context.Context, vs model.VirtualServer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "UpdateService", vs); err != nil {
		return err
	}
	svc, ok := f.services[vs.Key]
	if !ok {
		return fmt.Errorf("update virtual server %s: %w", vs.Key, dataplane.ErrNotExist)
	}
	if err := checkService(vs); err != nil {
		return fmt.Errorf("update virtual server %s: %w", vs.Key, err)
	}
	vs.Flags &^= model.FlagHashed
	svc.VirtualServer = vs
	return nil
}

// DeleteService removes a virtual server and its reals.
func (f *Fake) DeleteService(ctx context.Context, key model.VSKey) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "DeleteService", key); err != nil {
		return err
	}
	svc, ok := f.services[key]
	if !ok {
		return fmt.Errorf("delete virtual server %s: %w", key, dataplane.ErrNotExist)
	}
	for a := range svc.Reals {
		delete(f.conns, dataplane.RealRef{VS: key, RS: a})
	}
	delete(f.services, key)
	return nil
}

// checkReal rejects what the kernel rejects in a destination (EINVAL).
func checkReal(rs model.RealServer) error {
	if rs.Weight < 0 {
		return fmt.Errorf("weight %d is negative", rs.Weight)
	}
	if !rs.Addr.Addr().IsValid() {
		return errors.New("real server without an address")
	}
	return nil
}

// AddReal adds a destination; ErrNotExist if the service is missing,
// ErrExist if the destination is already there.
func (f *Fake) AddReal(ctx context.Context, vs model.VSKey, rs model.RealServer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "AddReal", dataplane.RealRef{VS: vs, RS: rs.Addr}); err != nil {
		return err
	}
	svc, ok := f.services[vs]
	if !ok {
		return fmt.Errorf("add real server %s to %s: virtual server %w", rs.Addr, vs, dataplane.ErrNotExist)
	}
	if _, ok := svc.Reals[rs.Addr]; ok {
		return fmt.Errorf("add real server %s to %s: %w", rs.Addr, vs, dataplane.ErrExist)
	}
	if err := checkReal(rs); err != nil {
		return fmt.Errorf("add real server %s to %s: %w", rs.Addr, vs, err)
	}
	svc.Reals[rs.Addr] = rs
	return nil
}

// UpdateReal changes a destination's weight and forwarding.
func (f *Fake) UpdateReal(ctx context.Context, vs model.VSKey, rs model.RealServer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "UpdateReal", dataplane.RealRef{VS: vs, RS: rs.Addr}); err != nil {
		return err
	}
	svc, ok := f.services[vs]
	if !ok {
		return fmt.Errorf("update real server %s of %s: virtual server %w", rs.Addr, vs, dataplane.ErrNotExist)
	}
	if _, ok := svc.Reals[rs.Addr]; !ok {
		return fmt.Errorf("update real server %s of %s: %w", rs.Addr, vs, dataplane.ErrNotExist)
	}
	if err := checkReal(rs); err != nil {
		return fmt.Errorf("update real server %s of %s: %w", rs.Addr, vs, err)
	}
	svc.Reals[rs.Addr] = rs
	return nil
}

// DeleteReal removes a destination and forgets its counters.
func (f *Fake) DeleteReal(ctx context.Context, vs model.VSKey, rs netip.AddrPort) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ref := dataplane.RealRef{VS: vs, RS: rs}
	if err := f.begin(ctx, "DeleteReal", ref); err != nil {
		return err
	}
	svc, ok := f.services[vs]
	if !ok {
		return fmt.Errorf("delete real server %s of %s: virtual server %w", rs, vs, dataplane.ErrNotExist)
	}
	if _, ok := svc.Reals[rs]; !ok {
		return fmt.Errorf("delete real server %s of %s: %w", rs, vs, dataplane.ErrNotExist)
	}
	delete(svc.Reals, rs)
	delete(f.conns, ref)
	return nil
}

// AddAddr binds addr to the link; the link must exist (Init).
func (f *Fake) AddAddr(ctx context.Context, addr netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "AddAddr", addr); err != nil {
		return err
	}
	if !f.link {
		return fmt.Errorf("bind %s: link %s %w", addr, dataplane.LinkName, dataplane.ErrNotExist)
	}
	addr = addr.Unmap()
	if _, ok := f.addrs[addr]; ok {
		return fmt.Errorf("bind %s to %s: %w", addr, dataplane.LinkName, dataplane.ErrExist)
	}
	f.addrs[addr] = struct{}{}
	return nil
}

// DeleteAddr unbinds addr from the link.
func (f *Fake) DeleteAddr(ctx context.Context, addr netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "DeleteAddr", addr); err != nil {
		return err
	}
	addr = addr.Unmap()
	if !f.link {
		return fmt.Errorf("unbind %s: link %s %w", addr, dataplane.LinkName, dataplane.ErrNotExist)
	}
	if _, ok := f.addrs[addr]; !ok {
		return fmt.Errorf("unbind %s from %s: %w", addr, dataplane.LinkName, dataplane.ErrNotExist)
	}
	delete(f.addrs, addr)
	return nil
}

// SetTimeouts stores the non-zero timeouts; the kernel takes whole seconds.
func (f *Fake) SetTimeouts(ctx context.Context, t dataplane.Timeouts) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "SetTimeouts", t); err != nil {
		return err
	}
	for _, d := range []time.Duration{t.TCP, t.TCPFin, t.UDP} {
		if d < 0 {
			return fmt.Errorf("set IPVS timeouts: negative timeout %s", d)
		}
	}
	set := func(dst *time.Duration, v time.Duration) {
		if v != 0 {
			*dst = v.Truncate(time.Second)
		}
	}
	set(&f.timeouts.TCP, t.TCP)
	set(&f.timeouts.TCPFin, t.TCPFin)
	set(&f.timeouts.UDP, t.UDP)
	return nil
}

// FlushConntrack deletes the entries SetConntrack planted for (proto, real)
// and records the call.
func (f *Fake) FlushConntrack(ctx context.Context, proto model.Protocol, real netip.AddrPort) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := ConntrackKey{Proto: proto, Real: real}
	if err := f.begin(ctx, "FlushConntrack", k); err != nil {
		return 0, err
	}
	f.flushes = append(f.flushes, k)
	n := f.conntrack[k]
	delete(f.conntrack, k)
	return n, nil
}

// DeleteLink removes the link and every bound address; the IPVS table
// stays, as in the kernel. ErrNotExist if there is no link.
func (f *Fake) DeleteLink(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "DeleteLink", nil); err != nil {
		return err
	}
	if !f.link {
		return fmt.Errorf("delete link %s: %w", dataplane.LinkName, dataplane.ErrNotExist)
	}
	f.link = false
	clear(f.addrs)
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
