package model

import (
	"cmp"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"unsafe"
)

func setEntryCases() []SetEntry {
	v4, v6 := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")
	mapped := netip.MustParseAddr("::ffff:10.0.0.5")
	return []SetEntry{
		{},
		NewSetEntry("KUBE-IPVS-VIPS", v4, 0, 0),
		NewSetEntry("KUBE-IPVS-VIPS-V6", v6, 0, 0),
		NewSetEntry("KUBE-IPVS-VIPS-V6", mapped, 0, 0),
		NewSetEntry("KUBE-IPVS-CLUSTER-IP", v4, TCP, 80),
		NewSetEntry("KUBE-IPVS-CLUSTER-IP", v4, UDP, 80),
		NewSetEntry("KUBE-IPVS-CLUSTER-IP", v4, TCP, 443),
		NewSetEntry("KUBE-IPVS-LOOP-BACK", v4, TCP, 80).WithAddr2(v4),
		NewSetEntry("KUBE-IPVS-LOOP-BACK", v4, TCP, 80).WithAddr2(netip.MustParseAddr("10.0.0.6")),
		NewSetEntry("KUBE-IPVS-LOOP-BACK-V6", v6, TCP, 80).WithAddr2(v6),
		NewSetEntry("KUBE-IPVS-SOURCE-RANGES", v4, TCP, 80).WithNet(netip.MustParsePrefix("192.0.2.0/24")),
		NewSetEntry("KUBE-IPVS-SOURCE-RANGES", v4, TCP, 80).WithNet(netip.MustParsePrefix("192.0.2.0/25")),
		NewSetEntry("KUBE-IPVS-SOURCE-RANGES", v4, TCP, 80).WithNet(netip.MustParsePrefix("0.0.0.0/0")),
		NewSetEntry("KUBE-IPVS-SOURCE-RANGES-V6", v6, TCP, 80).WithNet(netip.MustParsePrefix("2001:db8::/64")),
		NewSetEntry("KUBE-IPVS-SOURCE-RANGES", v4, TCP, 80),
	}
}

// The packed entry gives back exactly what it was built from.
func TestSetEntryKeepsItsParts(t *testing.T) {
	v4 := netip.MustParseAddr("10.0.0.5")
	mapped := netip.MustParseAddr("::ffff:10.0.0.5")
	net := netip.MustParsePrefix("192.0.2.0/24")
	e := NewSetEntry("S", mapped, TCP, 8080).WithAddr2(v4)
	if e.Set() != "S" || e.Addr() != mapped || e.Proto() != TCP || e.Port() != 8080 || e.Addr2() != v4 || e.Net().IsValid() {
		t.Errorf("got %s %s %s %d %s %s", e.Set(), e.Addr(), e.Proto(), e.Port(), e.Addr2(), e.Net())
	}
	n := e.WithNet(net)
	if n.Addr2().IsValid() || n.Net() != net || n.Member() != "::ffff:10.0.0.5,tcp:8080,192.0.2.0/24" {
		t.Errorf("with net: %s %s %q", n.Addr2(), n.Net(), n.Member())
	}
	if back := n.WithAddr2(v4); back != e {
		t.Errorf("net then address %v, want %v", back, e)
	}
	if z := NewSetEntry("", netip.Addr{}, 0, 0); z != (SetEntry{}) || z.Addr().IsValid() || z.Set() != "" {
		t.Errorf("empty entry %+v", z)
	}
	if got := NewSetEntry("S", v4, UDP, 53).String(); got != "S 10.0.0.5,udp:53" {
		t.Errorf("String %q", got)
	}
}

// Entries built alike are ==, the property maps of them rely on; entries
// differing in any part are not.
func TestSetEntryEquality(t *testing.T) {
	cases := setEntryCases()
	for i, a := range cases {
		for j, b := range setEntryCases() {
			if (a == b) != (i == j) {
				t.Errorf("%v == %v is %v", a, b, a == b)
			}
		}
	}
}

// Compare orders as comparing the parts as netip values does.
func TestSetEntryCompareIsPartwise(t *testing.T) {
	byParts := func(a, b SetEntry) int {
		return cmp.Or(cmp.Compare(a.Set(), b.Set()), a.Addr().Compare(b.Addr()), cmp.Compare(a.Proto(), b.Proto()),
			cmp.Compare(a.Port(), b.Port()), a.Addr2().Compare(b.Addr2()), a.Net().Addr().Compare(b.Net().Addr()),
			cmp.Compare(a.Net().Bits(), b.Net().Bits()))
	}
	cases := setEntryCases()
	for _, a := range cases {
		for _, b := range cases {
			if got, want := a.Compare(b), byParts(a, b); got != want {
				t.Errorf("%v vs %v: %d, want %d", a, b, got, want)
			}
		}
	}
	sorted := slices.SortedFunc(slices.Values(cases), SetEntry.Compare)
	if !slices.IsSortedFunc(sorted, byParts) {
		t.Errorf("not in part order: %v", sorted)
	}
}

// A member holds no pointer and stays small: the agent keeps every member
// three times over (translation, desired state, observed cache).
func TestSetEntryIsCompact(t *testing.T) {
	if n := unsafe.Sizeof(SetEntry{}); n > 40 {
		t.Errorf("SetEntry is %d bytes", n)
	}
	typ := reflect.TypeFor[SetEntry]()
	for i := range typ.NumField() {
		switch f := typ.Field(i); f.Type.Kind() {
		case reflect.Array, reflect.Uint8, reflect.Uint16:
		default:
			t.Errorf("field %s is a %s", f.Name, f.Type.Kind())
		}
	}
}

// A virtual server's key is laid out without padding: 250,000 operations
// of a cold start's plan each hold one.
func TestVSKeyIsCompact(t *testing.T) {
	if n := unsafe.Sizeof(VSKey{}); n > 32 {
		t.Errorf("VSKey is %d bytes", n)
	}
}

func TestSetEntrySkbMark(t *testing.T) {
	a := netip.MustParseAddr("192.0.2.1")
	plain := NewSetEntry("S", a, TCP, 80)
	marked := plain.WithSkbMark(0x1a2b0000)
	if got, want := marked.String(), "S 192.0.2.1,tcp:80 skbmark 0x1a2b0000"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if marked.SkbMark() != 0x1a2b0000 || plain.SkbMark() != 0 {
		t.Errorf("SkbMark = %#x, %#x", marked.SkbMark(), plain.SkbMark())
	}
	if marked == plain || marked.Key() != plain || marked.WithSkbMark(0) != plain {
		t.Errorf("a mark is data of the member: Key() = %v, want %v", marked.Key(), plain)
	}
	if marked.Addr2().IsValid() || marked.Net().IsValid() {
		t.Errorf("a marked member has no second address or net: %v %v", marked.Addr2(), marked.Net())
	}
	other := plain.WithSkbMark(0x1a2c0000)
	if plain.Compare(marked) >= 0 || marked.Compare(other) >= 0 || other.Compare(marked) <= 0 || marked.Compare(marked) != 0 {
		t.Error("members order unmarked first, then by mark")
	}
}
