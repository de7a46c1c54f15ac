package model

import (
	"net/netip"
	"slices"
)

// Reals are a virtual server's real servers, sorted by address, each
// address once. A sorted slice, not a map: a Service has a handful of
// real servers and the agent holds every Service twice (desired and
// observed), so a map's buckets per Service would cost more memory and
// allocations than the handful of entries; lookups are binary searches and
// listing needs no sort. The zero value is empty and ready to use. A copy
// of a Reals shares its list, as a copied map would, but an insert into
// one can shift what the other holds: Clone before changing a copy.
type Reals struct{ list []RealServer }

// RealsOf holds rs, sorted; of two with one address the later is kept.
// It takes rs over (sorts it in place and keeps it): the caller gives it up.
func RealsOf(rs []RealServer) Reals {
	// Translation hands the endpoints over in address order already: one
	// pass tells, and a large Service skips the sort.
	if increasing(rs) {
		return Reals{list: rs}
	}
	list := rs
	slices.SortStableFunc(list, compareReal)
	out := list[:0]
	for _, r := range list {
		if n := len(out); n > 0 && out[n-1].Addr == r.Addr {
			out[n-1] = r
			continue
		}
		out = append(out, r)
	}
	return Reals{list: out}
}

func compareReal(a, b RealServer) int { return a.Addr.Compare(b.Addr) }

// increasing tells whether rs is sorted by address with each address
// once.
func increasing(rs []RealServer) bool {
	for i := 1; i < len(rs); i++ {
		if rs[i-1].Addr.Compare(rs[i].Addr) >= 0 {
			return false
		}
	}
	return true
}

// Len is how many real servers there are.
func (r Reals) Len() int { return len(r.list) }

// All lists the real servers in address order. The slice is the holder's:
// read it, do not change it.
func (r Reals) All() []RealServer { return r.list }

// find is where addr is, or would go.
func (r Reals) find(addr netip.AddrPort) (int, bool) {
	return slices.BinarySearchFunc(r.list, addr, func(rs RealServer, a netip.AddrPort) int { return rs.Addr.Compare(a) })
}

// Get returns the real server at addr.
func (r Reals) Get(addr netip.AddrPort) (RealServer, bool) {
	if i, ok := r.find(addr); ok {
		return r.list[i], true
	}
	return RealServer{}, false
}

// Has tells whether a real server is at addr.
func (r Reals) Has(addr netip.AddrPort) bool {
	_, ok := r.find(addr)
	return ok
}

// Set adds rs, or replaces the real server at its address.
func (r *Reals) Set(rs RealServer) {
	i, ok := r.find(rs.Addr)
	if ok {
		r.list[i] = rs
		return
	}
	r.list = slices.Insert(r.list, i, rs)
}

// Delete removes the real server at addr; it tells whether there was one.
func (r *Reals) Delete(addr netip.AddrPort) bool {
	i, ok := r.find(addr)
	if ok {
		r.list = slices.Delete(r.list, i, i+1)
	}
	return ok
}

// Grow makes room for n more without another allocation.
func (r *Reals) Grow(n int) { r.list = slices.Grow(r.list, n) }

// Insert adds real servers at addresses it does not hold, given in
// increasing order of address, in one pass over the list (insertSorted):
// set one by one, each would shift the rest of the list.
func (r *Reals) Insert(added []RealServer) { r.list = insertSorted(r.list, added) }

// Clone copies the list, so that either may be changed.
func (r Reals) Clone() Reals { return Reals{list: slices.Clone(r.list)} }

// Equal compares address by address.
func (r Reals) Equal(o Reals) bool { return slices.Equal(r.list, o.list) }

// Merge applies real-server operations (AddReal and UpdateReal set a real
// server, DeleteReal removes one) in one pass over the list: each is found
// by a binary search, the real servers between them move in one copy, and
// the new ones are merged in from the end. Applied one by one, each insert
// or delete would shift the rest of the list. The operations must be in
// increasing order of address, each address once (a plan's, for one
// virtual server); the result is theirs applied in turn.
func (r *Reals) Merge(ops []Op) {
	var room [16]RealServer // a plan's run is a few real servers: no allocation
	added := room[:0]
	list, kept, from := r.list, 0, 0
	// keep moves list[from:to] to the end of the kept ones.
	keep := func(to int) {
		if kept != from {
			copy(list[kept:], list[from:to])
		}
		kept, from = kept+to-from, to
	}
	for _, op := range ops {
		i, held := slices.BinarySearchFunc(list[from:], op.RS.Addr, func(rs RealServer, a netip.AddrPort) int { return rs.Addr.Compare(a) })
		i += from
		switch {
		case !held && op.Kind != DeleteReal:
			added = append(added, op.RS)
		case held && op.Kind == DeleteReal:
			keep(i)
			from = i + 1
		case held:
			list[i] = op.RS
		}
	}
	keep(len(list))
	clear(list[kept:])
	r.list = insertSorted(list[:kept], added)
}

// insertSorted merges added (sorted, none of their addresses in list) into
// list from its end, each block of list moved once.
func insertSorted(list, added []RealServer) []RealServer {
	if len(added) == 0 {
		return list
	}
	end := len(list)
	list = slices.Grow(list, len(added))[:end+len(added)]
	for k := len(added) - 1; k >= 0; k-- {
		j, _ := slices.BinarySearchFunc(list[:end], added[k].Addr, func(rs RealServer, a netip.AddrPort) int { return rs.Addr.Compare(a) })
		copy(list[j+k+1:], list[j:end])
		list[j+k] = added[k]
		end = j
	}
	return list
}
