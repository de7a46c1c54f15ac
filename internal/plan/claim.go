package plan

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// Why is why a desired frontend is refused.
type Why int

const (
	// Unserved: its address is of a family the agent does not serve, where
	// it plans nothing at all.
	Unserved Why = iota + 1
	// Foreign: its virtual server exists and is not ours (keepalived's,
	// say); creating or updating it would take it over, and deleting it
	// with the Service would destroy the other tool's.
	Foreign
	// SharedAddr: its address carries another tool's virtual server and
	// is not bound on our link; binding it would make that virtual server
	// look ours (the link's addresses are what mark ours), and a later sync
	// would take it over or delete it.
	SharedAddr
	// ReservedAddr: its address is a Node's, this host's, the API
	// server's or inside the pod or cluster CIDRs, and not a ClusterIP
	// (Reserved); binding it would cut the node off from whatever listens
	// there. A load-balancer frontend on an address only this host's
	// interfaces have is served unbound instead (Reserved.Refuses).
	ReservedAddr
)

func (w Why) String() string {
	switch w {
	case Unserved:
		return "unserved-family"
	case Foreign:
		return "foreign"
	case SharedAddr:
		return "shared-address"
	case ReservedAddr:
		return "reserved-address"
	}
	return fmt.Sprintf("why(%d)", int(w))
}

// Refusal is a desired frontend the plan leaves alone: no operation on its
// virtual server, no set member for it, no bind of its address.
type Refusal struct {
	Key model.VSKey
	Why Why
	// By is the virtual server not ours that blocks it (Foreign,
	// SharedAddr).
	By model.VSKey
}

// String says what was refused and why, for the Service's owner.
func (r Refusal) String() string {
	switch r.Why {
	case Unserved:
		return fmt.Sprintf("frontend %s is of an address family the agent does not serve: not served", r.Key)
	case Foreign:
		return fmt.Sprintf("frontend %s is a virtual server the agent does not own: not served, left to its owner", r.Key)
	case ReservedAddr:
		return fmt.Sprintf("frontend %s is on an address of a node, of this host, of the API server or of the pod network: not served, its address not bound", r.Key)
	}
	return fmt.Sprintf("frontend %s: its address carries %s, a virtual server the agent does not own: not served, its address not bound", r.Key, r.By)
}

// Plan is Diff that also returns the desired frontends it refused. The
// ownership rule that guards deletes guards creates and updates too: a
// desired frontend of a family not served, or that exists in the kernel
// and is not ours, or whose address (to be bound) carries a
// virtual server not ours, is taken out of desired before diffing, with
// its set members on both sides (so they are neither added nor deleted)
// and its address. It is here, in the pure diff, so that every caller
// (sync, drift, cleanup) and the fuzz tests see one rule.
func Plan(desired, observed model.State, owner Owner) ([]model.Op, []Refusal) {
	desired, observed, refused := owner.refuse(desired, observed)
	return diff(desired, observed, owner), refused
}

// refuse is the states a plan diffs, the refused frontends out of them,
// and the refusals.
func (o Owner) refuse(desired, observed model.State) (model.State, model.State, []Refusal) {
	refused := o.refusals(desired, observed)
	desired, observed = withoutRefused(desired, observed, refused, o)
	return desired, observed, refused
}

// refusals lists the desired frontends owner refuses.
func (o Owner) refusals(desired, observed model.State) []Refusal {
	var out []Refusal
	for k := range desired.Services {
		switch by, foreignAddr := o.foreignOn(k.Addr, desired); {
		case k.FWMark != 0:
			// Another tool's service on the mark: the LocalSources
			// members that would steer connections into it go too.
			if o.isForeign(k, observed) {
				out = append(out, Refusal{Key: k, Why: Foreign, By: k})
			}
		case !o.policy.Families.Has(k.Addr):
			out = append(out, Refusal{Key: k, Why: Unserved})
		case o.claimsReserved(k):
			out = append(out, Refusal{Key: k, Why: ReservedAddr})
		case o.isForeign(k, observed):
			out = append(out, Refusal{Key: k, Why: Foreign, By: k})
		case foreignAddr:
			out = append(out, Refusal{Key: k, Why: SharedAddr, By: by})
		}
	}
	return out
}

// Made returns the owner that also counts as ours, for creates and
// updates, the virtual servers this process created itself: one whose
// set member and VIP bind failed after it was made carries no mark yet,
// and must still be finished rather than refused as another tool's. (It
// lasts as long as the process; a durable record is what a set of our
// frontends, written before each create, gives.) made must not change
// while the owner is in use.
func (o Owner) Made(made map[model.VSKey]struct{}) Owner {
	o.made = made
	if o.foreign != nil { // its index depends on what counts as ours
		o.foreign = newForeignIndex(o.foreign.services)
	}
	return o
}

// claims tells whether the agent may create, change or bind for k: one
// it made or owns, or one it may adopt, inside the excluded CIDRs too. A
// desired frontend there that kube-proxy made (its address bound on our
// link, or a NodePort) is taken over, as kube-proxy itself takes over
// whatever virtual server a Service names; any other virtual server there
// is refused as another tool's. A firewall-mark virtual server is claimed
// as it is owned: by our LocalSources member carrying its mark.
func (o Owner) claims(k model.VSKey) bool {
	if _, made := o.made[k]; made {
		return true
	}
	if k.FWMark != 0 {
		return o.OwnsService(k)
	}
	return o.recorded(k) || o.adoptable(k)
}

// isForeign tells whether k exists in the kernel and is not ours.
func (o Owner) isForeign(k model.VSKey, observed model.State) bool {
	_, exists := observed.Services[k]
	return exists && !o.claims(k)
}

// foreignOn tells whether binding a, a desired VIP not yet on our link,
// would make a virtual server not ours look ours, and names one.
func (o Owner) foreignOn(a netip.Addr, desired model.State) (model.VSKey, bool) {
	if _, vip := desired.Addrs[a]; !vip {
		return model.VSKey{}, false
	}
	if _, bound := o.linkAddrs[a]; bound || o.foreign == nil {
		return model.VSKey{}, false
	}
	k, ok := o.foreign.on(o)[a]
	return k, ok
}

// foreignIndex is, per address not bound on our link, one virtual server
// on it that is not ours. It walks the whole table, so it is built once
// per owner and only when a diff wants to bind a new address.
type foreignIndex struct {
	once     sync.Once
	services map[model.VSKey]*model.Service
	byAddr   map[netip.Addr]model.VSKey
}

func newForeignIndex(services map[model.VSKey]*model.Service) *foreignIndex {
	return &foreignIndex{services: services}
}

func (f *foreignIndex) on(o Owner) map[netip.Addr]model.VSKey {
	f.once.Do(func() {
		f.byAddr = map[netip.Addr]model.VSKey{}
		for k := range f.services {
			if k.FWMark == 0 && !o.claims(k) {
				if old, ok := f.byAddr[k.Addr]; !ok || k.Compare(old) < 0 {
					f.byAddr[k.Addr] = k
				}
			}
		}
	})
	return f.byAddr
}

// withoutRefused returns desired without the refused frontends, the set
// members of refused frontends or of a family not served and the
// addresses refused, and
// observed without those frontends and set members, so that the diff plans
// no operation at all on them (not even the removal of a set member or
// virtual server of ours that a refused frontend still has). A frontend
// refused for its reserved address stays in observed: what of it is ours
// (an older agent's, recorded in our sets) is removed, and no reserved
// address is ever bound or listed as a VIP. Without anything to take out
// it returns its inputs; services are never copied.
func withoutRefused(desired, observed model.State, refused []Refusal, owner Owner) (model.State, model.State) {
	gone := make(map[model.VSKey]bool, len(refused))      // out of desired
	leftAlone := make(map[model.VSKey]bool, len(refused)) // out of both
	for _, r := range refused {
		gone[r.Key] = true
		if r.Why != ReservedAddr {
			leftAlone[r.Key] = true
		}
	}
	reserved := owner.policy.Reserved
	// A member naming a frontend not ours would make it look ours: it is
	// refused even when no desired virtual server asks for that frontend.
	keepEntry := func(skip map[model.VSKey]bool) func(model.SetEntry) bool {
		return func(e model.SetEntry) bool {
			if mk, ok := MarkedFor(e); ok && skip[mk] {
				return false
			}
			k, ok := FrontendOf(e)
			return !ok || (!skip[k] && owner.policy.Families.Has(k.Addr) && !owner.isForeign(k, observed))
		}
	}
	keepAddr := func(a netip.Addr) bool {
		_, foreign := owner.foreignOn(a, desired)
		return owner.policy.Families.Has(a) && !foreign && !reserved.Has(a)
	}
	keepWanted := keepEntry(gone)
	keepDesiredEntry := func(e model.SetEntry) bool {
		// A VIP member guards an address as bound by us (and records it as
		// ours inside the excluded CIDRs): none for an address not bound.
		if shim.KindOf(e) == shim.VIPs && !keepAddr(e.Addr()) {
			return false
		}
		if k, ok := FrontendOf(e); ok && (owner.claimsReserved(k) || adoptsUnwanted(k, desired, observed, owner)) {
			return false // no member makes a frontend there look ours
		}
		return keepWanted(e)
	}
	keepObservedEntry := keepEntry(leftAlone)
	if len(gone) == 0 && all(desired.Addrs, keepAddr) && all(desired.Sets, keepDesiredEntry) && all(observed.Sets, keepObservedEntry) {
		return desired, observed
	}
	d := model.State{Services: filter(desired.Services, func(k model.VSKey) bool { return !gone[k] }),
		Addrs: filter(desired.Addrs, keepAddr), Sets: filter(desired.Sets, keepDesiredEntry)}
	o := observed
	if len(leftAlone) > 0 || !all(observed.Sets, keepObservedEntry) {
		o = model.State{Services: filter(observed.Services, func(k model.VSKey) bool { return !leftAlone[k] }),
			Addrs: observed.Addrs, Sets: filter(observed.Sets, keepObservedEntry)}
	}
	return d, o
}

// adoptsUnwanted tells whether a member naming k would record as ours a
// virtual server in the kernel that no desired one is and that the agent
// may only adopt for a Service naming it (inside the excluded CIDRs): the
// record would make it ours to delete.
func adoptsUnwanted(k model.VSKey, desired, observed model.State, owner Owner) bool {
	if _, wanted := desired.Services[k]; wanted {
		return false
	}
	_, exists := observed.Services[k]
	return exists && !owner.OwnsService(k)
}

// all tells whether keep holds for every key of m.
func all[K comparable, V any](m map[K]V, keep func(K) bool) bool {
	for k := range m {
		if !keep(k) {
			return false
		}
	}
	return true
}

// filter copies the entries of m whose key keep holds for.
func filter[K comparable, V any](m map[K]V, keep func(K) bool) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		if keep(k) {
			out[k] = v
		}
	}
	return out
}

// FrontendOf is the frontend a set member is about; false for hairpin
// members, which are about an endpoint.
func FrontendOf(e model.SetEntry) (model.VSKey, bool) {
	if k := shim.KindOf(e); k == 0 || k == shim.LoopBack {
		return model.VSKey{}, false
	}
	return model.NewVSKey(e.Proto(), e.Addr(), e.Port()), true
}

// A Pass makes one part of a plan when it is called.
type Pass func() []model.Op

// Staged is Plan cut into passes, in apply order, each made only when it
// is called: applied one after another, a cold start holds one pass's
// operations at a time rather than all of them (a whole table's plan is
// the largest part of the start's peak heap). Laid end to end the
// passes are exactly Plan's operations in Plan's order. desired and
// observed must not change until the last pass is made: a caller that
// applies the passes to the state it planned from passes a copy.
func Staged(desired, observed model.State, owner Owner) ([]Pass, []Refusal) {
	desired, observed, refused := owner.refuse(desired, observed)
	table := func(emit func(model.Op)) { diffTable(desired, observed, owner, emit) }
	sets := func(emit func(model.Op)) { diffSets(desired.Sets, observed.Sets, emit) }
	// The table's walk makes the operations on virtual servers, real
	// servers and VIPs, the sets' walk the members; each pass keeps the
	// stages between two of the other walk's.
	return []Pass{
		stagePass(sets, -1, -1), // the frontends' ownership records
		stagePass(table, int(model.AddService), int(model.UpdateReal)),
		stagePass(sets, int(model.AddSetEntry), int(model.AddSetEntry)),
		stagePass(table, int(model.BindAddr), int(model.UnbindAddr)),
		stagePass(sets, int(model.DeleteSetEntry), int(model.DeleteSetEntry)),
	}, refused
}

// stagePass is the pass of the operations walk makes whose stage is from
// first to last, sorted. The walk runs twice, counting and then filling,
// so the pass is held once, in a slice of its size.
func stagePass(walk func(emit func(model.Op)), first, last int) Pass {
	return func() []model.Op {
		keep := func(o model.Op) bool {
			if o.Kind != model.AddSetEntry { // its stage is its kind's
				return int(o.Kind) >= first && int(o.Kind) <= last
			}
			if first > int(model.AddSetEntry) { // no member's add is of the pass: name no set
				return false
			}
			s := stage(o)
			return s >= first && s <= last
		}
		n := 0
		walk(func(o model.Op) {
			if keep(o) {
				n++
			}
		})
		ops := make([]model.Op, 0, n)
		walk(func(o model.Op) {
			if keep(o) {
				ops = append(ops, o)
			}
		})
		Sort(ops)
		return ops
	}
}
