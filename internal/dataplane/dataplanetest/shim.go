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

// ShimPlane is the part of a dataplane the shim contract needs. A full
// Dataplane is one; so is the linux Shim alone (with an Observe that reads
// only the sets), which lets the contract run in a network namespace of a
// kernel without IPVS.
type ShimPlane interface {
	EnsureShim(ctx context.Context, cfg shim.Config) error
	AddSetEntry(ctx context.Context, e model.SetEntry) error
	DeleteSetEntry(ctx context.Context, e model.SetEntry) error
	DeleteShim(ctx context.Context) error
	Observe(ctx context.Context) (dataplane.Observation, error)
}

// ShimFactory returns a ShimPlane over a kernel without the shim.
type ShimFactory func(t *testing.T) ShimPlane

// RunShim runs the shim's contract subtests, each on a fresh plane.
func RunShim(t *testing.T, newSP ShimFactory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, sp ShimPlane)
	}{
		{"SetsNeedEnsure", testSetsNeedEnsure},
		{"SetMembers", testSetMembers},
		{"EnsureKeepsMembers", testEnsureKeepsMembers},
		{"DeleteShim", testDeleteShim},
		{"SetMemberMustFit", testSetMemberMustFit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newSP(t))
		})
	}
}

var dualStack = shim.Config{IPv4: true, IPv6: true}

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
	}
}

func setDump(t *testing.T, ctx context.Context, sp ShimPlane) string {
	t.Helper()
	obs, err := sp.Observe(ctx)
	must(t, "observe", err)
	var b strings.Builder
	for _, e := range obs.State.SortedSetEntries() {
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

func testSetsNeedEnsure(t *testing.T, sp ShimPlane) {
	ctx := ctxFor(t)
	e := shim.Entry(shim.ClusterIP, vip4, model.TCP, 80)
	mustFailWith(t, "add to a missing set", sp.AddSetEntry(ctx, e), dataplane.ErrNotExist)
	mustFailWith(t, "delete from a missing set", sp.DeleteSetEntry(ctx, e), dataplane.ErrNotExist)
	if got := setDump(t, ctx, sp); got != "" {
		t.Fatalf("members without sets:\n%s", got)
	}
}

func testSetMembers(t *testing.T, sp ShimPlane) {
	ctx := ctxFor(t)
	must(t, "ensure shim", sp.EnsureShim(ctx, dualStack))
	members := shimMembers()
	for _, e := range members {
		must(t, "add "+e.String(), sp.AddSetEntry(ctx, e))
	}
	if got, want := setDump(t, ctx, sp), dumpOf(members); got != want {
		t.Fatalf("members:\n%s\nwant:\n%s", got, want)
	}
	mustFailWith(t, "add again", sp.AddSetEntry(ctx, members[0]), dataplane.ErrExist)
	must(t, "delete", sp.DeleteSetEntry(ctx, members[0]))
	mustFailWith(t, "delete again", sp.DeleteSetEntry(ctx, members[0]), dataplane.ErrNotExist)
	if got, want := setDump(t, ctx, sp), dumpOf(members[1:]); got != want {
		t.Fatalf("after delete:\n%s\nwant:\n%s", got, want)
	}
}

func testEnsureKeepsMembers(t *testing.T, sp ShimPlane) {
	ctx := ctxFor(t)
	must(t, "ensure shim", sp.EnsureShim(ctx, dualStack))
	members := shimMembers()
	for _, e := range members {
		must(t, "add "+e.String(), sp.AddSetEntry(ctx, e))
	}
	must(t, "ensure again", sp.EnsureShim(ctx, dualStack))
	other := dualStack
	other.MasqueradeAll = true
	must(t, "ensure with another config", sp.EnsureShim(ctx, other))
	if got, want := setDump(t, ctx, sp), dumpOf(members); got != want {
		t.Fatalf("members after ensure:\n%s\nwant:\n%s", got, want)
	}
}

func testDeleteShim(t *testing.T, sp ShimPlane) {
	ctx := ctxFor(t)
	must(t, "ensure shim", sp.EnsureShim(ctx, dualStack))
	for _, e := range shimMembers() {
		must(t, "add "+e.String(), sp.AddSetEntry(ctx, e))
	}
	must(t, "delete shim", sp.DeleteShim(ctx))
	if got := setDump(t, ctx, sp); got != "" {
		t.Fatalf("members after delete:\n%s", got)
	}
	mustFailWith(t, "add after delete", sp.AddSetEntry(ctx, shimMembers()[0]), dataplane.ErrNotExist)
	must(t, "delete shim again", sp.DeleteShim(ctx))
}

func testSetMemberMustFit(t *testing.T, sp ShimPlane) {
	ctx := ctxFor(t)
	must(t, "ensure shim", sp.EnsureShim(ctx, shim.Config{IPv4: true}))
	wrongFamily := model.SetEntry{Set: shim.SetName(shim.ClusterIP, false), Addr: vip6, Proto: model.TCP, Port: 80}
	if err := sp.AddSetEntry(ctx, wrongFamily); err == nil || errors.Is(err, dataplane.ErrExist) {
		t.Fatalf("an IPv6 member in an IPv4 set: %v", err)
	}
	if got := setDump(t, ctx, sp); got != "" {
		t.Fatalf("members:\n%s", got)
	}
}
