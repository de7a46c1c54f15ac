package fake

import (
	"context"
	"fmt"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
)

// Apply makes each change through its single method, in order, so that a
// batch fails exactly as the same changes one by one would (the kernel
// handles a batched request like a lone one), fault injection included:
// FailNext("AddReal") fails the first AddReal of a batch. Calls counts
// each change under its single method's name. Once ctx ends, the rest are
// not tried (no call is made).
func (f *Fake) Apply(ctx context.Context, changes []dataplane.Change) []error {
	errs := make([]error, len(changes))
	for i, c := range changes {
		if ctx.Err() != nil {
			errs[i] = dataplane.NotTried(ctx)
			continue
		}
		errs[i] = f.applyOne(ctx, c)
	}
	return errs
}

func (f *Fake) applyOne(ctx context.Context, c dataplane.Change) error {
	switch c.Kind {
	case dataplane.ChangeAddService:
		return f.AddService(ctx, c.VS)
	case dataplane.ChangeUpdateService:
		return f.UpdateService(ctx, c.VS)
	case dataplane.ChangeDeleteService:
		return f.DeleteService(ctx, c.VS.Key)
	case dataplane.ChangeAddReal:
		return f.AddReal(ctx, c.VS.Key, c.RS)
	case dataplane.ChangeUpdateReal:
		return f.UpdateReal(ctx, c.VS.Key, c.RS)
	case dataplane.ChangeDeleteReal:
		return f.DeleteReal(ctx, c.VS.Key, c.RS.Addr)
	case dataplane.ChangeAddAddr:
		return f.AddAddr(ctx, c.Addr)
	case dataplane.ChangeDeleteAddr:
		return f.DeleteAddr(ctx, c.Addr)
	case dataplane.ChangeAddSetEntry:
		return f.AddSetEntry(ctx, c.Entry)
	case dataplane.ChangeDeleteSetEntry:
		return f.DeleteSetEntry(ctx, c.Entry)
	}
	return fmt.Errorf("unknown change kind %s", c.Kind)
}
