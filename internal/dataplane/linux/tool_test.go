//go:build linux

package linux

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"
)

// TestToolKilledAtCallTimeout: a tool that never ends (an iptables-restore
// stuck on a lock it ignores --wait for, say) is killed at the shim's
// CallTimeout even when the caller's context has no deadline.
func TestToolKilledAtCallTimeout(t *testing.T) {
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("no sleep binary")
	}
	s := NewShim(ShimOptions{CallTimeout: 200 * time.Millisecond})
	start := time.Now()
	_, err := s.exec(context.Background(), "", "sleep", "60")
	if took := time.Since(start); err == nil || !errors.Is(err, context.DeadlineExceeded) || took > 5*time.Second {
		t.Fatalf("a tool that never ends: %v after %s, want it killed at 200ms", err, took)
	}
}
