package dataplane

import (
	"fmt"
	"strconv"
	"strings"
)

// KernelVersion is the numeric head of a kernel release string
// ("6.12.43+deb13-cloud-amd64" -> 6.12.43).
type KernelVersion struct{ Major, Minor, Patch int }

func (v KernelVersion) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Less orders versions numerically.
func (v KernelVersion) Less(o KernelVersion) bool {
	if v.Major != o.Major {
		return v.Major < o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor < o.Minor
	}
	return v.Patch < o.Patch
}

// ParseKernelVersion reads the leading MAJOR.MINOR[.PATCH] of a release
// string as uname -r or /proc/sys/kernel/osrelease print it; whatever
// follows the numbers (distribution suffixes) is ignored.
func ParseKernelVersion(release string) (KernelVersion, error) {
	s := strings.TrimSpace(release)
	end := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if end >= 0 {
		s = s[:end]
	}
	parts := strings.Split(strings.TrimSuffix(s, "."), ".")
	if len(parts) < 2 {
		return KernelVersion{}, fmt.Errorf("kernel release %q: want MAJOR.MINOR[.PATCH]", release)
	}
	var nums [3]int
	for i := 0; i < len(parts) && i < 3; i++ {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return KernelVersion{}, fmt.Errorf("kernel release %q: %w", release, err)
		}
		nums[i] = n
	}
	return KernelVersion{nums[0], nums[1], nums[2]}, nil
}

// ConnReusePolicy says what to do with net.ipv4.vs.conn_reuse_mode.
type ConnReusePolicy int

const (
	// ConnReuseUnsupported: the kernel is older than 4.1 and has no such
	// sysctl to set.
	ConnReuseUnsupported ConnReusePolicy = iota
	// ConnReuseSetZero: set it to 0.
	ConnReuseSetZero
	// ConnReuseLeave: leave the kernel's value alone.
	ConnReuseLeave
)

var (
	// connReuseMinKernel: the sysctl appeared in Linux 4.1; kube-proxy stopped
	// trying to set it on older kernels in kubernetes/kubernetes#88541.
	connReuseMinKernel = KernelVersion{4, 1, 0}
	// connReuseFixedKernel: with conn_reuse_mode=1 (the kernel default) a
	// new connection that reuses the source port of an old one to a real
	// server that is gone or draining waits a 1 s delay. Setting 0 avoids
	// the delay but lets such connections stick to a dead or draining real
	// server. Linux 5.9 (torvalds/linux 35dfb013149f) fixed the delay, so
	// kube-proxy leaves the kernel's value alone from there
	// (kubernetes/kubernetes#93297).
	connReuseFixedKernel = KernelVersion{5, 9, 0}
)

// ConnReuseFor decides conn_reuse_mode for a kernel as kube-proxy's IPVS
// proxier does: below 4.1 it cannot be set, from 5.9 it is left as is,
// between them it is set to 0.
func ConnReuseFor(v KernelVersion) ConnReusePolicy {
	switch {
	case v.Less(connReuseMinKernel):
		return ConnReuseUnsupported
	case v.Less(connReuseFixedKernel):
		return ConnReuseSetZero
	}
	return ConnReuseLeave
}
