package fake

import (
	"context"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Apply makes each change through its single method, in order, so that a
// batch fails exactly as the same changes one by one would (the kernel
// handles a batched request like a lone one), fault injection included:
// FailNext("AddReal") fails the first AddReal of a batch. Calls counts
// each change under its single method's name. Once ctx ends, the rest are
// not tried (no call is made).
func (f *Fake) Apply(ctx context.Context, changes []model.Op) []error {
	errs := make([]error, len(changes))
	for i, c := range changes {
		if ctx.Err() != nil {
			errs[i] = dataplane.NotTried(ctx)
			continue
		}
		errs[i] = dataplane.ApplyOne(ctx, f, c)
	}
	return errs
}
