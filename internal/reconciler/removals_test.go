package reconciler

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/objects"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// externalService is a Service with a ClusterIP and an external IP, port 80.
func externalService(name, clusterIP, external string) *corev1.Service {
	s := service(name, clusterIP, corev1.ProtocolTCP, 80)
	s.Spec.ExternalIPs = []string{external}
	return s
}

// TestBackoffNeverHoldsARemoval: a Service backing off (its scheduler
// change failed) whose external IP becomes a joining Node's address loses
// that frontend at the next sync, before its retry is due: the virtual
// server, the binding and the VIPs guard all go. Its backoff holds what it
// would create or change, never what the plan removes.
func TestBackoffNeverHoldsARemoval(t *testing.T) {
	r := newRig(t)
	r.fake.FailWhen(noTwos)
	a := externalService("a", "10.96.0.20", "192.168.1.50")
	r.store.SetService(a)
	r.store.SetSlice(slice("a", corev1.ProtocolTCP, 8080, ready("10.244.1.2")))
	r.sync(false)
	if vips := vipLines(r.fake.Dump()); !strings.Contains(vips, "KUBE-IPVS-VIPS 192.168.1.50") {
		t.Fatalf("external IP not served:\n%s", vips)
	}
	a = a.DeepCopy()
	a.Annotations = map[string]string{translate.AnnotationScheduler: "twos"}
	r.store.SetService(a)
	if st := r.sync(false); st.Failing != 1 {
		t.Fatalf("failing %d, want the Service whose scheduler the kernel lacks", st.Failing)
	}

	r.store.SetNodeAddrs("node-c", objects.NodeAddrs{Addrs: []netip.Addr{netip.MustParseAddr("192.168.1.50")}})
	if st := r.sync(false); st.Failing != 1 {
		t.Fatalf("failing %d: the retry was not due yet", st.Failing)
	}
	if dump := r.fake.Dump(); strings.Contains(dump, "192.168.1.50") {
		t.Errorf("a reserved address stays claimed by a Service backing off:\n%s", dump)
	}
}

// TestFailedUnbindKeepsItsGuard: an address whose unbind failed stays
// bound, so it keeps its VIPs member (the guard that rejects every port
// but the Service's); the retry removes both.
func TestFailedUnbindKeepsItsGuard(t *testing.T) {
	r := newRig(t)
	a := externalService("a", "10.96.0.20", "192.168.1.50")
	r.store.SetService(a)
	r.store.SetSlice(slice("a", corev1.ProtocolTCP, 8080, ready("10.244.1.2")))
	r.sync(false)

	r.fake.FailNext("DeleteAddr", errors.New("unbind: injected"))
	r.store.SetService(service("a", "10.96.0.20", corev1.ProtocolTCP, 80))
	r.sync(false)
	if got := vipLines(r.fake.Dump()); !strings.Contains(got, "addr 192.168.1.50") || !strings.Contains(got, "set KUBE-IPVS-VIPS 192.168.1.50") {
		t.Errorf("unbind failed: want the address bound and guarded, have:\n%s", got)
	}

	r.clock.advance(serviceRetryFirst)
	r.sync(false)
	if got := vipLines(r.fake.Dump()); strings.Contains(got, "192.168.1.50") {
		t.Errorf("the retry left the address or its guard:\n%s", got)
	}
}

// TestTakeOverIsNotHeldByBackoff: a Service backing off that waits on a
// frontend takes it over in the sync its winner is deleted in, before its
// retry is due: held, the frontend would serve nothing until then.
func TestTakeOverIsNotHeldByBackoff(t *testing.T) {
	r := newRig(t)
	broken := true
	r.fake.FailWhen(func(c fake.Call) error {
		if vs, ok := c.Arg.(model.VirtualServer); ok && broken && c.Method == "AddService" && vs.Key.Addr == netip.MustParseAddr("10.96.0.21") {
			return errors.New("add: injected")
		}
		return nil
	})
	older := externalService("a", "10.96.0.20", "192.168.1.50")
	older.CreationTimestamp = metav1.NewTime(time.Unix(1_600_000_000, 0))
	newer := externalService("b", "10.96.0.21", "192.168.1.50")
	newer.CreationTimestamp = metav1.NewTime(time.Unix(1_650_000_000, 0))
	r.store.SetService(older)
	r.store.SetSlice(slice("a", corev1.ProtocolTCP, 8080, ready("10.244.1.2")))
	r.store.SetService(newer)
	r.store.SetSlice(slice("b", corev1.ProtocolTCP, 8080, ready("10.244.1.3")))
	if st := r.sync(false); st.Failing != 1 {
		t.Fatalf("failing %d, want the newer Service", st.Failing)
	}
	broken = false

	r.store.DeleteService(model.ServiceName{Namespace: "default", Name: "a"})
	r.sync(false)
	dump := r.fake.Dump()
	for _, want := range []string{"-A -t 192.168.1.50:80", "-a -t 192.168.1.50:80 -r 10.244.1.3:8080", "addr 192.168.1.50", "set KUBE-IPVS-VIPS 192.168.1.50"} {
		if !strings.Contains(dump, want) {
			t.Errorf("the frontend let go of is not taken over: %q missing:\n%s", want, dump)
		}
	}
}
