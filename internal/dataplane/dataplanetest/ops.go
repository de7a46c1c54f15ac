package dataplanetest

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// The contract makes every write as an operation through Apply, the one
// way writes reach the kernel; these make one operation each, named for
// the kernel request it is.

// applyOne makes op as a batch of one and returns its error.
func applyOne(ctx context.Context, b dataplane.Batch, op model.Op) error {
	errs := b.Apply(ctx, []model.Op{op})
	if len(errs) != 1 {
		return fmt.Errorf("apply of one operation returned %d errors", len(errs))
	}
	return errs[0]
}

func addService(ctx context.Context, b dataplane.Batch, vs model.VirtualServer) error {
	return applyOne(ctx, b, model.Op{Kind: model.AddService, VS: vs})
}

func updateService(ctx context.Context, b dataplane.Batch, vs model.VirtualServer) error {
	return applyOne(ctx, b, model.Op{Kind: model.UpdateService, VS: vs})
}

func deleteService(ctx context.Context, b dataplane.Batch, k model.VSKey) error {
	return applyOne(ctx, b, model.Op{Kind: model.DeleteService, VS: model.VirtualServer{Key: k}})
}

func addReal(ctx context.Context, b dataplane.Batch, k model.VSKey, rs model.RealServer) error {
	return applyOne(ctx, b, model.Op{Kind: model.AddReal, VS: model.VirtualServer{Key: k}, RS: rs})
}

func updateReal(ctx context.Context, b dataplane.Batch, k model.VSKey, rs model.RealServer) error {
	return applyOne(ctx, b, model.Op{Kind: model.UpdateReal, VS: model.VirtualServer{Key: k}, RS: rs})
}

func deleteReal(ctx context.Context, b dataplane.Batch, k model.VSKey, rs netip.AddrPort) error {
	return applyOne(ctx, b, model.Op{Kind: model.DeleteReal, VS: model.VirtualServer{Key: k}, RS: model.RealServer{Addr: rs}})
}

func bindAddr(ctx context.Context, b dataplane.Batch, a netip.Addr) error {
	return applyOne(ctx, b, model.Op{Kind: model.BindAddr, Addr: a})
}

func unbindAddr(ctx context.Context, b dataplane.Batch, a netip.Addr) error {
	return applyOne(ctx, b, model.Op{Kind: model.UnbindAddr, Addr: a})
}

func addSetEntry(ctx context.Context, b dataplane.Batch, e model.SetEntry) error {
	return applyOne(ctx, b, model.Op{Kind: model.AddSetEntry, Entry: e})
}

func deleteSetEntry(ctx context.Context, b dataplane.Batch, e model.SetEntry) error {
	return applyOne(ctx, b, model.Op{Kind: model.DeleteSetEntry, Entry: e})
}
