package dataplanetest

import (
	"net/netip"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// conntrackTests are the contract of dataplane.Conntrack that holds on any
// kernel; deleting real entries is checked with a conntrack client
// (linux/kernel_test.go) and with the fake's planted entries.
var conntrackTests = []contractTest[dataplane.Dataplane]{
	{"ClearConntrackNothing", testClearConntrackNothing},
}

func testClearConntrackNothing(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	for _, c := range []struct {
		name         string
		proto        model.Protocol
		reals, dests []netip.AddrPort
	}{
		{"no keys", model.UDP, nil, nil},
		{"IPv4 real servers", model.UDP, []netip.AddrPort{real4a, real4b}, nil},
		{"both families", model.UDP, []netip.AddrPort{real4a, real6a}, []netip.AddrPort{real6b}},
		{"TCP", model.TCP, []netip.AddrPort{real4b}, []netip.AddrPort{real4a}},
		{"SCTP", model.SCTP, nil, []netip.AddrPort{real6b}},
	} {
		s := dataplane.NewStaleFlows(c.proto)
		for _, k := range c.reals {
			s.AddReal(k)
		}
		for _, k := range c.dests {
			s.AddDest(k)
		}
		n, err := dp.ClearConntrack(ctx, s)
		must(t, "clear conntrack: "+c.name, err)
		if n != 0 {
			t.Errorf("clear %s with no traffic deleted %d entries", c.name, n)
		}
	}
}
