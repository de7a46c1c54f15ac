//go:build linux

package linux

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
)

// bounded runs fn in a goroutine and returns its result, or ctx's error when
// ctx ends first. fn then finishes on its own and its result is dropped: it
// travels only through the channel, so an abandoned fn shares no variable
// with the caller (a count or an error it is still building cannot race
// with the caller's return).
func bounded[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		// A panic in fn must not take the agent down. The netlink library
		// panics when a request fails with anything but an errno (its ipset
		// code asserts the type), which is what an abandoned call whose
		// socket was closed under it gets: at SIGTERM, or after a timeout.
		defer func() {
			if p := recover(); p != nil {
				r.err = fmt.Errorf("kernel call panicked: %v", p)
			}
			done <- r
		}()
		r.v, r.err = fn()
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// closer is a set of kernel sockets a call runs on.
type closer interface{ close() }

// calls runs kernel calls on sockets of type H: serialized, on live
// sockets, each bounded by its context's deadline (or by timeout when it has
// none). A call that is abandoned may still be waiting for the kernel on its
// sockets, so they are closed and never given to another call: the next one
// opens fresh ones. IPVS and rtnetlink calls (Dataplane) and ipset calls
// (Shim) each have their own.
type calls[H closer] struct {
	log     *zap.Logger
	timeout time.Duration
	// open makes fresh sockets (a seam for tests of the timeout path).
	open func() (H, error)

	mu     sync.Mutex
	h      H
	live   bool // h is open and usable
	closed bool
}

func newCalls[H closer](log *zap.Logger, timeout time.Duration, open func() (H, error)) *calls[H] {
	if log == nil {
		log = zap.NewNop()
	}
	if timeout <= 0 {
		timeout = time.Minute
	}
	return &calls[H]{log: log, timeout: timeout, open: open}
}

// call runs fn as one kernel call of c. what names the operation in the
// error when the call is abandoned.
func call[H closer, T any](ctx context.Context, c *calls[H], what string, fn func(h H) (T, error)) (T, error) {
	var zero T
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return zero, fmt.Errorf("%s: dataplane is closed", what)
	}
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("%s: %w", what, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	if !c.live {
		h, err := c.open()
		if err != nil {
			return zero, fmt.Errorf("%s: %w", what, err)
		}
		c.h, c.live = h, true
	}
	h := c.h
	v, err := bounded(ctx, func() (T, error) { return fn(h) })
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// The request may still be pending on these sockets: closing them
		// ends it (or its socket timeout does), and the next call opens
		// fresh ones.
		h.close()
		var none H
		c.h, c.live = none, false
		c.log.Warn("kernel call abandoned", zap.String("op", what), zap.Error(err))
		return zero, fmt.Errorf("%s: %w", what, err)
	}
	return v, err
}

// run is call for a fn with no result but its error.
func (c *calls[H]) run(ctx context.Context, what string, fn func(h H) error) error {
	_, err := call(ctx, c, what, func(h H) (struct{}, error) { return struct{}{}, fn(h) })
	return err
}

// close releases the sockets; later calls fail.
func (c *calls[H]) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live {
		c.h.close()
		var none H
		c.h, c.live = none, false
	}
	c.closed = true
}
