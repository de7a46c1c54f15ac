package plan

import (
	"slices"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
	"github.com/kube-ipvs/kube-ipvs/internal/workers"
)

// Diff returns the operations that turn observed into desired, in apply
// order. Virtual servers and addresses that are only observed are removed
// only when owner says they are ours; desired frontends that are not ours
// to make are refused (see Plan). Real servers of a desired virtual server
// are all ours: the service is.
func Diff(desired, observed model.State, owner Owner) []model.Op {
	ops, _ := Plan(desired, observed, owner)
	return ops
}

// diff is Diff once the refused frontends are out of desired. It walks
// the states twice, counting and then filling, so the operations are held
// once, in a slice of their size: growing it by appends would hold up to
// twice as many at a cold start's peak. The table and the sets are walked
// side by side when they are large (a cold start's are each a table's
// worth of work), each filling its own part of the slice.
func diff(desired, observed model.State, owner Owner) []model.Op {
	parts := [...]func(emit func(model.Op)){
		func(emit func(model.Op)) { diffTable(desired, observed, owner, emit) },
		func(emit func(model.Op)) { diffSets(desired.Sets, observed.Sets, emit) },
	}
	each := func(f func(i int)) {
		for i := range parts {
			f(i)
		}
	}
	if len(desired.Sets)+len(observed.Sets) >= parallelFrom {
		each = func(f func(i int)) { workers.Each(len(parts), 1, f) }
	}
	var count [len(parts)]int
	each(func(i int) { parts[i](func(model.Op) { count[i]++ }) })
	ops := make([]model.Op, count[0]+count[1])
	each(func(i int) {
		// Each part fills its own region; the states do not change between
		// the walks, so a walk emits what it counted (one more would index
		// past its region and panic, not overwrite the other's).
		region, j := ops[:count[0]], 0
		if i == 1 {
			region = ops[count[0]:]
		}
		parts[i](func(op model.Op) { region[j] = op; j++ })
	})
	Sort(ops)
	return ops
}

// diffTable emits the operations on virtual servers, real servers and
// VIPs.
func diffTable(desired, observed model.State, owner Owner, emit func(model.Op)) {
	for k, want := range desired.Services {
		diffService(want, observed.Services[k], emit)
	}
	for k := range observed.Services {
		if _, ok := desired.Services[k]; !ok && owner.OwnsService(k) {
			emit(model.Op{Kind: model.DeleteService, VS: model.VirtualServer{Key: k}})
		}
	}
	for a := range desired.Addrs {
		if _, ok := observed.Addrs[a]; !ok {
			emit(model.Op{Kind: model.BindAddr, Addr: a})
		}
	}
	for a := range observed.Addrs {
		if _, ok := desired.Addrs[a]; !ok && owner.OwnsAddr(a) {
			emit(model.Op{Kind: model.UnbindAddr, Addr: a})
		}
	}
}

// diffService compares one desired service with what is there (nil: absent).
func diffService(want, have *model.Service, emit func(model.Op)) {
	if have == nil {
		emit(model.Op{Kind: model.AddService, VS: want.VirtualServer})
		for _, rs := range want.Reals.All() {
			emit(model.Op{Kind: model.AddReal, VS: want.VirtualServer, RS: rs})
		}
		return
	}
	if !want.VirtualServer.Equal(have.VirtualServer) {
		emit(model.Op{Kind: model.UpdateService, VS: want.VirtualServer})
	}
	diffReals(want, have, emit)
}

// diffReals compares the real servers of a desired virtual server with
// the ones there, walking both sorted lists side by side: one pass, no
// search per real server, so that a virtual server of thousands costs a
// comparison each. The same list on both sides (the cache shares the
// desired value where the kernel holds it) differs in nothing.
func diffReals(want, have *model.Service, emit func(model.Op)) {
	w, h := want.Reals.All(), have.Reals.All()
	if len(w) == len(h) && (len(w) == 0 || &w[0] == &h[0]) {
		return
	}
	for len(w) > 0 || len(h) > 0 {
		c := 0
		switch {
		case len(w) == 0:
			c = 1
		case len(h) == 0:
			c = -1
		default:
			c = w[0].Addr.Compare(h[0].Addr)
		}
		switch {
		case c > 0:
			emit(model.Op{Kind: model.DeleteReal, VS: want.VirtualServer, RS: h[0]})
			h = h[1:]
		case c < 0:
			emit(model.Op{Kind: model.AddReal, VS: want.VirtualServer, RS: w[0]})
			w = w[1:]
		default:
			if w[0] != h[0] {
				emit(model.Op{Kind: model.UpdateReal, VS: want.VirtualServer, RS: w[0]})
			}
			w, h = w[1:], h[1:]
		}
	}
}

// diffSets adds and removes set members. Every observed member is ours:
// only the shim's own sets are ever read.
func diffSets(desired, observed map[model.SetEntry]struct{}, emit func(model.Op)) {
	for e := range desired {
		if _, ok := observed[e]; !ok {
			emit(model.Op{Kind: model.AddSetEntry, Entry: e})
		}
	}
	for e := range observed {
		if _, ok := desired[e]; !ok {
			emit(model.Op{Kind: model.DeleteSetEntry, Entry: e})
		}
	}
}

// Sort puts operations in apply order, then in listing order so that the
// same change always prints the same way: by stage (apply order), then by
// subject (virtual server key, real server address, VIP), then by member
// rank (entryRank) and member. No two operations of a plan compare equal
// (one per kind and subject), so an unstable sort gives the one order.
//
// A cold start sorts an operation per virtual server, real server, VIP
// and set member before the first reaches the kernel: the operations are
// first counted into buckets of one stage and rank (every operation of a
// bucket is of one kind), and each bucket is sorted by what names that
// kind's subject alone. Each operation's stage and rank are worked out
// once, not at every comparison (they parse set names), and operations
// are moved once, not at every swap, and in place.
//
// Buckets are disjoint, so a large plan's are sorted in parallel (on the
// CPUs but one, workers.Each): a cold start's real servers and set members
// are its two largest buckets, and sorting them side by side shortens the
// first sync.
func Sort(ops []model.Op) {
	order := bucketed(ops)
	sortPart := func(i int) {
		b := order.buckets[i]
		if part := order.idx[b.from:b.to]; len(part) > 1 {
			slices.SortFunc(part, compareFor(ops, ops[part[0]].Kind))
		}
	}
	if len(ops) < parallelFrom {
		for i := range order.buckets {
			sortPart(i)
		}
	} else {
		workers.Each(len(order.buckets), 1, sortPart)
	}
	idx := order.idx
	permute(ops, func(j int) int { return int(idx[j]) }, func(j int) { idx[j] = -1 })
}

// parallelFrom is how many operations (or set members) a plan must hold
// before its buckets are sorted, and its table and sets diffed, in
// parallel: a change's few are done faster than workers start.
const parallelFrom = 20000

// sortBuckets are the operations' indexes counted into (stage, rank)
// buckets, in bucket order.
type sortBuckets struct {
	idx     []int32
	buckets []struct{ from, to int }
}

// Stages run from -1 (a frontend's record) to the last kind, ranks 0 to 2.
const (
	stageCount = int(model.DeleteSetEntry) + 2
	rankCount  = 3
)

// bucketed counts the operations into their buckets (a counting sort: two
// passes, no comparison).
func bucketed(ops []model.Op) sortBuckets {
	of := make([]uint8, len(ops))
	var count [stageCount * rankCount]int
	for i := range ops {
		b := (stage(ops[i])+1)*rankCount + entryRank(ops[i])
		of[i] = uint8(b)
		count[b]++
	}
	var at [stageCount * rankCount]int
	out := sortBuckets{idx: make([]int32, len(ops))}
	from := 0
	for b, n := range count {
		at[b] = from
		if n > 0 {
			out.buckets = append(out.buckets, struct{ from, to int }{from, from + n})
		}
		from += n
	}
	for i, b := range of {
		out.idx[at[b]] = int32(i)
		at[b]++
	}
	return out
}

// compareFor orders operations of one kind by their subjects.
func compareFor(ops []model.Op, k model.OpKind) func(x, y int32) int {
	switch k {
	case model.AddService, model.UpdateService, model.DeleteService:
		return func(x, y int32) int { return ops[x].VS.Key.Compare(ops[y].VS.Key) }
	case model.AddReal, model.UpdateReal, model.DeleteReal:
		return func(x, y int32) int {
			a, b := &ops[x], &ops[y]
			if c := a.VS.Key.Compare(b.VS.Key); c != 0 {
				return c
			}
			return a.RS.Addr.Compare(b.RS.Addr)
		}
	case model.BindAddr, model.UnbindAddr:
		return func(x, y int32) int { return ops[x].Addr.Compare(ops[y].Addr) }
	}
	return func(x, y int32) int { return ops[x].Entry.Compare(ops[y].Entry) }
}

// permute moves ops[from(j)] to ops[j] for every j, in place: each cycle of
// the permutation is followed once, holding one operation aside, and done
// marks a place filled (from must return a negative number for it after).
// A sorted copy would double what a cold start's plan holds at its peak,
// and that plan is the largest value a start holds.
func permute(ops []model.Op, from func(int) int, done func(int)) {
	for start := range ops {
		if from(start) < 0 {
			continue
		}
		held := ops[start]
		for j := start; ; {
			src := from(j)
			done(j)
			if src == start {
				ops[j] = held
				break
			}
			ops[j], j = ops[src], src
		}
	}
}

// stage is an operation's place in apply order: its kind's, except that a
// frontend's ownership record is added first, before the virtual server it
// records is created (its removal, like every member's, comes last, after
// the virtual server is deleted).
func stage(o model.Op) int {
	// Ownership records go before anything: a LocalSources member is
	// the record of its firewall-mark virtual server.
	if o.Kind == model.AddSetEntry && (shim.KindOf(o.Entry) == shim.Frontends || shim.KindOf(o.Entry) == shim.LocalSources) {
		return -1
	}
	return int(o.Kind)
}

// entryRank orders set members within their kind so that a source-range
// filter never has fewer allowed ranges than it should: allowed ranges are
// added before the filter member that makes them count, and the filter
// member is removed before its ranges. A VIPs member goes after every
// other: while its address is still bound (its unbind failed), its ports
// stay closed to host sockets.
func entryRank(o model.Op) int {
	switch kind := shim.KindOf(o.Entry); {
	case o.Kind == model.AddSetEntry && kind == shim.SourceRanges:
		return 0
	case o.Kind == model.DeleteSetEntry && kind == shim.Firewall:
		return 0
	case o.Kind == model.DeleteSetEntry && kind == shim.VIPs:
		return 2
	}
	return 1
}
