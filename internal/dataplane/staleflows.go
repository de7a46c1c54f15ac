package dataplane

import (
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// StaleFlows names the conntrack entries of one protocol that a cleanup
// deletes. UDP has no end of connection, so a client that keeps its source
// port (DNS resolvers) keeps matching such an entry for as long as it
// sends: one NATed to a removed real server black-holes it, and one made
// while a frontend had no endpoint keeps it from ever reaching the first
// (kubernetes#59368; kube-proxy clears both).
type StaleFlows struct {
	Proto model.Protocol
	// Reals are removed real servers: an entry whose replies come from one
	// (address and port) was NATed to it.
	Reals map[netip.AddrPort]struct{}
	// Dests are frontends that just got their first endpoint: an entry
	// sent to one that nothing NATed (its replies come from the frontend
	// itself) was made while it had none. Entries NATed to a real server
	// are left alone: the cleanup runs after the apply, so they may already
	// reach the new endpoint (kube-proxy keeps entries DNATed to a serving
	// endpoint too).
	Dests map[netip.AddrPort]struct{}
}

// NewStaleFlows returns an empty StaleFlows of proto.
func NewStaleFlows(proto model.Protocol) StaleFlows {
	return StaleFlows{Proto: proto, Reals: map[netip.AddrPort]struct{}{}, Dests: map[netip.AddrPort]struct{}{}}
}

// AddReal names the entries NATed to real.
func (s StaleFlows) AddReal(real netip.AddrPort) { s.Reals[unmap(real)] = struct{}{} }

// AddDest names the entries first sent to dst.
func (s StaleFlows) AddDest(dst netip.AddrPort) { s.Dests[unmap(dst)] = struct{}{} }

// Len is how many keys s holds.
func (s StaleFlows) Len() int { return len(s.Reals) + len(s.Dests) }

// Family is the part of s of one address family.
func (s StaleFlows) Family(v6 bool) StaleFlows {
	out := NewStaleFlows(s.Proto)
	for k := range s.Reals {
		if k.Addr().Is6() == v6 {
			out.Reals[k] = struct{}{}
		}
	}
	for k := range s.Dests {
		if k.Addr().Is6() == v6 {
			out.Dests[k] = struct{}{}
		}
	}
	return out
}

// Has tells whether s names entries of the family.
func (s StaleFlows) Has(v6 bool) bool {
	for k := range s.Reals {
		if k.Addr().Is6() == v6 {
			return true
		}
	}
	for k := range s.Dests {
		if k.Addr().Is6() == v6 {
			return true
		}
	}
	return false
}

// Matches tells whether an entry of proto, first sent to dst and answered
// from reply, is one s names. The one rule every Conntrack implementation
// deletes by.
func (s StaleFlows) Matches(proto model.Protocol, dst, reply netip.AddrPort) bool {
	if proto != s.Proto {
		return false
	}
	if _, ok := s.Reals[unmap(reply)]; ok {
		return true
	}
	dst = unmap(dst)
	if _, ok := s.Dests[dst]; !ok {
		return false
	}
	return unmap(reply) == dst
}

// unmap makes an IPv4-mapped IPv6 address the IPv4 address it is, as the
// kernel's entries of IPv4 flows carry it.
func unmap(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
