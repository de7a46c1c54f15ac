package reconciler

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// TestDriftOwnsFromTheFreshRead: a virtual server that only one of our set
// members marks as ours, both appearing after the last sync, is ours in a
// drift check exactly as in the full sync that would follow it. An owner
// mixing the fresh link read with the cached set members would leave it.
func TestDriftOwnsFromTheFreshRead(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	ctx := context.Background()
	orphan := netip.MustParseAddr("10.96.0.99")
	k := model.NewVSKey(model.TCP, orphan, 80)
	if err := r.fake.Do(ctx, model.Op{Kind: model.AddService, VS: model.VirtualServer{Key: k, Scheduler: model.SchedRR}}); err != nil {
		t.Fatal(err)
	}
	if err := r.fake.Do(ctx, model.Op{Kind: model.AddSetEntry, Entry: shim.Entry(shim.ClusterIP, orphan, model.TCP, 80)}); err != nil {
		t.Fatal(err)
	}
	drift, err := r.rec.Diff(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := "-D -t 10.96.0.99:80\nipset del KUBE-IPVS-CLUSTER-IP 10.96.0.99,tcp:80"
	if got := render(drift); got != want {
		t.Fatalf("drift:\n%s\nwant:\n%s", got, want)
	}
	r.sync(true)
	if _, ok := r.fake.State().Services[k]; ok {
		t.Fatal("the full sync left the service drift said it would delete")
	}
}

func render(ops []model.Op) string {
	lines := make([]string, len(ops))
	for i, op := range ops {
		lines[i] = op.String()
	}
	return strings.Join(lines, "\n")
}
