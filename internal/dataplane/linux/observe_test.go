//go:build linux

package linux_test

import (
	"context"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Observe reads every service with a dump and each one's destinations with
// a dump of their own. It must give back, for every kind of service and
// real server the kernel holds, exactly what was made, counters included:
// the same mark in both families (which only the netlink answers tell
// apart), IPv6 services and real servers, each forwarding method.
func TestObserveReadsEveryKind(t *testing.T) {
	dp := newLinux(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ip := netip.MustParseAddr
	ap := netip.MustParseAddrPort
	tables := []struct {
		vs    model.VirtualServer
		reals []model.RealServer
	}{
		{model.VirtualServer{Key: model.NewVSKey(model.TCP, ip("10.96.0.1"), 443), Scheduler: "rr"}, []model.RealServer{
			{Addr: ap("10.244.0.1:8080"), Weight: 1}, {Addr: ap("10.244.0.2:8080"), Weight: 0}}},
		{model.VirtualServer{Key: model.NewVSKey(model.UDP, ip("10.96.0.10"), 53), Scheduler: "sh", Flags: model.FlagPersistent, Timeout: 10800}, []model.RealServer{
			{Addr: ap("10.244.0.3:53"), Weight: 5, Forward: model.Route}}},
		{model.VirtualServer{Key: model.NewVSKey(model.SCTP, ip("10.96.0.3"), 2905), Scheduler: "rr"}, nil},
		{model.VirtualServer{Key: model.NewVSKey(model.TCP, ip("fd00:10:96::1"), 80), Scheduler: "lc"}, []model.RealServer{
			{Addr: ap("[fd00:10:244:1::5]:8080"), Weight: 1, Forward: model.Tunnel}, {Addr: ap("[fd00:10:244:1::6]:8080"), Weight: 3}}},
		{model.VirtualServer{Key: model.VSKey{FWMark: 7, Addr: netip.IPv4Unspecified()}, Scheduler: "rr"}, []model.RealServer{
			{Addr: ap("10.244.0.4:0"), Weight: 1}}},
		{model.VirtualServer{Key: model.VSKey{FWMark: 7, Addr: netip.IPv6Unspecified()}, Scheduler: "rr"}, []model.RealServer{
			{Addr: ap("[fd00:10:244::9]:0"), Weight: 1}}},
		{model.VirtualServer{Key: model.VSKey{FWMark: 9, Addr: netip.IPv6Unspecified()}, Scheduler: "wrr"}, []model.RealServer{
			{Addr: ap("[fd00:10:244::a]:0"), Weight: 2, Forward: model.Local}}},
	}
	want := map[model.VSKey]*model.Service{}
	wantConns := map[dataplane.RealRef]model.Conns{}
	for _, tb := range tables {
		if err := applyOne(ctx, dp, model.Op{Kind: model.AddService, VS: tb.vs}); err != nil {
			t.Fatal(err)
		}
		for _, rs := range tb.reals {
			if err := applyOne(ctx, dp, model.Op{Kind: model.AddReal, VS: tb.vs, RS: rs}); err != nil {
				t.Fatal(err)
			}
			wantConns[dataplane.RealRef{VS: tb.vs.Key, RS: rs.Addr}] = model.Conns{}
		}
		want[tb.vs.Key] = &model.Service{VirtualServer: tb.vs, Reals: model.RealsOf(tb.reals)}
	}
	obs, err := dp.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(obs.State.Services) != len(tables) {
		t.Fatalf("observed %d services, want %d", len(obs.State.Services), len(tables))
	}
	for k, w := range want {
		got := obs.State.Services[k]
		if got != nil {
			// The kernel marks every service it holds as hashed.
			got.Flags &^= model.FlagHashed
		}
		if got == nil || !got.Equal(w) {
			t.Errorf("%v: observed %+v, made %+v", k, got, w)
		}
	}
	if !reflect.DeepEqual(obs.Conns, wantConns) {
		t.Errorf("counters %v, want %v", obs.Conns, wantConns)
	}
}
