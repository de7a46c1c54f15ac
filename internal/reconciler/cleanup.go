package reconciler

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
)

// CleanupOptions say what cleanup may consider ours besides the frontends
// its sets name: outside Exclude, virtual servers on the link's addresses
// and on these node addresses within the NodePort range (no Service names
// a nodePort here). Inside Exclude only what the sets name is ours, as for
// the agent. Every family is cleaned up, whichever the agent served.
type CleanupOptions struct {
	NodeAddrs     []netip.Addr
	NodePortRange model.PortRange
	Exclude       []netip.Prefix
	// KubeProxy also removes kube-proxy IPVS mode's netfilter leftovers
	// (its virtual servers on kube-ipvs0 go with ours: same link).
	KubeProxy bool
}

// Cleanup removes everything the agent owns (its virtual servers, the VIPs,
// the link and the netfilter shim) and nothing else: the same ownership predicate as a sync
// with nothing desired, so foreign services survive. It returns the
// operations it applied.
func Cleanup(ctx context.Context, dp dataplane.Dataplane, opt CleanupOptions) ([]model.Op, error) {
	obs, err := dp.Observe(ctx)
	if err != nil {
		return nil, fmt.Errorf("observe kernel state: %w", err)
	}
	owner := plan.NewOwner(obs.State, opt.NodeAddrs, plan.OwnerPolicy{
		NodePortRange: opt.NodePortRange,
		Exclude:       opt.Exclude,
		Families:      model.Families{IPv4: true, IPv6: true},
	})
	ops := plan.Diff(model.NewState(), obs.State, owner)
	var errs []error
	var done []model.Op
	for _, op := range ops {
		if op.Kind == model.UnbindAddr || op.Kind == model.DeleteSetEntry {
			continue // the link and the sets go whole below
		}
		if err := applyOp(ctx, dp, op); err != nil && !errors.Is(err, dataplane.ErrNotExist) {
			errs = append(errs, fmt.Errorf("%s: %w", op, err))
			continue
		}
		done = append(done, op)
	}
	if len(errs) > 0 {
		// Keep the link: its addresses are what mark the rest as ours.
		return done, errors.Join(errs...)
	}
	if err := dp.DeleteLink(ctx); err != nil && !errors.Is(err, dataplane.ErrNotExist) {
		return done, fmt.Errorf("delete link %s: %w", dataplane.LinkName, err)
	}
	// The shim goes last: while virtual servers remained, their traffic
	// still needed its masquerading.
	if err := dp.DeleteShim(ctx); err != nil {
		errs = append(errs, err)
	}
	if opt.KubeProxy {
		if err := dp.DeleteKubeProxyShim(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return done, errors.Join(errs...)
}

// CleanupShim removes the netfilter shim and, before it, the firewall-mark
// virtual servers of Local-policy frontends, which serve only the
// connections the shim marks and which only its LOCAL-SOURCES members mark
// as ours: left behind they would be no one's. Every other virtual server,
// the VIPs and the link stay, for a kube-proxy that already serves them
// (`kube-ipvs cleanup --shim-only`). It returns the operations it applied.
func CleanupShim(ctx context.Context, dp dataplane.Dataplane) ([]model.Op, error) {
	obs, err := dp.Observe(ctx)
	if err != nil {
		return nil, fmt.Errorf("observe kernel state: %w", err)
	}
	owner := plan.NewOwner(obs.State, nil, plan.OwnerPolicy{Families: model.Families{IPv4: true, IPv6: true}})
	var errs []error
	var done []model.Op
	for _, k := range obs.State.SortedKeys() {
		if k.FWMark == 0 || !owner.OwnsService(k) {
			continue
		}
		op := model.Op{Kind: model.DeleteService, VS: obs.State.Services[k].VirtualServer}
		if err := applyOp(ctx, dp, op); err != nil && !errors.Is(err, dataplane.ErrNotExist) {
			errs = append(errs, fmt.Errorf("%s: %w", op, err))
			continue
		}
		done = append(done, op)
	}
	if len(errs) > 0 {
		// Keep the shim: its sets are what mark the rest as ours.
		return done, errors.Join(errs...)
	}
	return done, dp.DeleteShim(ctx)
}
