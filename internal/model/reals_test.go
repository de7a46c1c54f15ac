package model

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

func realAt(addr string, w int) RealServer {
	return RealServer{Addr: netip.MustParseAddrPort(addr), Weight: w}
}

func addrsOf(r Reals) []string {
	var out []string
	for _, rs := range r.All() {
		out = append(out, rs.String())
	}
	return out
}

func TestRealsStaySortedAndUnique(t *testing.T) {
	var r Reals // the zero value is ready
	for _, a := range []string{"10.0.0.3:80", "10.0.0.1:80", "[fd00::1]:80", "10.0.0.2:80", "10.0.0.1:79"} {
		r.Set(realAt(a, 1))
	}
	r.Set(realAt("10.0.0.2:80", 0)) // replaces, does not add
	want := []string{"-r 10.0.0.1:79 -m -w 1", "-r 10.0.0.1:80 -m -w 1", "-r 10.0.0.2:80 -m -w 0", "-r 10.0.0.3:80 -m -w 1", "-r [fd00::1]:80 -m -w 1"}
	if got := addrsOf(r); !slices.Equal(got, want) {
		t.Fatalf("after sets:\n got %q\nwant %q", got, want)
	}
	if got, ok := r.Get(netip.MustParseAddrPort("10.0.0.2:80")); !ok || got.Weight != 0 {
		t.Fatalf("Get 10.0.0.2:80 = %v, %v", got, ok)
	}
	if r.Has(netip.MustParseAddrPort("10.0.0.4:80")) {
		t.Fatal("Has an address never set")
	}
	if !r.Delete(netip.MustParseAddrPort("10.0.0.1:80")) || r.Delete(netip.MustParseAddrPort("10.0.0.1:80")) {
		t.Fatal("Delete must tell whether there was one, once")
	}
	if r.Len() != 4 || r.Has(netip.MustParseAddrPort("10.0.0.1:80")) {
		t.Fatalf("after delete: %q", addrsOf(r))
	}
}

func TestRealsOfSortsAndKeepsTheLaterCopy(t *testing.T) {
	r := RealsOf([]RealServer{realAt("10.0.0.2:80", 1), realAt("10.0.0.1:80", 1), realAt("10.0.0.2:80", 5)})
	want := []string{"-r 10.0.0.1:80 -m -w 1", "-r 10.0.0.2:80 -m -w 5"}
	if got := addrsOf(r); !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestRealsCloneIsIndependent(t *testing.T) {
	a := RealsOf([]RealServer{realAt("10.0.0.1:80", 1), realAt("10.0.0.3:80", 1)})
	a.Grow(4) // room to insert in place: a shared array would show it
	b := a.Clone()
	b.Set(realAt("10.0.0.2:80", 1))
	b.Set(realAt("10.0.0.1:80", 7))
	if got := addrsOf(a); !slices.Equal(got, []string{"-r 10.0.0.1:80 -m -w 1", "-r 10.0.0.3:80 -m -w 1"}) {
		t.Fatalf("the original changed with its clone: %q", got)
	}
	if a.Equal(b) || !a.Equal(a.Clone()) {
		t.Fatal("Equal must compare every real server")
	}
}

// TestRealsMergeEqualsOneByOne: merging a sorted run of operations leaves
// the list that Set and Delete one by one leave, over random lists and
// runs (adds before, between and after the list, deletes of held and
// absent real servers, weight changes).
func TestRealsMergeEqualsOneByOne(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	addr := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 80)
	}
	for round := range 2000 {
		space := 1 + rnd.IntN(60)
		var list []RealServer
		for i := range space {
			if rnd.IntN(2) == 0 {
				list = append(list, RealServer{Addr: addr(i), Weight: 1})
			}
		}
		var ops []Op
		for i := range space {
			if rnd.IntN(3) != 0 {
				continue
			}
			kind := []OpKind{AddReal, UpdateReal, DeleteReal}[rnd.IntN(3)]
			ops = append(ops, Op{Kind: kind, RS: RealServer{Addr: addr(i), Weight: rnd.IntN(3)}})
		}
		want, got := RealsOf(slices.Clone(list)), RealsOf(slices.Clone(list))
		for _, op := range ops {
			if op.Kind == DeleteReal {
				want.Delete(op.RS.Addr)
			} else {
				want.Set(op.RS)
			}
		}
		got.Merge(ops)
		if !got.Equal(want) {
			t.Fatalf("round %d: merged %v, one by one %v (ops %v)", round, got.All(), want.All(), ops)
		}
	}
}

// TestRealsInsertEqualsSetOneByOne: inserting a sorted run of new real
// servers leaves the list that Set one by one leaves, wherever they fall
// (before, between and after the list's).
func TestRealsInsertEqualsSetOneByOne(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	addr := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 80)
	}
	for range 2000 {
		var list, added []RealServer
		for i := range 1 + rnd.IntN(60) {
			rs := RealServer{Addr: addr(i), Weight: rnd.IntN(3)}
			switch rnd.IntN(3) {
			case 0:
				list = append(list, rs)
			case 1:
				added = append(added, rs)
			}
		}
		want, got := RealsOf(slices.Clone(list)), RealsOf(slices.Clone(list))
		for _, rs := range added {
			want.Set(rs)
		}
		got.Insert(added)
		if !got.Equal(want) {
			t.Fatalf("list %v, inserted %v: got %q, want %q", list, added, addrsOf(got), addrsOf(want))
		}
	}
}
