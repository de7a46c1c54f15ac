package plan

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// TestSortIsOneOrder: however a plan's operations arrive, Sort (which
// permutes them in place, cycle by cycle) yields the one order, holding
// every operation once.
func TestSortIsOneOrder(t *testing.T) {
	var ops []model.Op
	for i := range 200 {
		vip := netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(i%250 + 1)})
		k := model.NewVSKey(model.TCP, vip, 80)
		ops = append(ops,
			model.Op{Kind: model.AddService, VS: model.VirtualServer{Key: k, Scheduler: "rr"}},
			model.Op{Kind: model.BindAddr, Addr: vip},
			model.Op{Kind: model.AddSetEntry, Entry: shim.Entry(shim.Frontends, vip, model.TCP, 80)},
			model.Op{Kind: model.DeleteSetEntry, Entry: shim.Entry(shim.NoEndpoints, vip, model.TCP, 80)},
		)
		for e := range i % 4 {
			ops = append(ops, model.Op{Kind: model.AddReal, VS: model.VirtualServer{Key: k},
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
func sameOps(a, b []model.Op) bool {
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

// TestSortIsListingOrder: the bucketed sort gives exactly the order its
// comment states (stage, virtual server, real server, VIP, member rank,
// member), over every kind, several sets and both member ranks, for a
// plan sorted in line and one large enough to be sorted in parallel.
func TestSortIsListingOrder(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4)) // workers at once, whatever the machine
	for _, n := range []int{300, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { testSortIsListingOrder(t, n) })
	}
}

func testSortIsListingOrder(t *testing.T, n int) {
	ops := coldPlan(n)
	for i := range 50 {
		vip := netip.AddrFrom4([4]byte{10, 97, 0, byte(i + 1)})
		k := model.NewVSKey(model.UDP, vip, 53)
		ops = append(ops,
			model.Op{Kind: model.UpdateService, VS: model.VirtualServer{Key: k, Scheduler: "lc"}},
			model.Op{Kind: model.DeleteService, VS: model.VirtualServer{Key: model.NewVSKey(model.TCP, vip, 53)}},
			model.Op{Kind: model.UpdateReal, VS: model.VirtualServer{Key: k}, RS: rs(fmt.Sprintf("10.244.9.%d:53", i+1), 0)},
			model.Op{Kind: model.DeleteReal, VS: model.VirtualServer{Key: k}, RS: rs(fmt.Sprintf("10.244.8.%d:53", i+1), 1)},
			model.Op{Kind: model.UnbindAddr, Addr: netip.AddrFrom4([4]byte{10, 98, 0, byte(i + 1)})},
			model.Op{Kind: model.AddSetEntry, Entry: shim.SourceRangeEntry(vip, model.UDP, 53, netip.MustParsePrefix(fmt.Sprintf("192.0.%d.0/24", i)))},
			model.Op{Kind: model.AddSetEntry, Entry: shim.Entry(shim.Firewall, vip, model.UDP, 53)},
			model.Op{Kind: model.DeleteSetEntry, Entry: shim.Entry(shim.Firewall, vip, model.TCP, 53)},
			model.Op{Kind: model.DeleteSetEntry, Entry: shim.VIPEntry(netip.AddrFrom4([4]byte{10, 98, 0, byte(i + 1)}))},
		)
	}
	want := slices.Clone(ops)
	slices.SortFunc(want, func(a, b model.Op) int {
		for _, c := range []int{
			cmp.Compare(stage(a), stage(b)), a.VS.Key.Compare(b.VS.Key), a.RS.Addr.Compare(b.RS.Addr),
			a.Addr.Compare(b.Addr), cmp.Compare(entryRank(a), entryRank(b)), a.Entry.Compare(b.Entry),
		} {
			if c != 0 {
				return c
			}
		}
		return 0
	})
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
	if parallel := len(ops) >= parallelFrom; parallel != (n == 1000) {
		t.Fatalf("%d operations: sorted in parallel %v, not what the case is for", len(ops), parallel)
	}
	Sort(ops)
	if !slices.Equal(ops, want) {
		t.Fatalf("sorted to another order:\n%s\nwant:\n%s", render(ops), render(want))
	}
}

// coldPlan is what a cold start of n ClusterIP Services × 10 endpoints
// plans: a virtual server, ten reals, the VIP and the set members each
// (25 operations a Service).
func coldPlan(n int) []model.Op {
	var ops []model.Op
	for i := range n {
		vip := netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(i%250 + 1)})
		k := model.NewVSKey(model.TCP, vip, 80)
		ops = append(ops,
			model.Op{Kind: model.AddService, VS: model.VirtualServer{Key: k, Scheduler: "rr"}},
			model.Op{Kind: model.BindAddr, Addr: vip},
			model.Op{Kind: model.AddSetEntry, Entry: shim.Entry(shim.Frontends, vip, model.TCP, 80)},
			model.Op{Kind: model.AddSetEntry, Entry: shim.Entry(shim.ClusterIP, vip, model.TCP, 80)},
			model.Op{Kind: model.AddSetEntry, Entry: shim.VIPEntry(vip)},
		)
		for e := range 10 {
			ep := netip.AddrFrom4([4]byte{byte(128 + e), byte(i / 250), byte(i % 250), 1})
			ops = append(ops,
				model.Op{Kind: model.AddReal, VS: model.VirtualServer{Key: k}, RS: model.RealServer{Addr: netip.AddrPortFrom(ep, 8080), Weight: 1}},
				model.Op{Kind: model.AddSetEntry, Entry: shim.LoopBackEntry(model.TCP, netip.AddrPortFrom(ep, 8080))})
		}
	}
	return ops
}

// BenchmarkSortColdStart sorts a cold start's plan at 10,000 Services
// (250,000 operations), shuffled as a diff of maps emits them.
func BenchmarkSortColdStart(b *testing.B) {
	ops := coldPlan(10000)
	rand.New(rand.NewPCG(5, 6)).Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
	work := make([]model.Op, len(ops))
	for b.Loop() {
		copy(work, ops)
		Sort(work)
	}
}
