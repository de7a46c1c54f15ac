package plan

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// Diff returns the operations that turn observed into desired, in apply
// order. Virtual servers and addresses that are only observed are removed
// only when owner says they are ours; desired frontends that are not ours
// to make are refused (see Plan). Real servers of a desired virtual server
// are all ours: the service is.
func Diff(desired, observed model.State, owner Owner) []Op {
	ops, _ := Plan(desired, observed, owner)
	return ops
}

// diff is Diff once the refused frontends are out of desired.
func diff(desired, observed model.State, owner Owner) []Op {
	var ops []Op
	for k, want := range desired.Services {
		ops = append(ops, diffService(want, observed.Services[k])...)
	}
	for k := range observed.Services {
		if _, ok := desired.Services[k]; !ok && owner.OwnsService(k) {
			ops = append(ops, Op{Kind: DeleteService, VS: model.VirtualServer{Key: k}})
		}
	}
	for a := range desired.Addrs {
		if _, ok := observed.Addrs[a]; !ok {
			ops = append(ops, Op{Kind: BindAddr, Addr: a})
		}
	}
	for a := range observed.Addrs {
		if _, ok := desired.Addrs[a]; !ok && owner.OwnsAddr(a) {
			ops = append(ops, Op{Kind: UnbindAddr, Addr: a})
		}
	}
	ops = append(ops, diffSets(desired.Sets, observed.Sets)...)
	Sort(ops)
	return ops
}

// diffService compares one desired service with what is there (nil: absent).
func diffService(want, have *model.Service) []Op {
	var ops []Op
	haveReals := map[model.RealServer]bool{}
	if have == nil {
		ops = append(ops, Op{Kind: AddService, VS: want.VirtualServer})
	} else {
		if !want.VirtualServer.Equal(have.VirtualServer) {
			ops = append(ops, Op{Kind: UpdateService, VS: want.VirtualServer})
		}
		for addr, rs := range have.Reals {
			haveReals[rs] = true
			if _, ok := want.Reals[addr]; !ok {
				ops = append(ops, Op{Kind: DeleteReal, VS: want.VirtualServer, RS: rs})
			}
		}
	}
	for addr, rs := range want.Reals {
		switch {
		case have == nil:
			ops = append(ops, Op{Kind: AddReal, VS: want.VirtualServer, RS: rs})
		case haveReals[rs]:
		case hasReal(have, addr):
			ops = append(ops, Op{Kind: UpdateReal, VS: want.VirtualServer, RS: rs})
		default:
			ops = append(ops, Op{Kind: AddReal, VS: want.VirtualServer, RS: rs})
		}
	}
	return ops
}

// diffSets adds and removes set members. Every observed member is ours:
// only the shim's own sets are ever read.
func diffSets(desired, observed map[model.SetEntry]struct{}) []Op {
	var ops []Op
	for e := range desired {
		if _, ok := observed[e]; !ok {
			ops = append(ops, Op{Kind: AddSetEntry, Entry: e})
		}
	}
	for e := range observed {
		if _, ok := desired[e]; !ok {
			ops = append(ops, Op{Kind: DeleteSetEntry, Entry: e})
		}
	}
	return ops
}

func hasReal(s *model.Service, addr netip.AddrPort) bool {
	_, ok := s.Reals[addr]
	return ok
}

// Sort puts operations in apply order, then in listing order so that the
// same change always prints the same way. No two operations of a plan
// compare equal (one per kind and subject), so an unstable sort gives the
// one order. Each operation's stage and member rank are worked out once,
// not at every comparison (they parse set names), and operations are moved
// once, not at every swap: a cold start sorts 250,000 (issue 12).
func Sort(ops []Op) {
	type key struct {
		stage, rank int8
		i           int32
	}
	keys := make([]key, len(ops))
	for i := range ops {
		keys[i] = key{stage: int8(stage(ops[i])), rank: int8(entryRank(ops[i])), i: int32(i)}
	}
	slices.SortFunc(keys, func(x, y key) int {
		a, b := &ops[x.i], &ops[y.i]
		return cmp.Or(
			cmp.Compare(x.stage, y.stage),
			a.VS.Key.Compare(b.VS.Key),
			a.RS.Addr.Compare(b.RS.Addr),
			a.Addr.Compare(b.Addr),
			cmp.Compare(x.rank, y.rank),
			a.Entry.Compare(b.Entry),
		)
	})
	sorted := make([]Op, len(ops))
	for i, k := range keys {
		sorted[i] = ops[k.i]
	}
	copy(ops, sorted)
}

// stage is an operation's place in apply order: its Kind's, except that a
// frontend's ownership record is added first, before the virtual server it
// records is created (its removal, like every member's, comes last, after
// the virtual server is deleted).
func stage(o Op) int {
	if o.Kind == AddSetEntry && shim.KindOf(o.Entry) == shim.Frontends {
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
func entryRank(o Op) int {
	switch kind := shim.KindOf(o.Entry); {
	case o.Kind == AddSetEntry && kind == shim.SourceRanges:
		return 0
	case o.Kind == DeleteSetEntry && kind == shim.Firewall:
		return 0
	case o.Kind == DeleteSetEntry && kind == shim.VIPs:
		return 2
	}
	return 1
}
