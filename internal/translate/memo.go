package translate

import (
	"slices"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// EndpointMemo keeps what one Service's EndpointSlices read as, so that a
// translation reads again only the slices that changed. An EndpointSlice
// object is never changed once handed over (a changed slice is a new
// object), so a slice seen before reads as it did. Per port, the memo also
// keeps every slice's endpoints merged in address order: a translation
// takes out the endpoints of the slices gone and merges in those of the
// new ones, a binary search and a block copy each, rather than sorting the
// whole Service again. The endpoints it hands to a translation are folded
// exactly as collectEndpoints folds them.
//
// One memo serves one Service, one translation at a time; its zero value
// is ready. It holds the slices it last read, and their endpoints once
// more: worth it for a Service of many slices, where one slice's change
// would otherwise cost reading all of them.
type EndpointMemo struct {
	// proxyName and families are what reading a slice depends on besides
	// the slice: when they change, everything is read again.
	proxyName string
	families  model.Families
	read      map[*discoveryv1.EndpointSlice]*sliceRead
	// ports are, per port, the endpoints of every slice read, sorted by
	// address (copies of one address in no particular order); spare is
	// a list to merge into, swapped with the port's.
	ports map[portKey][]listed
	spare []listed
	// folded holds the endpoints the last translation was handed, per
	// port; they are rewritten by the next one.
	folded map[portKey][]endpoint
}

// sliceRead is one slice as read: its endpoints per usable port, each part
// sorted stably by address.
type sliceRead struct {
	index int // the slice's position in the translation that last used it
	parts []part
	gone  bool
}

// part is the endpoints one slice lists for one of its ports.
type part struct {
	key   portKey
	from  *sliceRead
	items []endpoint
}

// listed is one endpoint in a port's merged list, with the part that
// lists it: where the slice stands decides between copies of an address.
type listed struct {
	ep   *endpoint
	part *part
}

// collect is collectEndpoints through the memo.
func (m *EndpointMemo) collect(epSlices []*discoveryv1.EndpointSlice, cfg Config) endpointIndex {
	if m.read == nil || m.proxyName != cfg.ServiceProxyName || m.families != cfg.Families {
		*m = EndpointMemo{proxyName: cfg.ServiceProxyName, families: cfg.Families,
			read: map[*discoveryv1.EndpointSlice]*sliceRead{}, ports: map[portKey][]listed{}, folded: map[portKey][]endpoint{}}
	}
	for _, r := range m.read {
		r.gone = true
	}
	var added []*sliceRead
	for i, s := range epSlices {
		if s == nil {
			continue
		}
		r, ok := m.read[s]
		switch {
		case !ok:
			r = readSlice(s, cfg)
			m.read[s] = r
			added = append(added, r)
		case !r.gone:
			continue // listed twice: its copies fold into the first's
		}
		r.index, r.gone = i, false
	}
	removed := false
	for s, r := range m.read {
		if r.gone {
			delete(m.read, s)
			removed = true
		}
	}
	if removed || len(added) > 0 {
		m.update(added, removed)
	}
	return m.fold(cfg.NodeName)
}

// readSlice reads one slice's usable ports.
func readSlice(s *discoveryv1.EndpointSlice, cfg Config) *sliceRead {
	r := &sliceRead{}
	if !sliceUsable(s, cfg) {
		return r
	}
	for _, p := range s.Ports {
		key, port, ok := slicePort(s, p)
		if !ok {
			continue
		}
		var items []endpoint
		for j := range s.Endpoints {
			if ep, ok := newEndpoint(&s.Endpoints[j], port, key.v6, cfg); ok {
				items = append(items, ep)
			}
		}
		if len(items) == 0 {
			continue
		}
		slices.SortStableFunc(items, func(a, b endpoint) int { return a.addr.Compare(b.addr) })
		r.parts = append(r.parts, part{key: key, from: r, items: items})
	}
	return r
}

// update takes the endpoints of the slices gone out of every port's list
// and merges the new slices' in.
func (m *EndpointMemo) update(added []*sliceRead, removed bool) {
	if removed {
		for key, l := range m.ports {
			l = slices.DeleteFunc(l, func(e listed) bool { return e.part.from.gone })
			if len(l) == 0 {
				delete(m.ports, key)
				continue
			}
			m.ports[key] = l
		}
	}
	byKey := map[portKey][]listed{}
	for _, r := range added {
		for i := range r.parts {
			p := &r.parts[i]
			for j := range p.items {
				byKey[p.key] = append(byKey[p.key], listed{ep: &p.items[j], part: p})
			}
		}
	}
	for key, in := range byKey {
		slices.SortStableFunc(in, compareListed)
		m.ports[key], m.spare = merge(m.spare[:0], m.ports[key], in), m.ports[key]
	}
}

func compareListed(a, b listed) int { return a.ep.addr.Compare(b.ep.addr) }

// merge appends to out the sorted lists have and in merged: each of in
// goes after the copies of its address in have, found by a binary search,
// and the endpoints of have before it go in one copy.
func merge(out, have, in []listed) []listed {
	out = slices.Grow(out, len(have)+len(in))
	for _, e := range in {
		i, _ := slices.BinarySearchFunc(have, e, func(h, e listed) int {
			if h.ep.addr.Compare(e.ep.addr) <= 0 {
				return -1
			}
			return 1
		})
		out = append(append(out, have[:i]...), e)
		have = have[i:]
	}
	return append(out, have...)
}

// fold hands out each port's endpoints with every address once: of its
// copies, the one collectEndpoints keeps (the first listed, in slice and
// port order, unless a later one is better).
func (m *EndpointMemo) fold(nodeName string) endpointIndex {
	idx := make(endpointIndex, len(m.ports))
	for key, l := range m.ports {
		out := m.folded[key][:0]
		for i := 0; i < len(l); {
			j := i + 1
			for j < len(l) && l[j].ep.addr == l[i].ep.addr {
				j++
			}
			out = append(out, pick(l[i:j], nodeName))
			i = j
		}
		m.folded[key] = out
		idx[key] = out
	}
	for key := range m.folded {
		if _, ok := m.ports[key]; !ok {
			delete(m.folded, key)
		}
	}
	return idx
}

// pick chooses among the copies of one address as collectEndpoints does,
// taking them in the order the slices list them.
func pick(copies []listed, nodeName string) endpoint {
	if len(copies) == 1 {
		return *copies[0].ep
	}
	ordered := slices.Clone(copies)
	// Two ports of one slice with one key list an address at two port
	// numbers, never as copies: only the slice's position orders them.
	slices.SortStableFunc(ordered, func(a, b listed) int { return a.part.from.index - b.part.from.index })
	kept := *ordered[0].ep
	for _, c := range ordered[1:] {
		if better(*c.ep, kept, nodeName) {
			kept = *c.ep
		}
	}
	return kept
}
