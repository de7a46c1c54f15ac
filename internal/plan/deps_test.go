package plan

import (
	"net/netip"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// TestDeps: what each kind of operation needs, and what its failure
// withholds, with the kernel's "exists" and without.
func TestDeps(t *testing.T) {
	vip := netip.MustParseAddr("10.96.0.10")
	k := model.NewVSKey(model.TCP, vip, 80)
	vs := model.VirtualServer{Key: k, Scheduler: "rr"}
	rs := model.RealServer{Addr: netip.MustParseAddrPort("10.244.1.5:8080"), Weight: 1}
	record := shim.Entry(shim.Frontends, vip, model.TCP, 80)
	firewall := shim.Entry(shim.Firewall, vip, model.TCP, 80)
	ranges := shim.SourceRangeEntry(vip, model.TCP, 80, netip.MustParsePrefix("198.51.100.0/24"))
	vips := shim.VIPEntry(vip)
	hairpin := shim.LoopBackEntry(model.TCP, netip.MustParseAddrPort("10.244.1.5:8080"))
	made, recorded := Dep{Kind: VSMade, VS: k}, Dep{Kind: VSRecorded, VS: k}
	ready, released := Dep{Kind: AddrReady, Addr: vip}, Dep{Kind: AddrReleased, Addr: vip}
	madeVIPs := Dep{Kind: VSMade, VS: model.NewVSKey(0, vip, 0)} // never made: names no frontend's create
	for _, tc := range []struct {
		name             string
		op               model.Op
		needs            Deps
		withheld, exists Deps
	}{
		{"create", model.Op{Kind: model.AddService, VS: vs}, Deps{recorded}, Deps{made, ready}, Deps{made, ready}},
		{"update", model.Op{Kind: model.UpdateService, VS: vs}, Deps{}, Deps{}, Deps{}},
		{"delete", model.Op{Kind: model.DeleteService, VS: vs}, Deps{}, Deps{ready, released}, Deps{ready, released}},
		{"add real", model.Op{Kind: model.AddReal, VS: vs, RS: rs}, Deps{recorded, made}, Deps{}, Deps{}},
		{"update real", model.Op{Kind: model.UpdateReal, VS: vs, RS: rs}, Deps{made}, Deps{}, Deps{}},
		{"delete real", model.Op{Kind: model.DeleteReal, VS: vs, RS: rs}, Deps{}, Deps{}, Deps{}},
		{"bind", model.Op{Kind: model.BindAddr, Addr: vip}, Deps{ready}, Deps{}, Deps{}},
		{"unbind", model.Op{Kind: model.UnbindAddr, Addr: vip}, Deps{ready}, Deps{released}, Deps{released}},
		{"record", model.Op{Kind: model.AddSetEntry, Entry: record}, Deps{}, Deps{1: recorded}, Deps{}},
		{"firewall member", model.Op{Kind: model.AddSetEntry, Entry: firewall}, Deps{1: made}, Deps{ready}, Deps{ready}},
		{"source range", model.Op{Kind: model.AddSetEntry, Entry: ranges}, Deps{1: made}, Deps{ready}, Deps{ready}},
		{"VIPs member", model.Op{Kind: model.AddSetEntry, Entry: vips}, Deps{ready, madeVIPs}, Deps{ready}, Deps{ready}},
		{"hairpin member", model.Op{Kind: model.AddSetEntry, Entry: hairpin}, Deps{}, Deps{}, Deps{}},
		{"member removed", model.Op{Kind: model.DeleteSetEntry, Entry: firewall}, Deps{released}, Deps{}, Deps{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Needs(tc.op); got != tc.needs {
				t.Errorf("needs %v, want %v", got, tc.needs)
			}
			if got := Withheld(tc.op, false); got != tc.withheld {
				t.Errorf("failed, withholds %v, want %v", got, tc.withheld)
			}
			if got := Withheld(tc.op, true); got != tc.exists {
				t.Errorf("refused as existing, withholds %v, want %v", got, tc.exists)
			}
		})
	}
	// Held back for want of its record, a frontend counts as not made.
	if got, want := recorded.Withholds(), (Deps{made, ready}); got != want {
		t.Errorf("no record withholds %v, want %v", got, want)
	}
	for _, d := range []Dep{made, ready, released} {
		if got := d.Withholds(); got != (Deps{}) {
			t.Errorf("%v held back withholds %v, want nothing", d, got)
		}
	}
}

// TestPlanOrderMeetsDeps: in a plan, every operation an operation needs
// comes before it and in another batch (another kind, or another set), so
// that its outcome is known when the operation is looked at.
func TestPlanOrderMeetsDeps(t *testing.T) {
	observed := model.NewState()
	desired := model.NewState()
	for i := range 6 {
		vip := netip.AddrFrom4([4]byte{10, 96, 0, byte(i + 1)})
		old := netip.AddrFrom4([4]byte{10, 97, 0, byte(i + 1)})
		k, ok := model.NewVSKey(model.TCP, vip, 80), model.NewVSKey(model.UDP, old, 53)
		svc := &model.Service{VirtualServer: model.VirtualServer{Key: k, Scheduler: "rr"}}
		svc.Reals.Set(rs("10.244.1.5:8080", 1))
		desired.Services[k] = svc
		desired.Addrs[vip] = struct{}{}
		for _, e := range []model.SetEntry{shim.Entry(shim.Frontends, vip, model.TCP, 80), shim.Entry(shim.Firewall, vip, model.TCP, 80),
			shim.SourceRangeEntry(vip, model.TCP, 80, netip.MustParsePrefix("198.51.100.0/24")), shim.VIPEntry(vip)} {
			desired.Sets[e] = struct{}{}
		}
		gone := &model.Service{VirtualServer: model.VirtualServer{Key: ok, Scheduler: "rr"}}
		gone.Reals.Set(rs("10.244.2.5:53", 1))
		observed.Services[ok] = gone
		observed.Addrs[old] = struct{}{}
		for _, e := range []model.SetEntry{shim.Entry(shim.Frontends, old, model.UDP, 53), shim.VIPEntry(old)} {
			observed.Sets[e] = struct{}{}
		}
	}
	ops := Diff(desired, observed, NewOwner(observed, nil, OwnerPolicy{Families: model.Families{IPv4: true, IPv6: true}}))
	kinds := map[model.OpKind]bool{}
	for i, y := range ops {
		kinds[y.Kind] = true
		for _, need := range Needs(y) {
			if need.IsZero() {
				continue
			}
			for j, x := range ops {
				if x == y || !withholds(x, need) {
					continue
				}
				if j > i || (x.Kind == y.Kind && x.Entry.Set() == y.Entry.Set()) {
					t.Errorf("%s needs %v, which %s (at %d, it at %d) withholds", y, need, x, j, i)
				}
			}
		}
	}
	for _, k := range []model.OpKind{model.AddService, model.AddReal, model.AddSetEntry, model.BindAddr,
		model.DeleteService, model.UnbindAddr, model.DeleteSetEntry} {
		if !kinds[k] {
			t.Errorf("the plan has no %s: the test shows less than it says", k)
		}
	}
}

// withholds tells whether x failing, or held back, withholds d.
func withholds(x model.Op, d Dep) bool {
	for _, exists := range []bool{false, true} {
		for _, w := range Withheld(x, exists) {
			if w == d {
				return true
			}
		}
	}
	for _, n := range Needs(x) {
		for _, w := range n.Withholds() {
			if w == d {
				return true
			}
		}
	}
	return false
}
