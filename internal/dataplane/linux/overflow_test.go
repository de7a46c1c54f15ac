//go:build linux

package linux

import (
	"context"
	"errors"
	"fmt"
	"testing"

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
