//go:build linux

package linux

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestAbandonedCallDropsHandles: a request the kernel never answers must
// not hang the caller, and the next call must not reuse its sockets.
func TestAbandonedCallDropsHandles(t *testing.T) {
	opened := 0
	d := &Dataplane{log: zap.NewNop(), timeout: time.Minute, open: func() (*handles, error) {
		opened++
		return &handles{}, nil
	}}
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
	d := &Dataplane{log: zap.NewNop(), timeout: 20 * time.Millisecond, open: func() (*handles, error) { return &handles{}, nil }}
	release := make(chan struct{})
	defer close(release)
	err := d.do(context.Background(), "hang", func(*handles) error { <-release; return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
}

func TestClosedFails(t *testing.T) {
	d := &Dataplane{log: zap.NewNop(), timeout: time.Second, open: func() (*handles, error) { return &handles{}, nil }}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	called := false
	if err := d.do(t.Context(), "after close", func(*handles) error { called = true; return nil }); err == nil || called {
		t.Fatalf("call after Close: err=%v, ran=%v", err, called)
	}
}
