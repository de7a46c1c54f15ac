//go:build linux

package linux

import (
	"context"
	"errors"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ti-mo/conntrack"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// testDataplane is a Dataplane whose sockets come from open.
func testDataplane(timeout time.Duration, open func() (*handles, error)) *Dataplane {
	return &Dataplane{log: zap.NewNop(), timeout: timeout, calls: newCalls(zap.NewNop(), timeout, open),
		Shim: NewShim(ShimOptions{CallTimeout: timeout})}
}

// hangOnKernel waits for an answer the kernel never sends (nothing was
// asked on a fresh rtnetlink socket): the call ends only by its deadline or
// its context's cancellation. started, when not nil, runs once the wait is
// set up.
func hangOnKernel(ctx context.Context, h *handles, started func()) error {
	return h.rt.within(ctx, func() error {
		if started != nil {
			started()
		}
		_, err := h.rt.receive()
		return err
	})
}

// TestAbandonedCallDropsHandles: a request the kernel never answers must
// not hang the caller, and the next call must not reuse its sockets.
func TestAbandonedCallDropsHandles(t *testing.T) {
	opened := 0
	d := testDataplane(time.Minute, func() (*handles, error) {
		opened++
		return &handles{rt: newSocket(unix.NETLINK_ROUTE)}, nil
	})
	defer d.Close()

	// The caller gives up only once the call is under way: a deadline that
	// could pass before the call starts (a slow, emulated VM) would test
	// nothing and leave hungCh empty.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	hungCh := make(chan *handles, 1)
	err := d.do(ctx, "hang", func(ctx context.Context, h *handles) error {
		return hangOnKernel(ctx, h, func() { hungCh <- h; cancel() })
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("hung call: got %v, want the caller's cancellation", err)
	}
	hung := <-hungCh
	var next *handles
	if err := d.do(t.Context(), "next", func(_ context.Context, h *handles) error { next = h; return nil }); err != nil {
		t.Fatalf("call after an abandoned one: %v", err)
	}
	if opened != 2 || next == hung {
		t.Fatalf("after a timeout: opened %d handle sets (want 2), reused the hung one: %v", opened, next == hung)
	}
}

// TestCallWithoutDeadlineIsBounded: a context without a deadline gets
// CallTimeout, so even a careless caller cannot hang the agent.
func TestCallWithoutDeadlineIsBounded(t *testing.T) {
	d := testDataplane(20*time.Millisecond, func() (*handles, error) { return &handles{rt: newSocket(unix.NETLINK_ROUTE)}, nil })
	defer d.Close()
	err := d.do(context.Background(), "hang", func(ctx context.Context, h *handles) error { return hangOnKernel(ctx, h, nil) })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
}

// TestCutShortCallLeavesNothingRunning: a call that its deadline or its
// caller's cancellation ends has, once it returns, no goroutine of its own
// still waiting for the kernel.
func TestCutShortCallLeavesNothingRunning(t *testing.T) {
	d := testDataplane(20*time.Millisecond, func() (*handles, error) { return &handles{rt: newSocket(unix.NETLINK_ROUTE)}, nil })
	defer d.Close()
	before := runtime.NumGoroutine()
	for i := range 20 {
		ctx, cancel := context.WithCancel(t.Context())
		started := func() {}
		if i%2 == 0 { // cancelled half-way; the others reach CallTimeout
			started = cancel
		}
		err := d.do(ctx, "hang", func(ctx context.Context, h *handles) error { return hangOnKernel(ctx, h, started) })
		cancel()
		if err == nil {
			t.Fatalf("call %d: a call the kernel never answers succeeded", i)
		}
		// The runtime runs a timer's function (the deadline's cancel) on a
		// goroutine of its own, which ends at once; a call's goroutine still
		// waiting for the kernel would never end.
		settled := time.Now().Add(time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(settled) {
			time.Sleep(time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			t.Fatalf("call %d returned (%v) and left %d goroutines running, %d before it", i, err, n, before)
		}
	}
}

func TestClosedFails(t *testing.T) {
	d := testDataplane(time.Second, func() (*handles, error) { return &handles{}, nil })
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	called := false
	if err := d.do(t.Context(), "after close", func(context.Context, *handles) error { called = true; return nil }); err == nil || called {
		t.Fatalf("call after Close: err=%v, ran=%v", err, called)
	}
}

// stuckFlows is a conntrack table of many matching flows whose deletes
// block, after the first, until released or until the call's context
// ends: a flush the caller abandons half-way.
type stuckFlows struct {
	flows   []conntrack.Flow
	started chan struct{} // closed at the second delete
	release chan struct{}
	once    sync.Once
	deletes atomic.Int32
}

func (s *stuckFlows) Dump(_ context.Context, _ bool, _ uint8, fn func(conntrack.Flow)) error {
	for _, f := range s.flows {
		fn(f)
	}
	return nil
}

func (s *stuckFlows) Delete(ctx context.Context, flows []conntrack.Flow, errs []error) error {
	for i := range flows {
		n := s.deletes.Add(1)
		if n > 1 {
			s.once.Do(func() { close(s.started) })
			select {
			case <-s.release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if n%2 == 0 {
			errs[i] = syscall.EPERM // an error for the flush to join
		}
	}
	return nil
}

func (s *stuckFlows) Close() error { return nil }

// TestAbandonedFlushSharesNothing: a conntrack flush whose caller gives up
// half-way returns the cancellation alone (no count, no error of a delete),
// and once it has returned nothing of it goes on deleting.
func TestAbandonedFlushSharesNothing(t *testing.T) {
	real := netip.MustParseAddrPort("10.244.1.5:53")
	flow := conntrack.NewFlow(uint8(model.UDP), 0, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.96.0.10"), 40000, 53, 30, 0)
	flow.TupleReply.IP.SourceAddress, flow.TupleReply.Proto.SourcePort = real.Addr(), real.Port()
	table := &stuckFlows{flows: []conntrack.Flow{flow, flow, flow, flow, flow},
		started: make(chan struct{}), release: make(chan struct{})}
	d := testDataplane(time.Minute, func() (*handles, error) {
		return &handles{dialCT: func() (flowTable, error) { return table, nil }}, nil
	})

	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-table.started; cancel() }()
	stale := dataplane.NewStaleFlows(model.UDP)
	stale.AddReal(real)
	n, err := d.ClearConntrack(ctx, stale)
	if !errors.Is(err, context.Canceled) || n != 0 {
		t.Fatalf("abandoned flush: got %d, %v; want 0 and the cancellation", n, err)
	}
	// Release the deletes: a flush still running would now go on deleting,
	// counting and joining errors.
	deletes := table.deletes.Load()
	close(table.release)
	time.Sleep(100 * time.Millisecond)
	if got := table.deletes.Load(); got != deletes {
		t.Fatalf("the flush went on deleting after its call returned: %d deletes, %d at the return", got, deletes)
	}
	if n != 0 || !errors.Is(err, context.Canceled) || errors.Is(err, syscall.EPERM) {
		t.Fatalf("the abandoned flush changed its caller's result: %d, %v", n, err)
	}
}
