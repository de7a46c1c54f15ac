package plan

import (
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Scope restricts a diff to some virtual servers and addresses, so that a
// change to one Service costs that Service's operations only.
type Scope struct {
	Keys  map[model.VSKey]struct{}
	Addrs map[netip.Addr]struct{}
	Sets  map[model.SetEntry]struct{}
}

// NewScope returns an empty scope.
func NewScope() Scope {
	return Scope{Keys: map[model.VSKey]struct{}{}, Addrs: map[netip.Addr]struct{}{}, Sets: map[model.SetEntry]struct{}{}}
}

// Of returns the part of s inside the scope. Services are shared, not
// copied: the result is for reading.
func (sc Scope) Of(s model.State) model.State {
	out := model.State{
		Services: make(map[model.VSKey]*model.Service, len(sc.Keys)),
		Addrs:    make(map[netip.Addr]struct{}, len(sc.Addrs)),
		Sets:     make(map[model.SetEntry]struct{}, len(sc.Sets)),
	}
	for e := range sc.Sets {
		if _, ok := s.Sets[e]; ok {
			out.Sets[e] = struct{}{}
		}
	}
	for k := range sc.Keys {
		if svc, ok := s.Services[k]; ok {
			out.Services[k] = svc
		}
	}
	for a := range sc.Addrs {
		if _, ok := s.Addrs[a]; ok {
			out.Addrs[a] = struct{}{}
		}
	}
	return out
}
