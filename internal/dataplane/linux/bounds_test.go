//go:build linux

package linux

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"
)

// A subscription's overflow, which its follower answers by subscribing
// again and reading afresh, is logged as information, whether the errno
// comes wrapped or as the netlink library's text; the end of a receive on a
// socket its follower closed is not logged, nor is anything once the
// subscription's context ended; any other receive error is a warning.
func TestSubscriptionOverflowIsNotAWarning(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	ctx, cancel := context.WithCancel(context.Background())
	report := warnWhileRunning(ctx, zap.New(core), "route announcements")
	report(fmt.Errorf("Receive failed: %v", unix.ENOBUFS))
	report(fmt.Errorf("receive: %w", unix.ENOBUFS))
	report(errors.New("Wrong sender portid 7, expected 0"))
	report(fmt.Errorf("Receive failed: %v", unix.EAGAIN)) // closed by a renewal
	cancel()
	report(unix.EBADF)
	var levels []zapcore.Level
	for _, e := range logs.All() {
		levels = append(levels, e.Level)
	}
	want := []zapcore.Level{zapcore.InfoLevel, zapcore.InfoLevel, zapcore.WarnLevel}
	if fmt.Sprint(levels) != fmt.Sprint(want) {
		t.Errorf("logged at %v, want %v: %v", levels, want, logs.All())
	}
}

// A whole read without a deadline of its own is bounded by readBound
// calls' time, not one call's; one with a deadline keeps it.
func TestReadBound(t *testing.T) {
	d := &Dataplane{timeout: time.Minute}
	ctx, cancel := d.readContext(context.Background())
	defer cancel()
	deadline, ok := ctx.Deadline()
	if left := time.Until(deadline); !ok || left < 9*time.Minute || left > 10*time.Minute {
		t.Errorf("a read without a deadline is bounded by %v (set: %v), want 10 minutes", left, ok)
	}
	mine, cancelMine := context.WithTimeout(context.Background(), time.Second)
	defer cancelMine()
	ctx, cancel2 := d.readContext(mine)
	defer cancel2()
	want, _ := mine.Deadline()
	if got, _ := ctx.Deadline(); got != want {
		t.Errorf("a read's own deadline %v was replaced by %v", want, got)
	}
}
