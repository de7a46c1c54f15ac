package reconciler

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// slice6 is slice with IPv6 endpoints.
func slice6(svc string, proto corev1.Protocol, port int32, eps ...endpoint) *discoveryv1.EndpointSlice {
	s := slice(svc, proto, port, eps...)
	s.Name = svc + "-v6"
	s.AddressType = discoveryv1.AddressTypeIPv6
	return s
}

// readyRange is n ready endpoints from 10.244.<x>.<y> on.
func readyRange(n int) []endpoint {
	eps := make([]endpoint, n)
	for i := range eps {
		eps[i] = ready(fmt.Sprintf("10.244.%d.%d", 10+i/250, 1+i%250))
	}
	return eps
}

// TestConntrackCleanupReadsEachFamilyOnce: a sync that removes 200 UDP real
// servers and gives UDP frontends of both families their first endpoint
// reads each family's conntrack table once, and deletes exactly the
// entries of the removed real servers and those sent to the frontends
// while they had none.
func TestConntrackCleanupReadsEachFamilyOnce(t *testing.T) {
	r := newRig(t)
	udp := corev1.ProtocolUDP
	r.store.SetService(service("dns", "10.96.0.53", udp, 53))
	r.store.SetSlice(slice("dns", udp, 53, readyRange(201)...))
	for i, name := range []string{"syslog-a", "syslog-b", "syslog-c", "idle"} {
		r.store.SetService(service(name, fmt.Sprintf("10.96.1.%d", 1+i), udp, 514))
	}
	v6 := service("dns6", "fd00:96::53", udp, 53)
	v6.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	r.store.SetService(v6)
	r.store.SetService(service("metrics", "10.96.2.1", corev1.ProtocolTCP, 9100))
	r.store.SetSlice(slice("metrics", corev1.ProtocolTCP, 9100, ready("10.244.10.2")))
	r.sync(false)

	for _, ep := range readyRange(201) {
		r.fake.SetConntrack(model.UDP, netip.MustParseAddrPort(ep.addr+":53"), 1)
	}
	for _, f := range []string{"10.96.1.1:514", "10.96.1.2:514", "10.96.1.3:514", "10.96.1.4:514", "[fd00:96::53]:53"} {
		r.fake.SetConntrackDest(model.UDP, netip.MustParseAddrPort(f), 2)
	}
	// A TCP flow answered from a removed UDP real server's address and port
	// is another protocol's.
	r.fake.PlantConntrack(fake.ConntrackFlow{Proto: model.TCP, Dst: netip.MustParseAddrPort("10.96.2.1:9100"),
		Reply: netip.MustParseAddrPort("10.244.10.2:53")}, 1)

	r.store.SetSlice(slice("dns", udp, 53, readyRange(1)...))
	for i, name := range []string{"syslog-a", "syslog-b", "syslog-c"} {
		r.store.SetSlice(slice(name, udp, 514, ready(fmt.Sprintf("10.244.20.%d", 1+i))))
	}
	r.store.SetSlice(slice6("dns6", udp, 53, ready("fd00:244::3")))
	r.sync(false)

	if v4, v6 := r.fake.ConntrackDumps(); v4 > 1 || v6 > 1 {
		t.Errorf("conntrack tables read %d times (IPv4) and %d times (IPv6) in one sync, want at most once each", v4, v6)
	}
	want := strings.Join([]string{
		"tcp dst 10.96.2.1:9100 reply 10.244.10.2:53 x1",
		"udp dst * reply 10.244.10.1:53 x1",            // the real server that stays
		"udp dst 10.96.1.4:514 reply 10.96.1.4:514 x2", // still no endpoint
	}, "\n") + "\n"
	if got := r.fake.Conntrack(); got != want {
		t.Fatalf("conntrack entries left:\n%swant:\n%s", got, want)
	}
}

// TestFailedConntrackCleanupIsRetried: a cleanup that fails does not fail
// the sync; its keys are kept and cleared by the sync its backoff asks
// for, not before.
func TestFailedConntrackCleanupIsRetried(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.store.SetSlice(slice("dns", corev1.ProtocolUDP, 53, ready("10.244.1.3"), ready("10.244.2.3")))
	r.sync(false)
	r.fake.SetConntrack(model.UDP, netip.MustParseAddrPort("10.244.2.3:53"), 3)
	planted := r.fake.Conntrack()

	r.fake.FailNext("ClearConntrack", errors.New("netlink receive: no buffer space available"))
	r.store.SetSlice(slice("dns", corev1.ProtocolUDP, 53, ready("10.244.1.3")))
	st := r.sync(false)
	if st.Requeue != conntrackRetryFirst {
		t.Errorf("requeue %v after a failed cleanup, want %v", st.Requeue, conntrackRetryFirst)
	}
	for _, step := range []struct {
		advance time.Duration
		left    string
	}{
		{0, planted},                       // the failure
		{conntrackRetryFirst / 2, planted}, // not due yet
		{conntrackRetryFirst / 2, ""},      // the retry
	} {
		r.clock.advance(step.advance)
		if step.advance > 0 {
			r.sync(false)
		}
		if got := r.fake.Conntrack(); got != step.left {
			t.Fatalf("%v on: conntrack entries left:\n%swant:\n%s", step.advance, got, step.left)
		}
	}
	if v4, _ := r.fake.ConntrackDumps(); v4 != 1 {
		t.Errorf("IPv4 table read %d times, want once (the retry)", v4)
	}
}

// TestConntrackOfARealServerStillServedStays: a real server removed from
// one UDP Service but still sent to by another keeps its entries.
func TestConntrackOfARealServerStillServedStays(t *testing.T) {
	r := newRig(t)
	udp := corev1.ProtocolUDP
	for _, name := range []string{"dns", "dns-alias"} {
		ip := map[string]string{"dns": "10.96.0.53", "dns-alias": "10.96.0.54"}[name]
		r.store.SetService(service(name, ip, udp, 53))
		r.store.SetSlice(slice(name, udp, 53, ready("10.244.1.3"), ready("10.244.2.3")))
	}
	r.sync(false)
	r.fake.SetConntrack(model.UDP, netip.MustParseAddrPort("10.244.2.3:53"), 2)
	r.fake.SetConntrack(model.UDP, netip.MustParseAddrPort("10.244.1.3:53"), 1)
	r.store.SetSlice(slice("dns", udp, 53, ready("10.244.1.3")))
	r.store.SetSlice(slice("dns-alias", udp, 53, ready("10.244.2.3")))
	r.sync(false)
	want := "udp dst * reply 10.244.1.3:53 x1\nudp dst * reply 10.244.2.3:53 x2\n"
	if got := r.fake.Conntrack(); got != want {
		t.Fatalf("conntrack entries left:\n%swant:\n%s", got, want)
	}
}

// TestStaleConntrackKeysAreBounded: while cleanups keep failing, the keys
// kept for them stop at maxStaleKeys; the rest are counted as dropped.
func TestStaleConntrackKeysAreBounded(t *testing.T) {
	c := newStaleConntrack()
	key := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 53)
	}
	for i := range maxStaleKeys {
		c.add(c.reals, key(i))
	}
	c.add(c.reals, key(0))                                           // kept already
	c.add(c.dests, netip.MustParseAddrPort("[::ffff:10.96.0.1]:53")) // one too many
	c.add(c.reals, key(maxStaleKeys))                                // one too many
	if len(c.reals)+len(c.dests) != maxStaleKeys || c.dropped != 2 {
		t.Fatalf("kept %d keys and dropped %d, want %d and 2", len(c.reals)+len(c.dests), c.dropped, maxStaleKeys)
	}
}
