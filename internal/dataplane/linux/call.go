//go:build linux

package linux

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
)

// kernelSockets is a set of kernel sockets a call runs on.
type kernelSockets interface {
	// bound makes every wait on the sockets end at deadline: the sockets
	// of other libraries, which take no context (see socket.within for the
	// package's own).
	bound(deadline time.Time) error
	close()
}

// calls runs kernel calls on sockets of type H: serialized, on live
// sockets, each bounded by its context's deadline (or by timeout when it has
// none). A call runs in its caller's goroutine and its sockets end every
// wait at the deadline (the package's own sockets at the context's
// cancellation too; the library's rtnetlink socket, which takes no
// context, only at the deadline), so a call that returns has nothing left
// running. A call cut short may leave answers
// queued on its sockets, so they are closed and never given to another
// call: the next one opens fresh ones. IPVS and rtnetlink calls
// (Dataplane) and ipset calls (Shim) each have their own.
type calls[H kernelSockets] struct {
	log     *zap.Logger
	timeout time.Duration
	// open makes fresh sockets (a seam for tests of the timeout path).
	open func() (H, error)

	mu     sync.Mutex
	h      H
	live   bool // h is open and usable
	closed bool
}

func newCalls[H kernelSockets](log *zap.Logger, timeout time.Duration, open func() (H, error)) *calls[H] {
	if log == nil {
		log = zap.NewNop()
	}
	if timeout <= 0 {
		timeout = time.Minute
	}
	return &calls[H]{log: log, timeout: timeout, open: open}
}

// call runs fn as one kernel call of c; fn's requests honour the ctx it is
// handed. what names the operation in the error when the call is cut short.
func call[H kernelSockets, T any](ctx context.Context, c *calls[H], what string, fn func(ctx context.Context, h H) (T, error)) (T, error) {
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
	deadline, _ := ctx.Deadline()
	if err := h.bound(deadline); err != nil {
		c.drop()
		return zero, fmt.Errorf("%s: %w", what, err)
	}
	v, err := fn(ctx, h)
	if err != nil && (ctx.Err() != nil || !time.Now().Before(deadline)) {
		// An answer may still be on its way to these sockets: the next
		// call opens fresh ones. (A socket's deadline is the context's,
		// and may pass a moment before the context says so.)
		c.drop()
		c.log.Warn("kernel call cut short", zap.String("op", what), zap.Error(err))
		return zero, fmt.Errorf("%s: %w (%w)", what, cmp.Or(ctx.Err(), context.DeadlineExceeded), err)
	}
	return v, err
}

// drop closes the sockets; the next call opens fresh ones. The caller
// holds c.mu.
func (c *calls[H]) drop() {
	c.h.close()
	var none H
	c.h, c.live = none, false
}

// run is call for a fn with no result but its error.
func (c *calls[H]) run(ctx context.Context, what string, fn func(ctx context.Context, h H) error) error {
	_, err := call(ctx, c, what, func(ctx context.Context, h H) (struct{}, error) { return struct{}{}, fn(ctx, h) })
	return err
}

// close releases the sockets; later calls fail.
func (c *calls[H]) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live {
		c.drop()
	}
	c.closed = true
}
