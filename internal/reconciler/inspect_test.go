package reconciler

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

func TestDriftIsEmptyAtSteadyStateAndShowsChanges(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	vs := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80)
	r.fake.SetConns(dataplane.RealRef{VS: vs, RS: netip.MustParseAddrPort("10.244.2.2:8080")}, model.Conns{Active: 1})
	r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2")))
	r.sync(false) // 10.244.2.2 drains at weight 0

	ops, err := r.rec.Diff(context.Background())
	if err != nil || len(ops) != 0 {
		t.Fatalf("drift at steady state (with a drain): %v %v", ops, err)
	}
	v := r.rec.View()
	if s, _ := v.Server(vs); len(v.drains) != 1 || s.Meta.Service.Name != "web" {
		t.Fatalf("view: draining=%v server=%+v", v.drains, s)
	}
	ctx := context.Background()
	if err := r.fake.Do(ctx, model.Op{Kind: model.UnbindAddr, Addr: netip.MustParseAddr("10.96.0.53")}); err != nil {
		t.Fatal(err)
	}
	if err := r.fake.Do(ctx, model.Op{Kind: model.UpdateReal, VS: model.VirtualServer{Key: vs}, RS: model.RealServer{Addr: netip.MustParseAddrPort("10.244.1.2:8080"), Weight: 5}}); err != nil {
		t.Fatal(err)
	}
	ops, err = r.rec.Diff(ctx)
	var lines []string
	for _, op := range ops {
		lines = append(lines, op.String())
	}
	want := "-e -t 10.96.0.10:80 -r 10.244.1.2:8080 -m -w 1\nip addr add 10.96.0.53/32"
	if err != nil || strings.Join(lines, "\n") != want {
		t.Fatalf("drift:\n%s\nwant:\n%s (err %v)", strings.Join(lines, "\n"), want, err)
	}
}
