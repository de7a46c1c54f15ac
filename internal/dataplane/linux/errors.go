//go:build linux

package linux

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
)

// errnoMap translates the kernel's answers to the dataplane's errors for one
// kind of request; the original errno stays wrapped too.
type errnoMap map[syscall.Errno]error

var (
	// Service requests: the IPVS netlink code answers EEXIST for a taken
	// key, ESRCH for a missing service and ENOENT when the scheduler (or
	// persistence engine) module cannot be found.
	serviceErrs = errnoMap{
		syscall.EEXIST: dataplane.ErrExist,
		syscall.ESRCH:  dataplane.ErrNotExist,
		syscall.ENOENT: dataplane.ErrUnsupported,
	}
	// Destination requests: ESRCH for a missing service, ENOENT for a
	// missing destination, EEXIST for a duplicate.
	destErrs = errnoMap{
		syscall.EEXIST: dataplane.ErrExist,
		syscall.ESRCH:  dataplane.ErrNotExist,
		syscall.ENOENT: dataplane.ErrNotExist,
	}
	// Address and local route requests: EEXIST for a bound address or an
	// existing route, EADDRNOTAVAIL when deleting an address that is not
	// bound, ESRCH when deleting a route that is not there, ENODEV when
	// the link is gone.
	addrErrs = errnoMap{
		syscall.EEXIST:        dataplane.ErrExist,
		syscall.EADDRNOTAVAIL: dataplane.ErrNotExist,
		syscall.ESRCH:         dataplane.ErrNotExist,
		syscall.ENODEV:        dataplane.ErrNotExist,
		syscall.ENOENT:        dataplane.ErrNotExist,
	}
)

// wrap returns err wrapping both the kernel's errno and the dataplane error
// it means, or err unchanged when the errno means nothing in particular.
func (m errnoMap) wrap(err error) error {
	var errno syscall.Errno
	if err == nil || !errors.As(err, &errno) {
		return err
	}
	if de, ok := m[errno]; ok {
		return fmt.Errorf("%w: %w", de, err)
	}
	return err
}
