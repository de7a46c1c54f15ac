package fake

import (
	"context"
	"fmt"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Apply makes each operation in order, as the kernel handles a batched
// request like a lone one: each fails on its own (EEXIST, ENOENT, ...) and
// the rest are still made. Each is one call for fault injection and Calls,
// named as Call.Method says: FailNext("AddReal") fails the first real
// server added. Once ctx ends, the rest are not tried (no call is made).
func (f *Fake) Apply(ctx context.Context, ops []model.Op) []error {
	errs := make([]error, len(ops))
	for i, op := range ops {
		if ctx.Err() != nil {
			errs[i] = dataplane.NotTried(ctx)
			continue
		}
		errs[i] = f.apply(ctx, op)
	}
	return errs
}

// apply makes one operation.
func (f *Fake) apply(ctx context.Context, op model.Op) error {
	switch op.Kind {
	case model.AddService:
		return f.addService(ctx, op.VS)
	case model.UpdateService:
		return f.updateService(ctx, op.VS)
	case model.DeleteService:
		return f.deleteService(ctx, op.VS.Key)
	case model.AddReal:
		return f.addReal(ctx, op.VS.Key, op.RS)
	case model.UpdateReal:
		return f.updateReal(ctx, op.VS.Key, op.RS)
	case model.DeleteReal:
		return f.deleteReal(ctx, op.VS.Key, op.RS.Addr)
	case model.BindAddr:
		return f.addAddr(ctx, op.Addr)
	case model.UnbindAddr:
		return f.deleteAddr(ctx, op.Addr)
	case model.AddSetEntry:
		return f.addSetEntry(ctx, op.Entry)
	case model.DeleteSetEntry:
		return f.deleteSetEntry(ctx, op.Entry)
	}
	return fmt.Errorf("unknown operation kind %s", op.Kind)
}
