package reconciler

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
)

// TestFamilySwitchedOffIsNotServed: on a node with IPv6 disabled
// (net.ipv6.conf.all/default.disable_ipv6=1) a Service's IPv6 external IP
// is not programmed, with one warning for the node, and the sync succeeds:
// the kernel would refuse its bind with EACCES, which is that address's,
// never the node's health. Switched on, IPv6 is served; switched off
// again, what was programmed of it goes.
func TestFamilySwitchedOffIsNotServed(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	r := newRigWith(t, func(o *Options) { o.Log = zap.New(core) })
	must(t, r.fake.SetIPv6Disabled(true))
	web := service("web", "10.96.0.10", corev1.ProtocolTCP, 80)
	web.Spec.ExternalIPs = []string{"192.0.2.30", "fd00:96::30"}
	r.store.SetService(web)
	r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2")))
	v4Only := `-A -t 10.96.0.10:80 -s rr
  -a -t 10.96.0.10:80 -r 10.244.1.2:8080 -m -w 1
-A -t 192.0.2.30:80 -s rr
  -a -t 192.0.2.30:80 -r 10.244.1.2:8080 -m -w 1
addr 10.96.0.10
addr 192.0.2.30
`
	v6 := netip.MustParseAddr("fd00:96::30")
	for _, full := range []bool{false, true, false} {
		r.fake.ResetCalls()
		st, err := r.rec.Sync(context.Background(), full)
		if err != nil || st.Failed != 0 || st.Failing != 0 {
			t.Fatalf("IPv6 off (full %v): err %v, %d operations failed, %d Services failing", full, err, st.Failed, st.Failing)
		}
		r.expectDump(v4Only)
		for _, c := range r.fake.Log() {
			if c.Arg == v6 {
				t.Fatalf("IPv6 off: the kernel was asked %s %s", c.Method, v6)
			}
		}
	}
	if n := logs.FilterMessageSnippet("switched off").Len(); n != 1 {
		t.Fatalf("%d warnings about the switched-off family, want one: %v", n, logs.All())
	}

	must(t, r.fake.SetIPv6Disabled(false))
	r.sync(false)
	if d := r.fake.Dump(); !strings.Contains(d, "-A -t [fd00:96::30]:80 -s rr") || !strings.Contains(d, "addr fd00:96::30") {
		t.Fatalf("IPv6 on again, its external IP not served:\n%s", d)
	}
	must(t, r.fake.SetIPv6Disabled(true))
	r.fake.ResetCalls()
	if st := r.sync(false); !st.Full || st.Failed != 0 {
		t.Fatalf("IPv6 switched off: full %v, %d operations failed; want the kernel read afresh, nothing failed", st.Full, st.Failed)
	}
	r.expectDump(v4Only)
	if n := logs.FilterMessageSnippet("switched off").Len(); n != 2 {
		t.Fatalf("%d warnings about the switched-off family, want one per switch: %v", n, logs.All())
	}
	if st := r.sync(false); st.Ops != 0 {
		t.Fatalf("IPv6 off again: %d operations left", st.Ops)
	}
}

// TestFamilyOffAtStart: a node whose link refuses IPv6 before the agent
// starts serves IPv4 from its first sync.
func TestFamilyOffAtStart(t *testing.T) {
	f := fake.New()
	must(t, f.SetIPv6Disabled(true))
	r := newRigWith(t, func(o *Options) { o.Dataplane = f })
	r.fake = f
	r.restart()
	svc := service("dual", "10.96.0.10", corev1.ProtocolTCP, 80)
	svc.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
	r.store.SetService(svc)
	r.sync(false)
	r.expectDump("-A -t 10.96.0.10:80 -s rr\naddr 10.96.0.10\n")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
