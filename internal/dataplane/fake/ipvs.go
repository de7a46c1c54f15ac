package fake

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Kernel defaults of IPVS' timeouts (ipvsadm --timeout on a fresh kernel).
const (
	defaultTCPTimeout    = 900 * time.Second
	defaultTCPFinTimeout = 120 * time.Second
	defaultUDPTimeout    = 300 * time.Second
)

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
	out := make(map[netip.AddrPort]model.Conns, svc.Reals.Len())
	for _, rs := range svc.Reals.All() {
		out[rs.Addr] = f.conns[dataplane.RealRef{VS: vs, RS: rs.Addr}]
	}
	return out, nil
}

// checkService rejects what the kernel rejects in a service: a scheduler
// with no module (ENOENT there, ErrUnsupported here) and a protocol IPVS
// does not balance.
func checkService(vs model.VirtualServer) error {
	if !vs.Scheduler.Valid() {
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

// addService creates a virtual server; ErrExist if its key is taken.
func (f *Fake) addService(ctx context.Context, vs model.VirtualServer) error {
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
	f.services[vs.Key] = &model.Service{VirtualServer: vs}
	return nil
}

// updateService overwrites scheduler, flags and timeout, keeping the reals.
func (f *Fake) updateService(ctx context.Context, vs model.VirtualServer) error {
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

// deleteService removes a virtual server and its reals.
func (f *Fake) deleteService(ctx context.Context, key model.VSKey) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "DeleteService", key); err != nil {
		return err
	}
	svc, ok := f.services[key]
	if !ok {
		return fmt.Errorf("delete virtual server %s: %w", key, dataplane.ErrNotExist)
	}
	for _, rs := range svc.Reals.All() {
		delete(f.conns, dataplane.RealRef{VS: key, RS: rs.Addr})
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

// addReal adds a destination; ErrNotExist if the service is missing,
// ErrExist if the destination is already there.
func (f *Fake) addReal(ctx context.Context, vs model.VSKey, rs model.RealServer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "AddReal", dataplane.RealRef{VS: vs, RS: rs.Addr}); err != nil {
		return err
	}
	svc, ok := f.services[vs]
	if !ok {
		return fmt.Errorf("add real server %s to %s: virtual server %w", rs.Addr, vs, dataplane.ErrNotExist)
	}
	if svc.Reals.Has(rs.Addr) {
		return fmt.Errorf("add real server %s to %s: %w", rs.Addr, vs, dataplane.ErrExist)
	}
	if err := checkReal(rs); err != nil {
		return fmt.Errorf("add real server %s to %s: %w", rs.Addr, vs, err)
	}
	svc.Reals.Set(rs)
	return nil
}

// updateReal changes a destination's weight and forwarding.
func (f *Fake) updateReal(ctx context.Context, vs model.VSKey, rs model.RealServer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "UpdateReal", dataplane.RealRef{VS: vs, RS: rs.Addr}); err != nil {
		return err
	}
	svc, ok := f.services[vs]
	if !ok {
		return fmt.Errorf("update real server %s of %s: virtual server %w", rs.Addr, vs, dataplane.ErrNotExist)
	}
	if !svc.Reals.Has(rs.Addr) {
		return fmt.Errorf("update real server %s of %s: %w", rs.Addr, vs, dataplane.ErrNotExist)
	}
	if err := checkReal(rs); err != nil {
		return fmt.Errorf("update real server %s of %s: %w", rs.Addr, vs, err)
	}
	svc.Reals.Set(rs)
	return nil
}

// deleteReal removes a destination and forgets its counters.
func (f *Fake) deleteReal(ctx context.Context, vs model.VSKey, rs netip.AddrPort) error {
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
	if !svc.Reals.Has(rs) {
		return fmt.Errorf("delete real server %s of %s: %w", rs, vs, dataplane.ErrNotExist)
	}
	svc.Reals.Delete(rs)
	delete(f.conns, ref)
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
