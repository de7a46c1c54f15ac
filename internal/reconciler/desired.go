package reconciler

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// desiredSet is the whole desired state kept as the sum of each Service's
// last good translation, so that replacing one Service touches only its own
// keys and addresses.
type desiredSet struct {
	state    model.State
	results  map[model.ServiceName]translate.Result
	owner    map[model.VSKey]model.ServiceName
	addrRefs map[netip.Addr]int
	// setRefs counts the Services that need a set member (two Services may
	// share an endpoint, hence a hairpin member).
	setRefs map[model.SetEntry]int
	// checks are the health checks of the Services that have one, so that
	// listing them does not walk every Service; checksChanged tells the
	// publisher to list them again.
	checks        map[model.ServiceName]translate.HealthCheck
	checksChanged bool
	// changed are the Services replaced or removed since the publisher
	// last looked.
	changed map[model.ServiceName]struct{}
}

func newDesiredSet() desiredSet {
	return desiredSet{
		state:    model.NewState(),
		results:  map[model.ServiceName]translate.Result{},
		owner:    map[model.VSKey]model.ServiceName{},
		addrRefs: map[netip.Addr]int{},
		setRefs:  map[model.SetEntry]int{},
		checks:   map[model.ServiceName]translate.HealthCheck{},
		changed:  map[model.ServiceName]struct{}{},
	}
}

// replace swaps one Service's translation for a new one (an empty Result
// removes it), adds every key and address either version touches to scope,
// and returns the keys the Service could not claim because another Service
// already holds them.
func (d *desiredSet) replace(name model.ServiceName, res translate.Result, scope plan.Scope) []error {
	d.remove(name, scope)
	d.changed[name] = struct{}{}
	var conflicts []error
	kept := res
	kept.Services = nil
	for _, svc := range res.Services {
		if other, taken := d.owner[svc.Key]; taken {
			conflicts = append(conflicts, fmt.Errorf("service %s: virtual server %s is already served for %s", name, svc.Key, other))
			continue
		}
		d.owner[svc.Key] = name
		d.state.Services[svc.Key] = svc
		scope.Keys[svc.Key] = struct{}{}
		kept.Services = append(kept.Services, svc)
	}
	for _, a := range res.Addrs {
		d.addrRefs[a]++
		d.state.Addrs[a] = struct{}{}
		scope.Addrs[a] = struct{}{}
	}
	for _, e := range res.SetEntries {
		d.setRefs[e]++
		d.state.Sets[e] = struct{}{}
		scope.Sets[e] = struct{}{}
	}
	if len(kept.Services) > 0 || len(kept.Addrs) > 0 || len(kept.SetEntries) > 0 || kept.HealthCheck != nil {
		d.results[name] = kept
	}
	if res.HealthCheck != nil {
		d.checks[name] = *res.HealthCheck
		d.checksChanged = true
	}
	return conflicts
}

// remove drops a Service's translation.
func (d *desiredSet) remove(name model.ServiceName, scope plan.Scope) {
	old, ok := d.results[name]
	if !ok {
		return
	}
	delete(d.results, name)
	d.changed[name] = struct{}{}
	if _, ok := d.checks[name]; ok {
		delete(d.checks, name)
		d.checksChanged = true
	}
	for _, svc := range old.Services {
		delete(d.owner, svc.Key)
		delete(d.state.Services, svc.Key)
		scope.Keys[svc.Key] = struct{}{}
	}
	for _, a := range old.Addrs {
		scope.Addrs[a] = struct{}{}
		if d.addrRefs[a]--; d.addrRefs[a] <= 0 {
			delete(d.addrRefs, a)
			delete(d.state.Addrs, a)
		}
	}
	for _, e := range old.SetEntries {
		scope.Sets[e] = struct{}{}
		if d.setRefs[e]--; d.setRefs[e] <= 0 {
			delete(d.setRefs, e)
			delete(d.state.Sets, e)
		}
	}
}

// healthChecks lists the held Services' health checks by port. Two
// Services claiming one port (the API server prevents it) keep the first
// by name.
func (d *desiredSet) healthChecks() []translate.HealthCheck {
	byPort := map[uint16]translate.HealthCheck{}
	for _, hc := range d.checks {
		if old, ok := byPort[hc.Port]; ok && old.Service.Compare(hc.Service) < 0 {
			continue
		}
		byPort[hc.Port] = hc
	}
	out := make([]translate.HealthCheck, 0, len(byPort))
	for _, hc := range byPort {
		out = append(out, hc)
	}
	slices.SortFunc(out, func(a, b translate.HealthCheck) int { return cmp.Compare(a.Port, b.Port) })
	return out
}

// meta returns what is known about a desired virtual server.
func (d *desiredSet) meta(k model.VSKey) (translate.VSMeta, bool) {
	name, ok := d.owner[k]
	if !ok {
		return translate.VSMeta{}, false
	}
	m, ok := d.results[name].Meta[k]
	return m, ok
}

// names lists the Services with a translation held.
func (d *desiredSet) names() []model.ServiceName {
	out := make([]model.ServiceName, 0, len(d.results))
	for n := range d.results {
		out = append(out, n)
	}
	return out
}
