package reconciler

import (
	"net/netip"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// TestSharedMembersStayWhileNeeded: a VIP and a set member two Services
// need stay in the desired state until the last of them lets go, whatever
// order they go in.
func TestSharedMembersStayWhileNeeded(t *testing.T) {
	vip := netip.MustParseAddr("192.0.2.50")
	hairpin := shim.LoopBackEntry(model.TCP, netip.MustParseAddrPort("10.244.1.2:8080"))
	res := func(port uint16) translate.Result {
		k := model.NewVSKey(model.TCP, vip, port)
		return translate.Result{
			Services:   []*model.Service{{VirtualServer: model.VirtualServer{Key: k, Scheduler: "rr"}}},
			Meta:       []translate.VSMeta{{Kind: translate.KindExternalIP}},
			Addrs:      []netip.Addr{vip},
			SetEntries: []model.SetEntry{hairpin},
		}
	}
	a, b := model.ServiceName{Namespace: "x", Name: "a"}, model.ServiceName{Namespace: "x", Name: "b"}
	for _, order := range [][2]model.ServiceName{{a, b}, {b, a}} {
		d := newDesiredSet()
		d.replace(a, res(80), time.Unix(1, 0), plan.NewScope())
		d.replace(b, res(443), time.Unix(2, 0), plan.NewScope())
		held := func() (bool, bool) {
			_, bound := d.state.Addrs[vip]
			_, member := d.state.Sets[hairpin]
			return bound, member
		}
		if n := d.addrRefs.count(d.state.Addrs, vip); n != 2 {
			t.Fatalf("the VIP has %d references, want 2", n)
		}
		d.replace(order[0], translate.Result{}, time.Time{}, plan.NewScope())
		if bound, member := held(); !bound || !member {
			t.Fatalf("%s gone: VIP held %t, member held %t; both are still needed", order[0], bound, member)
		}
		d.replace(order[1], translate.Result{}, time.Time{}, plan.NewScope())
		if bound, member := held(); bound || member || len(d.addrRefs)+len(d.setRefs) != 0 {
			t.Fatalf("both gone: VIP held %t, member held %t, counts %v %v", bound, member, d.addrRefs, d.setRefs)
		}
	}
}
