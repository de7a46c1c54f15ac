package plan

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// TestSortIsOneOrder: however a plan's operations arrive, Sort (which
// permutes them in place, cycle by cycle) yields the one order, holding
// every operation once.
func TestSortIsOneOrder(t *testing.T) {
	var ops []Op
	for i := range 200 {
		vip := netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(i%250 + 1)})
		k := model.NewVSKey(model.TCP, vip, 80)
		ops = append(ops,
			Op{Kind: AddService, VS: model.VirtualServer{Key: k, Scheduler: "rr"}},
			Op{Kind: BindAddr, Addr: vip},
			Op{Kind: AddSetEntry, Entry: shim.Entry(shim.Frontends, vip, model.TCP, 80)},
			Op{Kind: DeleteSetEntry, Entry: shim.Entry(shim.NoEndpoints, vip, model.TCP, 80)},
		)
		for e := range i % 4 {
			ops = append(ops, Op{Kind: AddReal, VS: model.VirtualServer{Key: k},
				RS: rs(fmt.Sprintf("10.244.%d.%d:8080", e, i%250+1), 1)})
		}
	}
	want := slices.Clone(ops)
	Sort(want)
	if !sameOps(want, ops) {
		t.Fatal("sorting lost or duplicated operations")
	}
	for i := 1; i < len(want); i++ {
		if stage(want[i-1]) > stage(want[i]) {
			t.Fatalf("%s sorted before %s", want[i-1], want[i])
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		got := slices.Clone(ops)
		rng.Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
		Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("a shuffled plan sorted to another order:\n%s\nwant:\n%s", render(got), render(want))
		}
	}
}

// sameOps tells whether a and b hold the same operations, as many times each.
func sameOps(a, b []Op) bool {
	count := map[string]int{}
	for _, o := range a {
		count[o.String()]++
	}
	for _, o := range b {
		count[o.String()]--
	}
	for _, n := range count {
		if n != 0 {
			return false
		}
	}
	return len(a) == len(b)
}
