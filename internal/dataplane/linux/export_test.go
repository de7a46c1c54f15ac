//go:build linux

package linux

import (
	"context"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// AddUnchecked adds e as AddSetEntry does but without refusing what the
// kernel cannot hold, so a test can show that the read-back catches it.
func (s *Shim) AddUnchecked(ctx context.Context, e model.SetEntry) error {
	if err := s.change(ctx, "add", e, ipsetHandle.add, dataplane.ErrExist); err != nil {
		return err
	}
	return s.checkHeld(ctx, e)
}
