package reconciler

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// without returns the lines of a dump that do not mention addr.
func without(dump, addr string) []string {
	return slices.DeleteFunc(strings.Split(dump, "\n"), func(l string) bool { return strings.Contains(l, addr) })
}

// With nodePortAddresses unset (every node address, kube-proxy's IPVS
// default), NodePorts follow the host's addresses as the watcher puts them
// in the store: an address added gets the NodePort frontends, one removed
// loses them, and nothing else in the kernel moves.
func TestNodePortsFollowHostAddrs(t *testing.T) {
	r := newRigWith(t, func(o *Options) { o.Translate.NodePortAddresses = nil })
	r.store.SetNode(node("192.168.1.10"))
	r.store.SetHostAddrs([]netip.Addr{netip.MustParseAddr("192.168.1.10")})
	web := service("web", "10.96.0.10", corev1.ProtocolTCP, 80)
	web.Spec.Type = corev1.ServiceTypeNodePort
	web.Spec.Ports[0].NodePort = 30080
	r.store.SetService(web)
	r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2")))
	r.store.SetService(service("db", "10.96.0.20", corev1.ProtocolTCP, 5432))
	r.store.SetSlice(slice("db", corev1.ProtocolTCP, 5432, ready("10.244.1.3")))
	r.sync(false)
	before := r.fake.Dump()
	if !strings.Contains(before, "-A -t 192.168.1.10:30080 -s rr") {
		t.Fatalf("no NodePort on the host address:\n%s", before)
	}

	const added = "192.168.77.1"
	r.store.SetHostAddrs([]netip.Addr{netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr(added)})
	r.fake.ResetCalls()
	r.sync(false)
	after := r.fake.Dump()
	for _, want := range []string{
		"-A -t " + added + ":30080 -s rr",
		"-a -t " + added + ":30080 -r 10.244.1.2:8080 -m -w 1",
		"set KUBE-IPVS-FRONTENDS " + added + ",tcp:30080",
		"set KUBE-IPVS-EXTERNAL " + added + ",tcp:30080",
	} {
		if !strings.Contains(after, want) {
			t.Errorf("address added: %q missing:\n%s", want, after)
		}
	}
	if got, want := without(after, added), without(before, added); !slices.Equal(got, want) {
		t.Errorf("address added: the rest changed:\n%s\nwas:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The add, its real server and its two set members; nothing else.
	if n := mutating(r.fake); n != 4 {
		t.Errorf("address added: %d kernel changes, want 4: %v", n, r.fake.Calls())
	}

	r.store.SetHostAddrs([]netip.Addr{netip.MustParseAddr(added)})
	r.sync(false)
	gone := r.fake.Dump()
	if strings.Contains(gone, "192.168.1.10:30080") || strings.Contains(gone, "192.168.1.10,tcp:30080") {
		t.Errorf("address removed: its NodePort stays:\n%s", gone)
	}
	if got, want := without(gone, "192.168.1.10"), without(after, "192.168.1.10"); !slices.Equal(got, want) {
		t.Errorf("address removed: the rest changed:\n%s\nwas:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := r.rec.NodePortAddrs(); !slices.Equal(got, []netip.Addr{netip.MustParseAddr(added)}) {
		t.Errorf("NodePortAddrs %v, want the one host address left", got)
	}
	// A restart with the same addresses plans nothing.
	r.restart()
	r.store.SetHostAddrs([]netip.Addr{netip.MustParseAddr(added)})
	if st := r.sync(false); st.Ops != 0 {
		t.Errorf("restart planned %d operations", st.Ops)
	}
}

func nodeWithPodCIDRs(cidrs ...string) *corev1.Node {
	n := node("192.168.1.10")
	n.ObjectMeta = metav1.ObjectMeta{Name: "node-a"}
	n.Spec.PodCIDRs = cidrs
	return n
}

// --detect-local-mode=NodeCIDR: the shim's pod CIDRs are the Node's. No
// sync runs without them; the rules are written once they are known, and
// again should the Node come back with others; a Node gone keeps them.
func TestShimPodCIDRsFromNode(t *testing.T) {
	r := newRigWith(t, func(o *Options) { o.PodCIDRsFromNode = true })
	if cfg := r.fake.ShimConfig(); cfg != nil {
		t.Fatalf("rules written before the Node's pod CIDRs were known: %+v", cfg)
	}
	r.store.SetNode(node("192.168.1.10"))
	if _, err := r.rec.Sync(context.Background(), false); err == nil || !strings.Contains(err.Error(), `node "node-a" has no spec.podCIDRs`) {
		t.Fatalf("sync without pod CIDRs: %v", err)
	}
	podCIDRs := func() string {
		t.Helper()
		cfg := r.fake.ShimConfig()
		if cfg == nil {
			t.Fatal("no rules")
		}
		return fmtPrefixes(cfg.PodCIDRs)
	}
	r.store.SetNode(nodeWithPodCIDRs("10.244.1.0/24", "fd00:10:244:1::/64"))
	r.sync(false)
	if got := podCIDRs(); got != "10.244.1.0/24,fd00:10:244:1::/64" {
		t.Fatalf("pod CIDRs %s", got)
	}
	writes := r.fake.RuleWrites()
	r.sync(false)
	if r.fake.RuleWrites() != writes {
		t.Fatal("rules rewritten with nothing changed")
	}
	r.store.SetNode(nodeWithPodCIDRs("10.244.7.0/24"))
	r.sync(false) // incremental: the rules follow all the same
	if got := podCIDRs(); got != "10.244.7.0/24" || r.fake.RuleWrites() != writes+1 {
		t.Fatalf("after the Node changed: pod CIDRs %s, %d writes", got, r.fake.RuleWrites()-writes)
	}
	r.store.SetNode(nil)
	r.sync(true)
	if got := podCIDRs(); got != "10.244.7.0/24" {
		t.Fatalf("after the Node went: pod CIDRs %s", got)
	}
}

func fmtPrefixes(ps []netip.Prefix) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return strings.Join(s, ",")
}
