//go:build linux

package linux_test

import (
	"context"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// applyOne makes one operation through Apply, the way every write reaches
// the kernel.
func applyOne(ctx context.Context, dp dataplane.Batch, op model.Op) error {
	return dp.Apply(ctx, []model.Op{op})[0]
}
