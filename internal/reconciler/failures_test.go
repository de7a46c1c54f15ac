package reconciler

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// noTwos makes the fake a kernel without the twos scheduler's module, as
// Debian's cloud kernel is: the kernel answers ENOENT, the dataplane
// ErrUnsupported.
func noTwos(c fake.Call) error {
	if vs, ok := c.Arg.(model.VirtualServer); ok && vs.Scheduler == "twos" {
		return fmt.Errorf("add virtual server %s: scheduler twos: %w", vs.Key, dataplane.ErrUnsupported)
	}
	return nil
}

func twosService() *corev1.Service {
	s := service("fancy", "10.96.0.30", corev1.ProtocolTCP, 80)
	s.Annotations = map[string]string{translate.AnnotationScheduler: "twos"}
	return s
}

// TestKernelLackingASchedulerFailsOnlyThatService: a Service asking for a
// scheduler the kernel has no module for is reported on that Service
// (Event, failing count) and retried with backoff; the sync, every other
// Service and, through the sync's status, every health check stay green.
func TestKernelLackingASchedulerFailsOnlyThatService(t *testing.T) {
	r := newRig(t)
	r.fake.FailWhen(noTwos)
	r.webAndDNS()
	r.store.SetService(twosService())
	r.store.SetSlice(slice("fancy", corev1.ProtocolTCP, 8080, ready("10.244.1.5")))
	st, err := r.rec.Sync(context.Background(), false)
	if err != nil || st.Err != nil || r.rec.View().Last.Err != nil {
		t.Fatalf("one Service's scheduler failed the sync: %v", err)
	}
	r.expectDump(webAndDNS) // the others programmed; no VIP bound without its server
	if st.Failing != 1 || st.Requeue != serviceRetryFirst || len(r.warn.warnings) != 1 ||
		!strings.HasPrefix(r.warn.warnings[0], "default/fancy FailedToProgram") || !strings.Contains(r.warn.warnings[0], "twos") {
		t.Fatalf("failing %d, requeue %s, warnings %q: want default/fancy reported once, retried in %s", st.Failing, st.Requeue, r.warn.warnings, serviceRetryFirst)
	}
	if n := r.rec.View().Table().Failing; n != 1 {
		t.Fatalf("failing services in the view: %d", n)
	}

	// Not due: an incremental sync leaves it be.
	r.fake.ResetCalls()
	r.sync(false)
	if n := r.fake.Calls()["AddService"]; n != 0 {
		t.Fatalf("retried before its backoff: %d AddService calls", n)
	}
	// Due: retried, still failing, not reported again, backoff doubled.
	r.clock.advance(st.Requeue)
	st = r.sync(false)
	if n := r.fake.Calls()["AddService"]; n != 1 || st.Failing != 1 || st.Requeue != 2*serviceRetryFirst || len(r.warn.warnings) != 1 {
		t.Fatalf("retry: %d AddService calls, failing %d, requeue %s, warnings %q", n, st.Failing, st.Requeue, r.warn.warnings)
	}
	// A full resync is green too.
	if st := r.sync(true); st.Failing != 1 {
		t.Fatalf("full sync: failing %d", st.Failing)
	}
	// The Service picks a scheduler the kernel has: programmed, cleared.
	r.store.SetService(service("fancy", "10.96.0.30", corev1.ProtocolTCP, 80))
	if st := r.sync(false); st.Failing != 0 || st.Requeue != 0 || !strings.Contains(r.fake.Dump(), "-A -t 10.96.0.30:80 -s rr") {
		t.Fatalf("fixed Service: failing %d, requeue %s:\n%s", st.Failing, st.Requeue, r.fake.Dump())
	}
}

// TestKernelRefusingEverythingFailsTheSync: when operations fail and the
// kernel check (the canary) fails too, the kernel is what is wrong: the
// sync fails, and its error spells out a few failures and counts the rest.
func TestKernelRefusingEverythingFailsTheSync(t *testing.T) {
	r := newRig(t)
	for i := range 500 {
		name := fmt.Sprintf("s%d", i)
		r.store.SetService(service(name, fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), corev1.ProtocolTCP, 80))
	}
	r.fake.FailWhen(func(c fake.Call) error {
		if c.Method == "Observe" || c.Method == "EnsureShim" {
			return nil
		}
		return errors.New("netlink: injected")
	})
	_, err := r.rec.Sync(context.Background(), false)
	if err == nil {
		t.Fatal("every operation and the kernel check failed, yet the sync succeeded")
	}
	msg := err.Error()
	if len(msg) > 2000 || !strings.Contains(msg, "kernel check after") || !regexp.MustCompile(`and \d{3,} more`).MatchString(msg) {
		t.Fatalf("error (%d bytes) not capped as expected:\n%s", len(msg), msg)
	}
}

// TestCancellationStopsBetweenOperations: a SIGTERM (the context
// cancelled) in the middle of a sync of thousands of operations stops it
// at the next operation, and the error says so in one short line.
func TestCancellationStopsBetweenOperations(t *testing.T) {
	r := newRig(t)
	for i := range 3000 {
		name := fmt.Sprintf("s%d", i)
		r.store.SetService(service(name, fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), corev1.ProtocolTCP, 80))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.fake.ResetCalls()
	changes := 0
	r.fake.FailWhen(func(c fake.Call) error {
		switch c.Method {
		case "Observe", "Conns", "EnsureShim", "LinkFamilies":
			return nil
		}
		if changes++; changes == 100 {
			cancel() // the signal arrives while this call is in the kernel
		}
		return nil
	})
	_, err := r.rec.Sync(ctx, false)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled sync: %v", err)
	}
	if n := mutating(r.fake); n != 100 {
		t.Fatalf("%d kernel changes tried, want the 100 before the cancellation", n)
	}
	// 6 operations a Service: its record, server, ClusterIP and
	// no-endpoints members, VIP member and bind.
	if msg := err.Error(); len(msg) > 200 || !strings.Contains(msg, "17900 of 18000 operations not tried") {
		t.Fatalf("error (%d bytes), want the 17900 of 18000 operations after the 100th not tried: %s", len(msg), msg)
	}
}
