//go:build linux

package linux

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/moby/ipvs"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// toService builds the moby request for a virtual server.
func toService(vs model.VirtualServer) *ipvs.Service {
	s := &ipvs.Service{
		SchedName: string(vs.Scheduler),
		Flags:     uint32(vs.Flags &^ model.FlagHashed),
		Timeout:   vs.Timeout,
	}
	fillKey(s, vs.Key)
	return s
}

// fillKey sets the fields that name a service. The netmask is the
// persistence granularity: a whole client address, as kube-proxy does. The
// kernel rejects an IPv6 service whose prefix length is not 1..128, so it is
// always set, persistent or not.
func fillKey(s *ipvs.Service, k model.VSKey) {
	if k.IsIPv6() {
		s.AddressFamily = syscall.AF_INET6
		s.Netmask = 128
	} else {
		s.AddressFamily = syscall.AF_INET
		s.Netmask = 0xffffffff
	}
	if k.FWMark != 0 {
		s.FWMark = k.FWMark
		return
	}
	s.Protocol = uint16(k.Proto)
	s.Address = net.IP(k.Addr.AsSlice())
	s.Port = k.Port
}

// keyOnly is a request that names a service and nothing else.
func keyOnly(k model.VSKey) *ipvs.Service {
	s := &ipvs.Service{}
	fillKey(s, k)
	return s
}

// fromService reads a dumped service. A fwmark service has no protocol,
// address or port; its key keeps the family as the unspecified address.
func fromService(s *ipvs.Service) (model.VirtualServer, error) {
	vs := model.VirtualServer{
		Scheduler: model.Scheduler(s.SchedName),
		Flags:     model.Flags(s.Flags),
		Timeout:   s.Timeout,
	}
	v6 := s.AddressFamily == syscall.AF_INET6
	if s.AddressFamily != syscall.AF_INET && !v6 {
		return vs, fmt.Errorf("service with address family %d", s.AddressFamily)
	}
	if s.FWMark != 0 {
		vs.Key = model.VSKey{FWMark: s.FWMark, Addr: netip.IPv4Unspecified()}
		if v6 {
			vs.Key.Addr = netip.IPv6Unspecified()
		}
		return vs, nil
	}
	addr, err := ipFrom(s.Address, v6)
	if err != nil {
		return vs, fmt.Errorf("service %d:%d: %w", s.Protocol, s.Port, err)
	}
	vs.Key = model.NewVSKey(model.Protocol(s.Protocol), addr, s.Port)
	return vs, nil
}

// ipFrom converts an address as moby parses it (4 or 16 bytes).
func ipFrom(ip net.IP, v6 bool) (netip.Addr, error) {
	if !v6 {
		if v4 := ip.To4(); v4 != nil {
			return netip.AddrFrom4([4]byte(v4)), nil
		}
		return netip.Addr{}, fmt.Errorf("bad IPv4 address %v", ip)
	}
	if len(ip) != net.IPv6len {
		return netip.Addr{}, fmt.Errorf("bad IPv6 address %v", ip)
	}
	return netip.AddrFrom16([16]byte(ip)), nil
}

func toDest(rs model.RealServer) *ipvs.Destination {
	d := &ipvs.Destination{
		Address:         net.IP(rs.Addr.Addr().Unmap().AsSlice()),
		Port:            rs.Addr.Port(),
		Weight:          rs.Weight,
		ConnectionFlags: uint32(rs.Forward),
	}
	d.AddressFamily = syscall.AF_INET
	if rs.Addr.Addr().Unmap().Is6() {
		d.AddressFamily = syscall.AF_INET6
	}
	return d
}

func fromDest(d *ipvs.Destination) (model.RealServer, model.Conns, error) {
	addr, err := ipFrom(d.Address, d.AddressFamily == syscall.AF_INET6)
	if err != nil {
		return model.RealServer{}, model.Conns{}, fmt.Errorf("real server port %d: %w", d.Port, err)
	}
	rs := model.RealServer{
		Addr:    netip.AddrPortFrom(addr, d.Port),
		Weight:  d.Weight,
		Forward: model.Forwarding(d.ConnectionFlags & ipvs.ConnectionFlagFwdMask),
	}
	c := model.Conns{Active: clampU32(d.ActiveConnections), Inactive: clampU32(d.InactiveConnections)}
	return rs, c, nil
}

func clampU32(n int) uint32 {
	if n < 0 {
		return 0
	}
	return uint32(n)
}

// dumpIPVS reads every service with its destinations into obs (the IPVS
// part of Observe).
func dumpIPVS(h *ipvs.Handle, obs *dataplane.Observation) error {
	return walkIPVS(h, func(n, reals int) {
		// Sized up front: maps grown from empty to 10,000 services and
		// 100,000 counters leave as much garbage again as they hold, every
		// read.
		if len(obs.State.Services) == 0 {
			obs.State.Services = make(map[model.VSKey]*model.Service, n)
		}
		if len(obs.Conns) == 0 {
			obs.Conns = make(map[dataplane.RealRef]model.Conns, reals)
		}
	}, func(vs model.VirtualServer, reals []realRead) {
		rs := make([]model.RealServer, len(reals))
		for i, r := range reals {
			rs[i] = r.rs
			obs.Conns[dataplane.RealRef{VS: vs.Key, RS: r.rs.Addr}] = r.c
		}
		obs.State.Services[vs.Key] = &model.Service{VirtualServer: vs, Reals: model.RealsOf(rs)}
	})
}

// walkIPVS reads every service with its destinations and hands each to
// each (sized first learns how many services and listed real servers there
// are): the services from one netlink dump, their destinations from one
// read of the kernel's listing (procipvs.go), and over netlink, one dump
// each, only for services the listing does not show. The reals slice is
// each's only during the call.
func walkIPVS(h *ipvs.Handle, sized func(services, reals int), each func(model.VirtualServer, []realRead)) error {
	svcs, err := h.GetServices()
	if err != nil {
		return fmt.Errorf("list IPVS services: %w", err)
	}
	listed := readProcIPVS()
	if listed != nil {
		sized(len(svcs), listed.count)
	} else {
		sized(len(svcs), 0)
	}
	for _, s := range svcs {
		vs, err := fromService(s)
		if err != nil {
			return fmt.Errorf("read IPVS service: %w", err)
		}
		reals, ok := listed.reals(vs.Key)
		if !ok {
			if reals, err = dumpDests(h, s); err != nil {
				return fmt.Errorf("list real servers of %s: %w", vs.Key, err)
			}
		}
		each(vs, reals)
	}
	return nil
}

// dumpDests reads one service's destinations over netlink.
func dumpDests(h *ipvs.Handle, s *ipvs.Service) ([]realRead, error) {
	dests, err := h.GetDestinations(s)
	if err != nil {
		return nil, err
	}
	out := make([]realRead, 0, len(dests))
	for _, dst := range dests {
		rs, c, err := fromDest(dst)
		if err != nil {
			return nil, err
		}
		out = append(out, realRead{rs: rs, c: c})
	}
	return out, nil
}

// Conns reads one service's destinations' counters.
func (d *Dataplane) Conns(ctx context.Context, vs model.VSKey) (map[netip.AddrPort]model.Conns, error) {
	out, err := call(ctx, d.calls, "read connections", func(h *handles) (map[netip.AddrPort]model.Conns, error) {
		dests, err := h.ipvs.GetDestinations(keyOnly(vs))
		if err != nil {
			return nil, destErrs.wrap(err)
		}
		if len(dests) == 0 {
			// The kernel dumps no destinations for a missing service rather
			// than failing (checked on 6.1): ask for the service itself,
			// which answers ESRCH when it is missing.
			if _, err := h.ipvs.GetService(keyOnly(vs)); err != nil {
				return nil, serviceErrs.wrap(err)
			}
		}
		out := make(map[netip.AddrPort]model.Conns, len(dests))
		for _, dst := range dests {
			rs, c, err := fromDest(dst)
			if err != nil {
				return nil, err
			}
			out[rs.Addr] = c
		}
		return out, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read connections of %s: %w", vs, err)
	}
	return out, nil
}

// AddService creates a virtual server.
func (d *Dataplane) AddService(ctx context.Context, vs model.VirtualServer) error {
	err := d.do(ctx, "add virtual server", func(h *handles) error {
		return serviceErrs.wrap(h.ipvs.NewService(toService(vs)))
	})
	if err != nil {
		return fmt.Errorf("add virtual server %s: %w", vs, err)
	}
	return nil
}

// UpdateService overwrites a virtual server's scheduler, flags and timeout.
func (d *Dataplane) UpdateService(ctx context.Context, vs model.VirtualServer) error {
	err := d.do(ctx, "update virtual server", func(h *handles) error {
		return serviceErrs.wrap(h.ipvs.UpdateService(toService(vs)))
	})
	if err != nil {
		return fmt.Errorf("update virtual server %s: %w", vs, err)
	}
	return nil
}

// DeleteService removes a virtual server; the kernel drops its reals.
func (d *Dataplane) DeleteService(ctx context.Context, key model.VSKey) error {
	err := d.do(ctx, "delete virtual server", func(h *handles) error {
		return serviceErrs.wrap(h.ipvs.DelService(keyOnly(key)))
	})
	if err != nil {
		return fmt.Errorf("delete virtual server %s: %w", key, err)
	}
	return nil
}

// AddReal adds a real server to a virtual server.
func (d *Dataplane) AddReal(ctx context.Context, vs model.VSKey, rs model.RealServer) error {
	err := d.do(ctx, "add real server", func(h *handles) error {
		return destErrs.wrap(h.ipvs.NewDestination(keyOnly(vs), toDest(rs)))
	})
	if err != nil {
		return fmt.Errorf("add real server %s to %s: %w", rs.Addr, vs, err)
	}
	return nil
}

// UpdateReal changes a real server's weight and forwarding method.
func (d *Dataplane) UpdateReal(ctx context.Context, vs model.VSKey, rs model.RealServer) error {
	err := d.do(ctx, "update real server", func(h *handles) error {
		return destErrs.wrap(h.ipvs.UpdateDestination(keyOnly(vs), toDest(rs)))
	})
	if err != nil {
		return fmt.Errorf("update real server %s of %s: %w", rs.Addr, vs, err)
	}
	return nil
}

// DeleteReal removes a real server from a virtual server.
func (d *Dataplane) DeleteReal(ctx context.Context, vs model.VSKey, rs netip.AddrPort) error {
	err := d.do(ctx, "delete real server", func(h *handles) error {
		return destErrs.wrap(h.ipvs.DelDestination(keyOnly(vs), toDest(model.RealServer{Addr: rs})))
	})
	if err != nil {
		return fmt.Errorf("delete real server %s of %s: %w", rs, vs, err)
	}
	return nil
}

// SetTimeouts sets IPVS' connection timeouts, keeping those given as zero.
// The current values are read first so that what is sent is explicit.
func (d *Dataplane) SetTimeouts(ctx context.Context, t dataplane.Timeouts) error {
	if t == (dataplane.Timeouts{}) {
		return nil
	}
	err := d.do(ctx, "set IPVS timeouts", func(h *handles) error {
		cur, err := h.ipvs.GetConfig()
		if err != nil {
			return fmt.Errorf("read IPVS timeouts: %w", err)
		}
		if t.TCP != 0 {
			cur.TimeoutTCP = t.TCP
		}
		if t.TCPFin != 0 {
			cur.TimeoutTCPFin = t.TCPFin
		}
		if t.UDP != 0 {
			cur.TimeoutUDP = t.UDP
		}
		return h.ipvs.SetConfig(cur)
	})
	if err != nil {
		return fmt.Errorf("set IPVS timeouts tcp=%s tcpfin=%s udp=%s: %w", t.TCP, t.TCPFin, t.UDP, err)
	}
	return nil
}
