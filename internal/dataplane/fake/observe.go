package fake

import (
	"context"
	"maps"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

var _ dataplane.Reader = (*Fake)(nil)

// ObserveServices returns deep copies of the named virtual servers that
// exist, with their counters, as Observe shows them. Its call's Arg is the
// keys asked for.
func (f *Fake) ObserveServices(ctx context.Context, keys []model.VSKey) (dataplane.Observation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "ObserveServices", keys); err != nil {
		return dataplane.Observation{}, err
	}
	if f.observeErr != nil {
		return dataplane.Observation{}, f.observeErr
	}
	obs := dataplane.Observation{State: model.NewState(), Conns: map[dataplane.RealRef]model.Conns{}}
	for _, k := range keys {
		if svc, ok := f.services[k]; ok {
			f.observeService(k, svc, &obs)
		}
	}
	return obs, nil
}

// observeService puts a copy of one virtual server and its counters in obs.
// The caller holds f.mu.
func (f *Fake) observeService(k model.VSKey, svc *model.Service, obs *dataplane.Observation) {
	c := svc.Clone()
	c.Flags |= model.FlagHashed
	obs.State.Services[k] = c
	for a := range svc.Reals {
		ref := dataplane.RealRef{VS: k, RS: a}
		obs.Conns[ref] = f.conns[ref]
	}
}

// ObserveTable returns the virtual servers without their real servers,
// the link's addresses and the set members.
func (f *Fake) ObserveTable(ctx context.Context) (dataplane.Observation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "ObserveTable", nil); err != nil {
		return dataplane.Observation{}, err
	}
	if f.observeErr != nil {
		return dataplane.Observation{}, f.observeErr
	}
	obs := dataplane.Observation{State: model.NewState()}
	for k, svc := range f.services {
		vs := svc.VirtualServer
		vs.Flags |= model.FlagHashed
		obs.State.Services[k] = &model.Service{VirtualServer: vs}
	}
	maps.Copy(obs.State.Addrs, f.addrs)
	obs.State.Sets = f.members()
	return obs, nil
}
