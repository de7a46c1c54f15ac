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
		if err := r.fake.Do(ctx, model.Op{Kind: model.AddService, VS: vs}); err != nil {
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

// TestCleanupInExcludedCIDRsAsTheAgent: cleanup reads the excluded CIDRs
// as the agent does. The virtual server the agent made there for a
// Service goes; kube-proxy's there, its address on kube-ipvs0, stays, as
// a sync with no Service naming it leaves it.
func TestCleanupInExcludedCIDRsAsTheAgent(t *testing.T) {
	excluded := []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24")}
	r := newRigWith(t, func(o *Options) { o.Exclude = excluded })
	r.kubeProxys(model.NewVSKey(model.TCP, netip.MustParseAddr("192.168.1.201"), 80), "10.244.9.9:80", false)
	r.store.SetService(withExternalIP("lb", "10.96.0.40", "192.168.1.200", 443))
	r.sync(false)
	r.sync(true)
	ops, err := Cleanup(context.Background(), r.fake, CleanupOptions{Exclude: excluded})
	if err != nil {
		t.Fatal(err)
	}
	r.expectDump("-A -t 192.168.1.201:80 -s rr\n  -a -t 192.168.1.201:80 -r 10.244.9.9:80 -m -w 1\n")
	var lines []string
	for _, op := range ops {
		lines = append(lines, op.String())
	}
	if got := strings.Join(lines, "\n"); got != "-D -t 10.96.0.40:443\n-D -t 192.168.1.200:443" {
		t.Fatalf("ops:\n%s", got)
	}
}
