//go:build linux

package linux

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/moby/ipvs"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

var _ dataplane.Reader = (*Dataplane)(nil)

// ObserveServices reads the named virtual servers one by one: a request
// for the service (ESRCH: absent) and a dump of its destinations. Two
// small round trips per virtual server, so that a slice of the table costs
// what the slice holds, not what the whole table holds.
func (d *Dataplane) ObserveServices(ctx context.Context, keys []model.VSKey) (dataplane.Observation, error) {
	obs, err := call(ctx, d.calls, "observe services", func(h *handles) (dataplane.Observation, error) {
		obs := dataplane.Observation{State: model.NewState(), Conns: map[dataplane.RealRef]model.Conns{}}
		for _, k := range keys {
			if err := ctx.Err(); err != nil {
				return dataplane.Observation{}, err
			}
			if err := readService(h.ipvs, k, &obs); err != nil {
				return dataplane.Observation{}, err
			}
		}
		return obs, nil
	})
	if err != nil {
		return dataplane.Observation{}, fmt.Errorf("observe virtual servers: %w", err)
	}
	return obs, nil
}

// readService reads one virtual server with its destinations into obs;
// a missing one is left out.
func readService(h *ipvs.Handle, k model.VSKey, obs *dataplane.Observation) error {
	s, err := h.GetService(keyOnly(k))
	if err = serviceErrs.wrap(err); errors.Is(err, dataplane.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read IPVS service %s: %w", k, err)
	}
	vs, err := fromService(s)
	if err != nil {
		return fmt.Errorf("read IPVS service %s: %w", k, err)
	}
	dests, err := h.GetDestinations(s)
	if err != nil {
		return fmt.Errorf("list real servers of %s: %w", k, destErrs.wrap(err))
	}
	svc := &model.Service{VirtualServer: vs, Reals: make(map[netip.AddrPort]model.RealServer, len(dests))}
	for _, dst := range dests {
		rs, c, err := fromDest(dst)
		if err != nil {
			return fmt.Errorf("read real server of %s: %w", k, err)
		}
		svc.Reals[rs.Addr] = rs
		obs.Conns[dataplane.RealRef{VS: vs.Key, RS: rs.Addr}] = c
	}
	obs.State.Services[vs.Key] = svc
	return nil
}

// ObserveTable dumps the virtual servers without their destinations, the
// link's addresses and the shim's set members.
func (d *Dataplane) ObserveTable(ctx context.Context) (dataplane.Observation, error) {
	obs, err := call(ctx, d.calls, "observe table", func(h *handles) (dataplane.Observation, error) {
		obs := dataplane.Observation{State: model.NewState()}
		svcs, err := h.ipvs.GetServices()
		if err != nil {
			return dataplane.Observation{}, fmt.Errorf("list IPVS services: %w", err)
		}
		for _, s := range svcs {
			vs, err := fromService(s)
			if err != nil {
				return dataplane.Observation{}, fmt.Errorf("read IPVS service: %w", err)
			}
			obs.State.Services[vs.Key] = &model.Service{VirtualServer: vs}
		}
		addrs, err := d.listAddrs(h)
		if err != nil {
			return dataplane.Observation{}, err
		}
		for _, a := range addrs {
			obs.State.Addrs[a] = struct{}{}
		}
		return obs, nil
	})
	if err != nil {
		return dataplane.Observation{}, fmt.Errorf("observe the table: %w", err)
	}
	sets, err := d.SetEntries(ctx)
	if err != nil {
		return dataplane.Observation{}, fmt.Errorf("observe the table: %w", err)
	}
	obs.State.Sets = sets
	return obs, nil
}
