//go:build linux

package linux_test

import (
	"context"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/linux"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Observe takes the destinations from the kernel's listing of the table
// (one read) instead of a netlink dump per service. Both must give the same
// observation, for every kind of service and real server the kernel holds,
// and the listing must really be what was read.
func TestObserveListingMatchesNetlink(t *testing.T) {
	dp := newLinux(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ip := netip.MustParseAddr
	ap := netip.MustParseAddrPort
	tables := []struct {
		vs     model.VirtualServer
		reals  []model.RealServer
		listed bool
	}{
		{model.VirtualServer{Key: model.NewVSKey(model.TCP, ip("10.96.0.1"), 443), Scheduler: "rr"}, []model.RealServer{
			{Addr: ap("10.244.0.1:8080"), Weight: 1}, {Addr: ap("10.244.0.2:8080"), Weight: 0}}, true},
		{model.VirtualServer{Key: model.NewVSKey(model.UDP, ip("10.96.0.10"), 53), Scheduler: "sh", Flags: model.FlagPersistent, Timeout: 10800}, []model.RealServer{
			{Addr: ap("10.244.0.3:53"), Weight: 5, Forward: model.Route}}, true},
		{model.VirtualServer{Key: model.NewVSKey(model.SCTP, ip("10.96.0.3"), 2905), Scheduler: "rr"}, nil, true},
		{model.VirtualServer{Key: model.NewVSKey(model.TCP, ip("fd00:10:96::1"), 80), Scheduler: "lc"}, []model.RealServer{
			{Addr: ap("[fd00:10:244:1::5]:8080"), Weight: 1, Forward: model.Tunnel}, {Addr: ap("[fd00:10:244:1::6]:8080"), Weight: 3}}, true},
		// The same mark in both families: the listing cannot tell them apart.
		{model.VirtualServer{Key: model.VSKey{FWMark: 7, Addr: netip.IPv4Unspecified()}, Scheduler: "rr"}, []model.RealServer{
			{Addr: ap("10.244.0.4:0"), Weight: 1}}, false},
		{model.VirtualServer{Key: model.VSKey{FWMark: 7, Addr: netip.IPv6Unspecified()}, Scheduler: "rr"}, []model.RealServer{
			{Addr: ap("[fd00:10:244::9]:0"), Weight: 1}}, false},
		{model.VirtualServer{Key: model.VSKey{FWMark: 9, Addr: netip.IPv6Unspecified()}, Scheduler: "wrr"}, []model.RealServer{
			{Addr: ap("[fd00:10:244::a]:0"), Weight: 2}}, true},
	}
	for _, tb := range tables {
		if err := applyOne(ctx, dp, model.Op{Kind: model.AddService, VS: tb.vs}); err != nil {
			t.Fatal(err)
		}
		for _, rs := range tb.reals {
			if err := applyOne(ctx, dp, model.Op{Kind: model.AddReal, VS: tb.vs, RS: rs}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tb := range tables {
		if got := linux.ListingShows(tb.vs.Key); got != tb.listed {
			t.Errorf("the listing gives %v's destinations: %v, want %v", tb.vs.Key, got, tb.listed)
		}
	}
	listed, err := dp.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var overNetlink dataplane.Observation
	linux.ObserveOverNetlink(func() { overNetlink, err = dp.Observe(ctx) })
	if err != nil {
		t.Fatal(err)
	}
	if len(listed.State.Services) != len(tables) {
		t.Fatalf("observed %d services, want %d", len(listed.State.Services), len(tables))
	}
	for k, want := range overNetlink.State.Services {
		if got := listed.State.Services[k]; got == nil || !got.Equal(want) {
			t.Errorf("%v: from the listing %+v, over netlink %+v", k, got, want)
		}
	}
	if !reflect.DeepEqual(listed.Conns, overNetlink.Conns) {
		t.Errorf("counters from the listing %v, over netlink %v", listed.Conns, overNetlink.Conns)
	}
}
