package dataplanetest

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// NetfilterFactory returns a dataplane.Netfilter over a kernel without the
// shim: a whole Dataplane, or the linux Shim alone in a network namespace of
// a kernel without IPVS.
type NetfilterFactory func(t *testing.T) dataplane.Netfilter

// RunNetfilter runs the contract of dataplane.Netfilter, each subtest on a
// fresh one.
func RunNetfilter(t *testing.T, newNF NetfilterFactory) {
	runTests(t, netfilterTests, newNF)
}

// netfilterTests are the contract of dataplane.Netfilter.
var netfilterTests = []contractTest[dataplane.Netfilter]{
	{"SetsNeedEnsure", testSetsNeedEnsure},
	{"SetMembers", testSetMembers},
	{"EnsureKeepsMembers", testEnsureKeepsMembers},
	{"DeleteShim", testDeleteShim},
	{"ShimInPlace", testShimInPlace},
	{"SetMemberMustFit", testSetMemberMustFit},
	{"NetworksReadBack", testNetworksReadBack},
	{"ZeroPrefixRefused", testZeroPrefixRefused},
	{"BadShimConfigRefused", testBadShimConfigRefused},
	{"FullSetRefuses", testFullSetRefuses},
	{"SmallSetReplaced", testSmallSetReplaced},
	{"OtherTypeOrFamilyReplaced", testOtherTypeOrFamilyReplaced},
	{"ShimInPlaceChecksSets", testShimInPlaceChecksSets},
	{"SkbMarkIsMemberData", testSkbMarkIsMemberData},
}

// SetMaker is what the contract needs of a dataplane beside its
// interface: a set made as an older version of the agent (which left the
// kernel's default maxelem) or another tool left it, under one of the
// shim's names. The fake has it as a control; the linux tests make the
// set through netlink.
type SetMaker interface {
	MakeSet(ctx context.Context, def shim.SetDef, maxElem int) error
	// WriteRules writes cfg's rules as an older version left them, over
	// the sets there are, making or replacing none.
	WriteRules(ctx context.Context, cfg shim.Config) error
}

// makeSet makes a set with SetMaker; a dataplane without it fails the
// contract.
func makeSet(t *testing.T, ctx context.Context, p any, def shim.SetDef, maxElem int) {
	t.Helper()
	m, ok := p.(SetMaker)
	if !ok {
		t.Fatalf("%T cannot make a set as an older agent left it (dataplanetest.SetMaker)", p)
	}
	must(t, "make "+def.Name, m.MakeSet(ctx, def, maxElem))
}

// writeRules writes rules with SetMaker.
func writeRules(t *testing.T, ctx context.Context, p any, cfg shim.Config) {
	t.Helper()
	m, ok := p.(SetMaker)
	if !ok {
		t.Fatalf("%T cannot write rules as an older agent left them (dataplanetest.SetMaker)", p)
	}
	must(t, "write rules", m.WriteRules(ctx, cfg))
}

// setDef is the shim's definition of a kind's set in a family.
func setDef(kind shim.SetKind, v6 bool) shim.SetDef {
	return shim.SetDef{Kind: kind, Name: kind.Name(v6), Type: kind.Type(), IPv6: v6}
}

// vipMembers are n VIPs members of IPv4 addresses from 10.96.1.0 up.
func vipMembers(n int) []model.SetEntry {
	out := make([]model.SetEntry, n)
	for i := range out {
		out[i] = shim.VIPEntry(netip.AddrFrom4([4]byte{10, 96, 1 + byte(i>>8), byte(i)}))
	}
	return out
}

// testFullSetRefuses: a set that holds its maxelem members refuses a new
// one with ErrFull, named as the kernel names it, and keeps what it has; a
// member that is there is still ErrExist; a delete makes room again.
func testFullSetRefuses(t *testing.T, nf dataplane.Netfilter) {
	ctx := ctxFor(t)
	def := setDef(shim.VIPs, false)
	makeSet(t, ctx, nf, def, 2)
	members := vipMembers(3)
	for _, e := range members[:2] {
		must(t, "add "+e.String(), addSetEntry(ctx, nf, e))
	}
	err := addSetEntry(ctx, nf, members[2])
	mustFailWith(t, "add to a full set", err, dataplane.ErrFull)
	if msg := err.Error(); !strings.Contains(msg, def.Name) || !strings.Contains(msg, "hash is full") {
		t.Fatalf("add to a full set: %q names neither the set nor \"hash is full\"", msg)
	}
	mustFailWith(t, "add a member that is there to a full set", addSetEntry(ctx, nf, members[0]), dataplane.ErrExist)
	if got, want := setDump(t, ctx, nf), dumpOf(members[:2]); got != want {
		t.Fatalf("members of the full set:\n%s\nwant:\n%s", got, want)
	}
	must(t, "delete", deleteSetEntry(ctx, nf, members[0]))
	must(t, "add after a delete", addSetEntry(ctx, nf, members[2]))
	if got, want := setDump(t, ctx, nf), dumpOf(members[1:]); got != want {
		t.Fatalf("members after a delete and an add:\n%s\nwant:\n%s", got, want)
	}
}

// testSmallSetReplaced: a set of the shim's type and family but a smaller
// maxelem (an older version's) is replaced by EnsureShim with one of
// shim.MaxSetMembers, its members kept, so members past the old bound go in.
func testSmallSetReplaced(t *testing.T, nf dataplane.Netfilter) {
	ctx := ctxFor(t)
	small := setDef(shim.VIPs, false)
	makeSet(t, ctx, nf, small, 4)
	members := vipMembers(300) // past a window of a batch, too
	for _, e := range members[:4] {
		must(t, "add "+e.String(), addSetEntry(ctx, nf, e))
	}
	mustFailWith(t, "add past the old bound", addSetEntry(ctx, nf, members[4]), dataplane.ErrFull)
	must(t, "ensure shim", nf.EnsureShim(ctx, dualStack))
	if got, want := setDump(t, ctx, nf), dumpOf(members[:4]); got != want {
		t.Fatalf("members after the replacement:\n%s\nwant:\n%s", got, want)
	}
	for _, e := range members[4:] {
		must(t, "add "+e.String()+" after the replacement", addSetEntry(ctx, nf, e))
	}
	if got, want := setDump(t, ctx, nf), dumpOf(members); got != want {
		t.Fatalf("members:\n%s\nwant:\n%s", got, want)
	}
	must(t, "ensure again", nf.EnsureShim(ctx, dualStack))
	if got, want := setDump(t, ctx, nf), dumpOf(members); got != want {
		t.Fatalf("members after a second ensure:\n%s\nwant:\n%s", got, want)
	}
}

// testOtherTypeOrFamilyReplaced: a set under one of the shim's names with
// another type, or another family, is replaced by EnsureShim with the
// shim's, empty, which EnsureShim tells with ErrSetEmptied (the rules are
// written all the same), and which takes the shim's members. The next
// EnsureShim has nothing to replace.
func testOtherTypeOrFamilyReplaced(t *testing.T, nf dataplane.Netfilter) {
	ctx := ctxFor(t)
	otherType := setDef(shim.VIPs, false)
	otherType.Type = shim.HashIPPort
	otherFamily := setDef(shim.ClusterIP, false)
	otherFamily.IPv6 = true
	makeSet(t, ctx, nf, otherType, shim.MaxSetMembers)
	makeSet(t, ctx, nf, otherFamily, shim.MaxSetMembers)
	mustFailWith(t, "ensure shim over sets of another type and family", nf.EnsureShim(ctx, dualStack), dataplane.ErrSetEmptied)
	if ok, err := nf.ShimInPlace(ctx, dualStack); err != nil || !ok {
		t.Fatalf("after the replacement: in place %v, %v; want true", ok, err)
	}
	must(t, "ensure again", nf.EnsureShim(ctx, dualStack))
	members := []model.SetEntry{shim.VIPEntry(vip4), shim.Entry(shim.ClusterIP, vip4, model.TCP, 80)}
	for _, e := range members {
		must(t, "add "+e.String(), addSetEntry(ctx, nf, e))
	}
	if got, want := setDump(t, ctx, nf), dumpOf(members); got != want {
		t.Fatalf("members:\n%s\nwant:\n%s", got, want)
	}
}

var dualStack = shim.Config{Families: model.Families{IPv4: true, IPv6: true}}

// shimMembers are one member of every set kind in both families.
func shimMembers() []model.SetEntry {
	lb4, lb6 := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")
	return []model.SetEntry{
		shim.Entry(shim.ClusterIP, vip4, model.TCP, 80),
		shim.Entry(shim.ClusterIP, vip6, model.UDP, 53),
		shim.Entry(shim.External, lb4, model.SCTP, 9),
		shim.LoopBackEntry(model.TCP, real4a),
		shim.LoopBackEntry(model.UDP, real6a),
		shim.Entry(shim.Firewall, lb4, model.TCP, 443),
		shim.SourceRangeEntry(lb4, model.TCP, 443, netip.MustParsePrefix("198.51.100.0/24")),
		shim.SourceRangeEntry(lb6, model.TCP, 443, netip.MustParsePrefix("2001:db8:1::/48")),
		shim.Entry(shim.NoEndpoints, vip4b, model.TCP, 8080),
		shim.Entry(shim.Frontends, vip4, model.TCP, 80),
		shim.Entry(shim.Frontends, vip6, model.UDP, 53),
		shim.VIPEntry(vip4),
		shim.VIPEntry(vip6),
		shim.LocalSourceEntry(lb4, model.TCP, 80, 0x4cfc3383),
		shim.LocalSourceEntry(lb6, model.UDP, 53, 0xfffe0001),
	}
}

func setDump(t *testing.T, ctx context.Context, nf dataplane.Netfilter) string {
	t.Helper()
	sets, err := nf.SetEntries(ctx)
	must(t, "list set members", err)
	s := model.NewState()
	s.Sets = sets
	var b strings.Builder
	for _, e := range s.SortedSetEntries() {
		b.WriteString(e.String() + "\n")
	}
	return b.String()
}

func dumpOf(es []model.SetEntry) string {
	s := model.NewState()
	for _, e := range es {
		s.Sets[e] = struct{}{}
	}
	var b strings.Builder
	for _, e := range s.SortedSetEntries() {
		b.WriteString(e.String() + "\n")
	}
	return b.String()
}

func testSetsNeedEnsure(t *testing.T, nf dataplane.Netfilter) {
	ctx := ctxFor(t)
	e := shim.Entry(shim.ClusterIP, vip4, model.TCP, 80)
	mustFailWith(t, "add to a missing set", addSetEntry(ctx, nf, e), dataplane.ErrNotExist)
	mustFailWith(t, "delete from a missing set", deleteSetEntry(ctx, nf, e), dataplane.ErrNotExist)
	if got := setDump(t, ctx, nf); got != "" {
		t.Fatalf("members without sets:\n%s", got)
	}
}

func testSetMembers(t *testing.T, nf dataplane.Netfilter) {
	ctx := ctxFor(t)
	must(t, "ensure shim", nf.EnsureShim(ctx, dualStack))
	members := shimMembers()
	for _, e := range members {
		must(t, "add "+e.String(), addSetEntry(ctx, nf, e))
	}
	if got, want := setDump(t, ctx, nf), dumpOf(members); got != want {
		t.Fatalf("members:\n%s\nwant:\n%s", got, want)
	}
	mustFailWith(t, "add again", addSetEntry(ctx, nf, members[0]), dataplane.ErrExist)
	must(t, "delete", deleteSetEntry(ctx, nf, members[0]))
	mustFailWith(t, "delete again", deleteSetEntry(ctx, nf, members[0]), dataplane.ErrNotExist)
	if got, want := setDump(t, ctx, nf), dumpOf(members[1:]); got != want {
		t.Fatalf("after delete:\n%s\nwant:\n%s", got, want)
	}
}

func testEnsureKeepsMembers(t *testing.T, nf dataplane.Netfilter) {
	ctx := ctxFor(t)
	must(t, "ensure shim", nf.EnsureShim(ctx, dualStack))
	members := shimMembers()
	for _, e := range members {
		must(t, "add "+e.String(), addSetEntry(ctx, nf, e))
	}
	must(t, "ensure again", nf.EnsureShim(ctx, dualStack))
	other := dualStack
	other.MasqueradeAll = true
	must(t, "ensure with another config", nf.EnsureShim(ctx, other))
	// Pod traffic told by interface, another masquerade bit: the rules
	// change, the sets and their members do not.
	byIface := dualStack
	byIface.PodInterface, byIface.MasqueradeMark = "veth+", 1<<3
	must(t, "ensure by interface, mark 0x8", nf.EnsureShim(ctx, byIface))
	if got, want := setDump(t, ctx, nf), dumpOf(members); got != want {
		t.Fatalf("members after ensure:\n%s\nwant:\n%s", got, want)
	}
}

// testBadShimConfigRefused: a configuration whose rules iptables would
// refuse is refused before anything is written, and what was there stays.
func testBadShimConfigRefused(t *testing.T, nf dataplane.Netfilter) {
	ctx := ctxFor(t)
	must(t, "ensure shim", nf.EnsureShim(ctx, dualStack))
	e := shim.Entry(shim.ClusterIP, netip.MustParseAddr("10.96.0.1"), model.TCP, 443)
	must(t, "add "+e.String(), addSetEntry(ctx, nf, e))
	for _, bad := range []shim.Config{
		{Families: dualStack.Families, PodInterface: "a-very-long-name+"},
		{Families: dualStack.Families, PodInterface: "cbr0", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
		{Families: dualStack.Families, MasqueradeMark: 0x4001},
	} {
		if err := nf.EnsureShim(ctx, bad); err == nil {
			t.Fatalf("ensure %+v: accepted", bad)
		}
	}
	if got, want := setDump(t, ctx, nf), dumpOf([]model.SetEntry{e}); got != want {
		t.Fatalf("members after refused ensures:\n%s\nwant:\n%s", got, want)
	}
}

func testDeleteShim(t *testing.T, nf dataplane.Netfilter) {
	ctx := ctxFor(t)
	must(t, "ensure shim", nf.EnsureShim(ctx, dualStack))
	for _, e := range shimMembers() {
		must(t, "add "+e.String(), addSetEntry(ctx, nf, e))
	}
	must(t, "delete shim", nf.DeleteShim(ctx))
	if got := setDump(t, ctx, nf); got != "" {
		t.Fatalf("members after delete:\n%s", got)
	}
	mustFailWith(t, "add after delete", addSetEntry(ctx, nf, shimMembers()[0]), dataplane.ErrNotExist)
	must(t, "delete shim again", nf.DeleteShim(ctx))
}

// testShimInPlace: the drift check's read of the rules tells whether
// they are as a configuration has them, and writes nothing: before the
// first EnsureShim, after it, for a configuration other than the one
// written (checked without rewriting them), and after DeleteShim.
func testShimInPlace(t *testing.T, nf dataplane.Netfilter) {
	ctx := ctxFor(t)
	other := dualStack
	other.MasqueradeAll = true
	inPlace := func(what string, cfg shim.Config, want bool) {
		t.Helper()
		got, err := nf.ShimInPlace(ctx, cfg)
		must(t, what, err)
		if got != want {
			t.Fatalf("%s: in place %v, want %v", what, got, want)
		}
	}
	inPlace("before ensure", dualStack, false)
	must(t, "ensure shim", nf.EnsureShim(ctx, dualStack))
	inPlace("after ensure", dualStack, true)
	inPlace("another config", other, false)
	inPlace("after checking another config", dualStack, true)
	must(t, "ensure another config", nf.EnsureShim(ctx, other))
	inPlace("the other config written", other, true)
	inPlace("the first config replaced", dualStack, false)
	must(t, "delete shim", nf.DeleteShim(ctx))
	inPlace("after delete", other, false)
	if _, err := nf.ShimInPlace(ctx, shim.Config{Families: dualStack.Families, PodInterface: "a-very-long-name+"}); err == nil {
		t.Fatal("a configuration iptables would refuse was checked without error")
	}
}

// testShimInPlaceChecksSets: with the rules as a configuration has them
// (written by an older version over the sets it left), ShimInPlace is
// false while one of the sets is not as EnsureShim makes it (smaller
// maxelem, another type), as EnsureShim would change it,
// and true once EnsureShim replaced it.
func testShimInPlaceChecksSets(t *testing.T, nf dataplane.Netfilter) {
	ctx := ctxFor(t)
	cfg := shim.Config{Families: model.Families{IPv4: true}}
	small := setDef(shim.VIPs, false)
	otherType := setDef(shim.VIPs, false)
	otherType.Type = shim.HashIPPort
	// No case of another family: iptables writes no rule matching a set
	// of the other family.
	for _, c := range []struct {
		name    string
		def     shim.SetDef
		maxElem int
	}{
		{"smaller maxelem", small, 4},
		{"another type", otherType, shim.MaxSetMembers},
	} {
		for _, def := range shim.Sets(true, false) {
			if def.Name == c.def.Name {
				makeSet(t, ctx, nf, c.def, c.maxElem)
			} else {
				makeSet(t, ctx, nf, def, shim.MaxSetMembers)
			}
		}
		writeRules(t, ctx, nf, cfg)
		if ok, err := nf.ShimInPlace(ctx, cfg); err != nil || ok {
			t.Fatalf("%s: rules over the old set: in place %v, %v; want false", c.name, ok, err)
		}
		if err := nf.EnsureShim(ctx, cfg); err != nil && !errors.Is(err, dataplane.ErrSetEmptied) {
			t.Fatalf("%s: ensure shim: %v", c.name, err)
		}
		if ok, err := nf.ShimInPlace(ctx, cfg); err != nil || !ok {
			t.Fatalf("%s: after ensure: in place %v, %v; want true", c.name, ok, err)
		}
		must(t, c.name+": delete shim", nf.DeleteShim(ctx))
	}
}

func testSetMemberMustFit(t *testing.T, nf dataplane.Netfilter) {
	ctx := ctxFor(t)
	must(t, "ensure shim", nf.EnsureShim(ctx, shim.Config{Families: model.Families{IPv4: true}}))
	wrongFamily := model.NewSetEntry(shim.ClusterIP.Name(false), vip6, model.TCP, 80)
	if err := addSetEntry(ctx, nf, wrongFamily); err == nil || errors.Is(err, dataplane.ErrExist) {
		t.Fatalf("an IPv6 member in an IPv4 set: %v", err)
	}
	withPort := model.NewSetEntry(shim.VIPs.Name(false), vip4, model.TCP, 80)
	if err := addSetEntry(ctx, nf, withPort); err == nil || errors.Is(err, dataplane.ErrExist) {
		t.Fatalf("a member with a port in a hash:ip set: %v", err)
	}
	if got := setDump(t, ctx, nf); got != "" {
		t.Fatalf("members:\n%s", got)
	}
}

// testNetworksReadBack: what the kernel holds of a network member is the
// prefix asked for, short and long ones alike.
func testNetworksReadBack(t *testing.T, nf dataplane.Netfilter) {
	ctx := ctxFor(t)
	must(t, "ensure shim", nf.EnsureShim(ctx, dualStack))
	lb4, lb6 := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")
	var members []model.SetEntry
	for _, p := range []string{"10.20.0.0/16", "128.0.0.0/1", "203.0.113.7/32"} {
		members = append(members, shim.SourceRangeEntry(lb4, model.TCP, 443, netip.MustParsePrefix(p)))
	}
	for _, p := range []string{"8000::/1", "2001:db8:7::/64", "2001:db8::7/128"} {
		members = append(members, shim.SourceRangeEntry(lb6, model.TCP, 443, netip.MustParsePrefix(p)))
	}
	for _, e := range members {
		must(t, "add "+e.String(), addSetEntry(ctx, nf, e))
	}
	if got, want := setDump(t, ctx, nf), dumpOf(members); got != want {
		t.Fatalf("members:\n%s\nwant:\n%s", got, want)
	}
}

// testZeroPrefixRefused: a network of prefix length 0 is refused, not
// stored as something else (the kernel would hold the host prefix: one
// client allowed instead of all).
func testZeroPrefixRefused(t *testing.T, nf dataplane.Netfilter) {
	ctx := ctxFor(t)
	must(t, "ensure shim", nf.EnsureShim(ctx, dualStack))
	for _, e := range []model.SetEntry{
		shim.SourceRangeEntry(netip.MustParseAddr("192.0.2.10"), model.TCP, 443, netip.MustParsePrefix("0.0.0.0/0")),
		shim.SourceRangeEntry(netip.MustParseAddr("2001:db8::10"), model.TCP, 443, netip.MustParsePrefix("::/0")),
	} {
		err := addSetEntry(ctx, nf, e)
		if err == nil || errors.Is(err, dataplane.ErrExist) || errors.Is(err, dataplane.ErrNotExist) ||
			!strings.Contains(err.Error(), "prefix length 0") {
			t.Fatalf("add %s: got %v, want a refusal naming the zero prefix length", e, err)
		}
		err = deleteSetEntry(ctx, nf, e)
		if err == nil || !strings.Contains(err.Error(), "prefix length 0") {
			t.Fatalf("delete %s: got %v, want a refusal naming the zero prefix length", e, err)
		}
	}
	if got := setDump(t, ctx, nf); got != "" {
		t.Fatalf("members after refused adds:\n%s", got)
	}
}

// testSkbMarkIsMemberData: a LOCAL-SOURCES member's mark is data of the
// member, not part of its key, as ipset's skbinfo extension keeps it: it
// reads back, a member of the same address and port is refused whatever
// its mark, a delete removes the member whatever mark it names, and a set
// without the extension takes no mark.
func testSkbMarkIsMemberData(t *testing.T, nf dataplane.Netfilter) {
	ctx := ctxFor(t)
	must(t, "ensure shim", nf.EnsureShim(ctx, dualStack))
	lb := netip.MustParseAddr("192.0.2.10")
	m := shim.LocalSourceEntry(lb, model.TCP, 80, 0x10000)
	must(t, "add "+m.String(), addSetEntry(ctx, nf, m))
	if got, want := setDump(t, ctx, nf), m.String()+"\n"; got != want {
		t.Fatalf("members:\n%s\nwant:\n%s", got, want)
	}
	mustFailWith(t, "add under another mark", addSetEntry(ctx, nf, m.WithSkbMark(0x20000)), dataplane.ErrExist)
	must(t, "delete naming another mark", deleteSetEntry(ctx, nf, m.WithSkbMark(0x20000)))
	if got := setDump(t, ctx, nf); got != "" {
		t.Fatalf("after delete:\n%s", got)
	}
	if err := addSetEntry(ctx, nf, shim.Entry(shim.External, lb, model.TCP, 80).WithSkbMark(0x10000)); err == nil {
		t.Fatal("a set without skbinfo took a mark")
	}
}
