package linux

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
)

// TestIPVSAbsent: a kernel that refuses the generic netlink socket itself
// has no IPVS either, and says so as a missing family does; a slow or
// failing kernel is not taken for one without IPVS.
func TestIPVSAbsent(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("look up IPVS: %w", dataplane.ErrUnsupported), true},
		{fmt.Errorf("open generic netlink socket: open netlink socket: %w", unix.EPROTONOSUPPORT), true},
		{fmt.Errorf("open netlink socket: %w", unix.EAFNOSUPPORT), true},
		{fmt.Errorf("look up IPVS: %w", context.DeadlineExceeded), false},
		{fmt.Errorf("look up IPVS: %w", unix.EPERM), false},
		{errors.New("other"), false},
	}
	for _, c := range cases {
		if got := ipvsAbsent(c.err); got != c.want {
			t.Errorf("ipvsAbsent(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
