//go:build linux

package linux_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/dataplanetest"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/linux"
)

// requireKernel is set where a real IPVS kernel is promised (the CI VM):
// there a missing kernel feature fails the test instead of skipping it, so
// the real-kernel suite can never pass by not running.
func requireKernel() bool { return os.Getenv("KUBE_IPVS_REQUIRE_KERNEL") == "1" }

// skipOrFail skips with the reason, or fails when the kernel is required.
func skipOrFail(t *testing.T, reason string) {
	t.Helper()
	if requireKernel() {
		t.Fatalf("KUBE_IPVS_REQUIRE_KERNEL=1 but %s", reason)
	}
	t.Skip(reason)
}

// newLinux opens the real dataplane and empties the kernel before and after
// the test. It changes the machine's IPVS table and kube-ipvs0: run it only
// in a VM or a throwaway network namespace.
func newLinux(t *testing.T) dataplane.Dataplane { return newLinuxWith(t, linux.Options{}) }

// newLinuxWith is newLinux with opts.
func newLinuxWith(t *testing.T, opts linux.Options) dataplane.Dataplane {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "the linux dataplane test needs root")
	}
	dp, err := linux.New(opts)
	if errors.Is(err, dataplane.ErrUnsupported) {
		skipOrFail(t, err.Error())
	}
	if err != nil {
		t.Fatalf("open linux dataplane: %v", err)
	}
	clean := func() error {
		// Generous: after SetPastKernelDefault the clean reads and
		// destroys 66,536 set members, under emulation on a shared host.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		return dataplanetest.Clean(ctx, dp)
	}
	if err := clean(); err != nil {
		t.Fatalf("empty the kernel before the test: %v", err)
	}
	t.Cleanup(func() {
		if err := clean(); err != nil {
			t.Errorf("empty the kernel after the test: %v", err)
		}
		if err := dp.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return dp
}

func TestContract(t *testing.T) {
	dataplanetest.Run(t, func(t *testing.T) dataplane.Dataplane { return switchable{dataplaneMakingSets{newLinux(t)}} })
}

// TestContractLocalRoutes: the dataplane binding VIPs as local routes
// keeps the same contract, the fake's, as the one binding addresses.
func TestContractLocalRoutes(t *testing.T) {
	dataplanetest.Run(t, func(t *testing.T) dataplane.Dataplane {
		return switchable{dataplaneMakingSets{newLinuxWith(t, linux.Options{LocalRoutes: true})}}
	})
}

// switchable is a linux dataplane the contract suite can switch IPv6 off
// on, by the link's disable_ipv6 sysctl, as a node's hardening does, and
// make sets on as an older version of the agent did.
type switchable struct{ dataplaneMakingSets }

func (s switchable) SetIPv6Disabled(off bool) error {
	v := "0"
	if off {
		v = "1"
	}
	return os.WriteFile("/proc/sys/net/ipv6/conf/"+dataplane.LinkName+"/disable_ipv6", []byte(v), 0o644)
}
