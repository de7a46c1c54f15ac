//go:build linux

package linux

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ti-mo/conntrack"
	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// testDataplane is a Dataplane whose sockets come from open.
func testDataplane(timeout time.Duration, open func() (*handles, error)) *Dataplane {
	return &Dataplane{log: zap.NewNop(), timeout: timeout, calls: newCalls(zap.NewNop(), timeout, open),
		Shim: NewShim(ShimOptions{CallTimeout: timeout})}
}

// TestAbandonedCallDropsHandles: a request the kernel never answers must
// not hang the caller, and the next call must not reuse its sockets.
func TestAbandonedCallDropsHandles(t *testing.T) {
	opened := 0
	d := testDataplane(time.Minute, func() (*handles, error) {
		opened++
		return &handles{}, nil
	})
	release := make(chan struct{})
	defer close(release)

	// The caller gives up only once the call is under way: a deadline that
	// could pass before the call starts (a slow, emulated VM) would test
	// nothing and leave hungCh empty.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	hungCh := make(chan *handles, 1)
	err := d.do(ctx, "hang", func(h *handles) error {
		hungCh <- h
		cancel()
		<-release
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("hung call: got %v, want the caller's cancellation", err)
	}
	hung := <-hungCh
	var next *handles
	if err := d.do(t.Context(), "next", func(h *handles) error { next = h; return nil }); err != nil {
		t.Fatalf("call after an abandoned one: %v", err)
	}
	if opened != 2 || next == hung {
		t.Fatalf("after a timeout: opened %d handle sets (want 2), reused the hung one: %v", opened, next == hung)
	}
}

// TestCallWithoutDeadlineIsBounded: a context without a deadline gets
// CallTimeout, so even a careless caller cannot hang the agent.
func TestCallWithoutDeadlineIsBounded(t *testing.T) {
	d := testDataplane(20*time.Millisecond, func() (*handles, error) { return &handles{}, nil })
	release := make(chan struct{})
	defer close(release)
	err := d.do(context.Background(), "hang", func(*handles) error { <-release; return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
}

func TestClosedFails(t *testing.T) {
	d := testDataplane(time.Second, func() (*handles, error) { return &handles{}, nil })
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	called := false
	if err := d.do(t.Context(), "after close", func(*handles) error { called = true; return nil }); err == nil || called {
		t.Fatalf("call after Close: err=%v, ran=%v", err, called)
	}
}

// stuckFlows is a conntrack table of many matching flows whose deletes
// block, after the first, until released: a flush the caller abandons
// half-way and that then goes on deleting and counting.
type stuckFlows struct {
	flows   []conntrack.Flow
	started chan struct{} // closed at the second delete
	release chan struct{}
	last    chan struct{} // closed at the last delete
	once    sync.Once
	deletes int
}

func (s *stuckFlows) Dump(_ bool, _ uint8, fn func(conntrack.Flow)) error {
	for _, f := range s.flows {
		fn(f)
	}
	return nil
}

func (s *stuckFlows) Delete(conntrack.Flow) error {
	s.deletes++
	if s.deletes > 1 {
		s.once.Do(func() { close(s.started) })
		<-s.release
	}
	if s.deletes == len(s.flows) {
		defer close(s.last)
	}
	if s.deletes%2 == 0 {
		return syscall.EPERM // an error for the flush to join
	}
	return nil
}

func (s *stuckFlows) Close() error { return nil }

// TestAbandonedFlushSharesNothing: a conntrack flush abandoned by its caller
// goes on deleting, counting and joining errors in its goroutine; the
// caller's result must not be those variables (go test -race fails on
// such sharing) and must be the cancellation alone.
func TestAbandonedFlushSharesNothing(t *testing.T) {
	real := netip.MustParseAddrPort("10.244.1.5:53")
	flow := conntrack.NewFlow(uint8(model.UDP), 0, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.96.0.10"), 40000, 53, 30, 0)
	flow.TupleReply.IP.SourceAddress, flow.TupleReply.Proto.SourcePort = real.Addr(), real.Port()
	table := &stuckFlows{flows: []conntrack.Flow{flow, flow, flow, flow, flow},
		started: make(chan struct{}), release: make(chan struct{}), last: make(chan struct{})}
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
	// Let the abandoned flush finish its deletes, count and join, then
	// read the result again: had the flush written into it, the race
	// detector would see a write with no order to this read, and the
	// values would have changed.
	close(table.release)
	<-table.last
	time.Sleep(100 * time.Millisecond) // the flush's last count and join
	if n != 0 || !errors.Is(err, context.Canceled) || errors.Is(err, syscall.EPERM) {
		t.Fatalf("the abandoned flush changed its caller's result: %d, %v", n, err)
	}
}

// TestPanickingCallIsAnError: the netlink library panics when a request on
// a socket closed under it fails with anything but an errno; a call that
// panics, whether still awaited or already abandoned, is an error, not the
// end of the agent.
func TestPanickingCallIsAnError(t *testing.T) {
	_, err := bounded(t.Context(), func() (int, error) { panic("interface conversion: error is *errors.errorString, not syscall.Errno") })
	if err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("a panicking call: %v, want an error saying it panicked", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	release, finished := make(chan struct{}), make(chan struct{})
	_, err = bounded(ctx, func() (int, error) {
		defer close(finished)
		cancel() // abandoned while it runs
		<-release
		panic("socket closed under the call")
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned call: %v", err)
	}
	close(release)
	<-finished // had the panic escaped, the test binary would have died here
}
