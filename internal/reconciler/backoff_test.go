package reconciler

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// twoTwos adds two Services asking for twos, which the kernel lacks.
func (r *rig) twoTwos() {
	for i, name := range []string{"fancy", "fancier"} {
		s := service(name, fmt.Sprintf("10.96.0.%d", 30+i), corev1.ProtocolTCP, 80)
		s.Annotations = map[string]string{translate.AnnotationScheduler: "twos"}
		r.store.SetService(s)
		r.store.SetSlice(slice(name, corev1.ProtocolTCP, 8080, ready(fmt.Sprintf("10.244.3.%d", i+1))))
	}
}

// TestServicesSharingAMissingSchedulerStayTheirs: two Services ask for a
// scheduler the kernel lacks, so that their retries fail every operation
// tried, across two Services. That is still theirs, not the kernel's (the
// canary answers): every sync succeeds, no retry re-reads the kernel, and
// neither a full sync nor a Node update before their retry is due tries
// them again.
func TestServicesSharingAMissingSchedulerStayTheirs(t *testing.T) {
	r := newRig(t)
	r.fake.FailWhen(noTwos)
	r.webAndDNS()
	r.twoTwos()
	st := r.sync(false)
	if st.Failing != 2 {
		t.Fatalf("failing %d, want the two twos Services", st.Failing)
	}
	steps := []struct {
		name          string
		do            func()
		full          bool
		adds, observe int // AddService calls and kernel reads the sync makes
	}{
		{"full sync before the retry is due", func() {}, true, 0, 1},
		{"Node update before the retry is due", func() { r.store.SetNode(node("192.168.1.10")) }, false, 0, 0},
		{"retry due: every operation fails", func() { r.clock.advance(serviceRetryFirst) }, false, 2, 0},
		{"next change: no full re-read", func() {
			r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready("10.244.1.2")))
		}, false, 0, 0},
		{"full sync before the second retry is due", func() {}, true, 0, 1},
		{"second retry", func() { r.clock.advance(2 * serviceRetryFirst) }, false, 2, 0},
	}
	for _, s := range steps {
		s.do()
		r.fake.ResetCalls()
		st, err := r.rec.Sync(context.Background(), s.full)
		if err != nil {
			t.Fatalf("%s: the twos Services failed the sync: %v", s.name, err)
		}
		calls := r.fake.Calls()
		if calls["AddService"] != s.adds || calls["Observe"] != s.observe || st.Failing != 2 {
			t.Fatalf("%s: %d AddService calls, %d kernel reads, failing %d; want %d, %d, 2",
				s.name, calls["AddService"], calls["Observe"], st.Failing, s.adds, s.observe)
		}
	}
	if n := len(r.warn.warnings); n != 2 {
		t.Fatalf("warnings %q: want each twos Service reported once", r.warn.warnings)
	}
	r.expectDump(`-A -t 10.96.0.10:80 -s rr
  -a -t 10.96.0.10:80 -r 10.244.1.2:8080 -m -w 1
-A -u 10.96.0.53:53 -s rr
  -a -u 10.96.0.53:53 -r 10.244.1.3:53 -m -w 1
addr 10.96.0.10
addr 10.96.0.53
`)
}

// TestPermissionErrorsAreTheirOperations: the kernel refusing addresses
// with EACCES (what it answers for an address of a family disabled on the
// link) is about those addresses while the canary answers: the sync
// succeeds. Once the canary fails too, the kernel as a whole refuses the
// agent, and the sync fails.
func TestPermissionErrorsAreTheirOperations(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.fake.FailWhen(func(c fake.Call) error {
		if c.Method == "AddAddr" {
			return fmt.Errorf("bind %s: %w", c.Arg, syscall.EACCES)
		}
		return nil
	})
	st, err := r.rec.Sync(context.Background(), false)
	if err != nil {
		t.Fatalf("refused binds failed the sync: %v", err)
	}
	if st.Failed != 2 {
		t.Fatalf("%d operations failed, want the two binds", st.Failed)
	}
	r.fake.FailNext("Probe", fmt.Errorf("probe: %w", syscall.EPERM))
	r.clock.advance(serviceRetryFirst)
	if _, err := r.rec.Sync(context.Background(), false); err == nil || !strings.Contains(err.Error(), "kernel check after 2 failed operations") {
		t.Fatalf("binds and the kernel check refused: %v, want the sync failed", err)
	}
}

// TestFailedOperationOfNoServiceBacksOff: an operation no Service holds
// (a hairpin member) that keeps failing is retried with backoff, as a
// Service is, by the incremental syncs its retry is due in; no later sync
// re-reads the whole kernel for it, and a full sync before its retry is due
// does not try it. Once the kernel takes it, it is applied and forgotten.
func TestFailedOperationOfNoServiceBacksOff(t *testing.T) {
	r := newRig(t)
	hairpin := shim.LoopBackEntry(model.TCP, mustAddrPort("10.244.1.2:8080"))
	broken := true
	tries := 0
	r.fake.FailWhen(func(c fake.Call) error {
		if c.Method == "AddSetEntry" && c.Arg == hairpin {
			tries++
			if broken {
				return fmt.Errorf("add %s: injected", hairpin)
			}
		}
		return nil
	})
	r.webAndDNS()
	r.sync(false)
	steps := []struct {
		name           string
		do             func()
		full           bool
		tries, observe int
	}{
		{"a change before the retry is due", func() {
			r.store.SetSlice(slice("dns", corev1.ProtocolUDP, 53, ready("10.244.1.3"), ready("10.244.1.4")))
		}, false, 0, 0},
		{"full sync before the retry is due", func() {}, true, 0, 1},
		{"retry due", func() { r.clock.advance(serviceRetryFirst) }, false, 1, 0},
		{"before the doubled retry", func() { r.clock.advance(serviceRetryFirst) }, false, 0, 0},
		{"doubled retry, the kernel takes it", func() { broken = false; r.clock.advance(serviceRetryFirst) }, false, 1, 0},
		{"forgotten", func() { r.clock.advance(serviceRetryMax) }, false, 0, 0},
	}
	for _, s := range steps {
		s.do()
		r.fake.ResetCalls()
		tries = 0
		st, err := r.rec.Sync(context.Background(), s.full)
		if err != nil {
			t.Fatalf("%s: a hairpin member failed the sync: %v", s.name, err)
		}
		if tries != s.tries || r.fake.Calls()["Observe"] != s.observe {
			t.Fatalf("%s: %d tries of the member, %d kernel reads; want %d, %d", s.name, tries, r.fake.Calls()["Observe"], s.tries, s.observe)
		}
		if st.Failing != 0 || (broken && st.Requeue == 0) {
			t.Fatalf("%s: failing Services %d, requeue %s: want none failing, a retry asked for", s.name, st.Failing, st.Requeue)
		}
	}
	if _, ok := r.fake.State().Sets[hairpin]; !ok {
		t.Fatalf("hairpin member %s not added after the kernel took it", hairpin)
	}
}

func mustAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
