package reconciler

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

func TestCleanupRemovesOursOnly(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	ctx := context.Background()
	foreign := model.VirtualServer{Key: model.NewVSKey(model.TCP, netip.MustParseAddr("192.168.1.200"), 443), Scheduler: "wlc"}
	nodePort := model.VirtualServer{Key: model.NewVSKey(model.TCP, netip.MustParseAddr("192.168.1.10"), 30080), Scheduler: "rr"}
	nodeSSH := model.VirtualServer{Key: model.NewVSKey(model.TCP, netip.MustParseAddr("192.168.1.10"), 22), Scheduler: "rr"}
	for _, vs := range []model.VirtualServer{foreign, nodePort, nodeSSH} {
		if err := r.fake.AddService(ctx, vs); err != nil {
			t.Fatal(err)
		}
	}
	ops, err := Cleanup(ctx, r.fake, CleanupOptions{
		NodeAddrs:     []netip.Addr{netip.MustParseAddr("192.168.1.10")},
		NodePortRange: model.PortRange{First: 30000, Last: 32767},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.expectDump("-A -t 192.168.1.10:22 -s rr\n-A -t 192.168.1.200:443 -s wlc\n")
	if r.fake.HasLink() || len(ops) != 3 {
		t.Fatalf("link left=%v, ops=%v", r.fake.HasLink(), ops)
	}
	var lines []string
	for _, op := range ops {
		lines = append(lines, op.String())
	}
	if got := strings.Join(lines, "\n"); got != "-D -t 10.96.0.10:80\n-D -u 10.96.0.53:53\n-D -t 192.168.1.10:30080" {
		t.Fatalf("ops:\n%s", got)
	}
}
