//go:build linux

package linux

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestToolKilledAtCallTimeout: a tool that never ends (an iptables-restore
// stuck on a lock it ignores --wait for, say) is killed at the shim's
// CallTimeout even when the caller's context has no deadline.
func TestToolKilledAtCallTimeout(t *testing.T) {
	if _, err := exec.LookPath("sleep"); err != nil {
		const why = "no sleep binary on PATH to stand for a tool that never ends"
		if os.Getenv("KUBE_IPVS_REQUIRE_KERNEL") == "1" { // the VM's busybox has one: never skip there
			t.Fatal(why)
		}
		t.Skip(why)
	}
	s := NewShim(ShimOptions{CallTimeout: 200 * time.Millisecond})
	start := time.Now()
	_, err := s.exec(context.Background(), "", "sleep", "60")
	if took := time.Since(start); err == nil || !errors.Is(err, context.DeadlineExceeded) || took > 5*time.Second {
		t.Fatalf("a tool that never ends: %v after %s, want it killed at 200ms", err, took)
	}
}
