//go:build linux

package linux

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"

	"github.com/mdlayher/netlink"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/ipvstable"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

var _ dataplane.Reader = (*Dataplane)(nil)

// The partial reads (dataplane.Reader) run every second beside the syncs,
// so they go through the agent's own generic-netlink reader (genl.go),
// not moby/ipvs: moby's receive allocates 64 KiB per read from the socket,
// which at two requests per virtual server made the drift check an
// allocation storm the collector then paid for (measured in the VM at
// 10,000 Services: about 1.8 CPU-s per second of idle). The reader sizes
// each buffer to the message.

// genlReader is the Dataplane's generic-netlink IPVS reader, opened on
// first use and dropped after a failure.
type genlReader struct {
	mu sync.Mutex
	r  *IPVSReader
}

// with runs fn on the reader, opening it if needed; on error the reader
// is closed so the next read starts on a fresh socket.
func (g *genlReader) with(ctx context.Context, fn func(*IPVSReader) error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.r == nil {
		r, err := OpenIPVSReader(ctx)
		if err != nil {
			return err
		}
		g.r = r
	}
	err := fn(g.r)
	if err != nil {
		_ = g.r.Close()
		g.r = nil
	}
	return err
}

func (g *genlReader) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.r != nil {
		_ = g.r.Close()
		g.r = nil
	}
}

// ObserveServices reads the named virtual servers one by one: a request
// for the service (ESRCH: absent) and a dump of its destinations. Two
// small round trips per virtual server, so that a part of the table costs
// what the part holds, not what the whole table holds.
func (d *Dataplane) ObserveServices(ctx context.Context, keys []model.VSKey) (dataplane.Observation, error) {
	obs := dataplane.Observation{State: model.NewState(), Conns: map[dataplane.RealRef]model.Conns{}}
	err := d.genl.with(ctx, func(r *IPVSReader) error {
		for _, k := range keys {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := readService(ctx, r, k, &obs); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return dataplane.Observation{}, fmt.Errorf("observe virtual servers: %w", err)
	}
	return obs, nil
}

// readService reads one virtual server with its destinations into obs;
// a missing one is left out.
func readService(ctx context.Context, r *IPVSReader, k model.VSKey, obs *dataplane.Observation) error {
	key := keyOf(k)
	req, err := encodeServiceKey(&key)
	if err != nil {
		return err
	}
	svcs, err := read(ctx, r, "read IPVS service "+k.String(), ipvsCmdGetService, 0, req, decodeServices)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(svcs) != 1 {
		return fmt.Errorf("read IPVS service %s: %d answers", k, len(svcs))
	}
	svc := svcs[0]
	svc.Dests, err = read(ctx, r, "dump destinations of "+k.String(), ipvsCmdGetDest, netlink.Dump, req,
		func(msgs []netlink.Message) ([]ipvstable.Dest, error) { return decodeDests(msgs, svc.AF) })
	if err != nil {
		return err
	}
	got, err := toModel(svc, obs.Conns)
	if err != nil {
		return fmt.Errorf("read IPVS service %s: %w", k, err)
	}
	obs.State.Services[got.Key] = got
	return nil
}

// keyOf is the reader's form of a key (family, protocol, address, port
// or fwmark).
func keyOf(k model.VSKey) ipvstable.Service {
	s := ipvstable.Service{AF: syscall.AF_INET, Protocol: k.Proto, Addr: k.Addr, Port: k.Port, FWMark: k.FWMark}
	if k.IsIPv6() {
		s.AF = syscall.AF_INET6
	}
	return s
}

// toModel converts a read virtual server (with its destinations, when
// read: their counters go into conns) as fromService and fromDest do.
func toModel(s ipvstable.Service, conns map[dataplane.RealRef]model.Conns) (*model.Service, error) {
	vs := model.VirtualServer{Scheduler: model.Scheduler(s.Scheduler), Flags: s.Flags, Timeout: s.Timeout}
	switch {
	case s.AF != syscall.AF_INET && s.AF != syscall.AF_INET6:
		return nil, fmt.Errorf("service with address family %d", s.AF)
	case s.FWMark != 0:
		vs.Key = model.VSKey{FWMark: s.FWMark, Addr: netip.IPv4Unspecified()}
		if s.AF == syscall.AF_INET6 {
			vs.Key.Addr = netip.IPv6Unspecified()
		}
	default:
		vs.Key = model.NewVSKey(s.Protocol, s.Addr.Unmap(), s.Port)
	}
	svc := &model.Service{VirtualServer: vs}
	if conns == nil {
		return svc, nil
	}
	svc.Reals = make(map[netip.AddrPort]model.RealServer, len(s.Dests))
	for _, dst := range s.Dests {
		addr := netip.AddrPortFrom(dst.Addr.Unmap(), dst.Port)
		svc.Reals[addr] = model.RealServer{Addr: addr, Weight: int(dst.Weight), Forward: dst.Forward}
		conns[dataplane.RealRef{VS: vs.Key, RS: addr}] = model.Conns{Active: dst.ActiveConns, Inactive: dst.InactConns}
	}
	return svc, nil
}

// ObserveTable dumps the virtual servers without their destinations, the
// link's addresses and the shim's set members.
func (d *Dataplane) ObserveTable(ctx context.Context) (dataplane.Observation, error) {
	obs := dataplane.Observation{State: model.NewState()}
	err := d.genl.with(ctx, func(r *IPVSReader) error {
		svcs, err := read(ctx, r, "dump IPVS services", ipvsCmdGetService, netlink.Dump, nil, decodeServices)
		if err != nil {
			return err
		}
		for _, s := range svcs {
			svc, err := toModel(s, nil)
			if err != nil {
				return err
			}
			obs.State.Services[svc.Key] = svc
		}
		return nil
	})
	if err != nil {
		return dataplane.Observation{}, fmt.Errorf("observe the table: %w", err)
	}
	addrs, err := call(ctx, d.calls, "observe the link", func(h *handles) ([]netip.Addr, error) { return d.listAddrs(h) })
	if err != nil {
		return dataplane.Observation{}, fmt.Errorf("observe the table: %w", err)
	}
	for _, a := range addrs {
		obs.State.Addrs[a] = struct{}{}
	}
	sets, err := d.SetEntries(ctx)
	if err != nil {
		return dataplane.Observation{}, fmt.Errorf("observe the table: %w", err)
	}
	obs.State.Sets = sets
	return obs, nil
}
