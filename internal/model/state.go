package model

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// Service is a virtual server with its real servers.
type Service struct {
	VirtualServer
	Reals Reals
}

// Clone copies the service deeply enough that the copy may be changed.
func (s *Service) Clone() *Service {
	return &Service{VirtualServer: s.VirtualServer, Reals: s.Reals.Clone()}
}

// Equal compares the virtual server and every real server.
func (s *Service) Equal(o *Service) bool {
	return s.VirtualServer.Equal(o.VirtualServer) && s.Reals.Equal(o.Reals)
}

// State is an IPVS table plus the VIPs bound on the agent's link and the
// members of the agent's ipsets. The same type carries what we want
// (desired) and what the kernel holds (observed).
type State struct {
	Services map[VSKey]*Service
	Addrs    map[netip.Addr]struct{}
	// Sets are the members of the agent's own ipsets (never anyone else's).
	Sets map[SetEntry]struct{}
}

// NewState returns an empty, usable state.
func NewState() State {
	return State{Services: map[VSKey]*Service{}, Addrs: map[netip.Addr]struct{}{}, Sets: map[SetEntry]struct{}{}}
}

// SizedState returns an empty state whose maps are sized for what is about
// to go in: a map grown from empty to a whole table rehashes at every
// doubling and leaves as much garbage again as it holds.
func SizedState(services, addrs, sets int) State {
	return State{Services: make(map[VSKey]*Service, services), Addrs: make(map[netip.Addr]struct{}, addrs),
		Sets: make(map[SetEntry]struct{}, sets)}
}

// Empty tells whether the state holds nothing.
func (s State) Empty() bool {
	return len(s.Services) == 0 && len(s.Addrs) == 0 && len(s.Sets) == 0
}

// Clone copies the state deeply.
func (s State) Clone() State {
	c := State{Services: make(map[VSKey]*Service, len(s.Services)), Addrs: maps.Clone(s.Addrs), Sets: maps.Clone(s.Sets)}
	if c.Addrs == nil {
		c.Addrs = map[netip.Addr]struct{}{}
	}
	if c.Sets == nil {
		c.Sets = map[SetEntry]struct{}{}
	}
	for k, v := range s.Services {
		c.Services[k] = v.Clone()
	}
	return c
}

// Equal compares every service, real server, address and set entry.
func (s State) Equal(o State) bool {
	if len(s.Services) != len(o.Services) || len(s.Addrs) != len(o.Addrs) || len(s.Sets) != len(o.Sets) {
		return false
	}
	for e := range s.Sets {
		if _, ok := o.Sets[e]; !ok {
			return false
		}
	}
	for k, v := range s.Services {
		ov, ok := o.Services[k]
		if !ok || !v.Equal(ov) {
			return false
		}
	}
	for a := range s.Addrs {
		if _, ok := o.Addrs[a]; !ok {
			return false
		}
	}
	return true
}

// SortedKeys lists the services in listing order.
func (s State) SortedKeys() []VSKey {
	keys := slices.Collect(maps.Keys(s.Services))
	slices.SortFunc(keys, VSKey.Compare)
	return keys
}

// SortedAddrs lists the bound addresses in order.
func (s State) SortedAddrs() []netip.Addr {
	addrs := slices.Collect(maps.Keys(s.Addrs))
	slices.SortFunc(addrs, netip.Addr.Compare)
	return addrs
}

// Dump is the one text form of a state, used by fakes, tests and goldens:
// one "-A" line per service, one "-a" line per real server below it, one
// "addr" line per bound VIP, one "set" line per ipset member, all sorted.
func (s State) Dump() string {
	var b strings.Builder
	for _, k := range s.SortedKeys() {
		svc := s.Services[k]
		b.WriteString("-A " + svc.VirtualServer.String() + "\n")
		for _, r := range svc.Reals.All() {
			b.WriteString("  -a " + k.String() + " " + r.String() + "\n")
		}
	}
	for _, a := range s.SortedAddrs() {
		b.WriteString("addr " + a.String() + "\n")
	}
	for _, e := range s.SortedSetEntries() {
		b.WriteString("set " + e.String() + "\n")
	}
	return b.String()
}
