//go:build linux

package linux

import (
	"context"
	"fmt"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// The shim methods of dataplane.Dataplane, served by the Shim. The shim
// has its own lock: netfilter calls never wait behind an IPVS call.

// EnsureShim creates the shim's sets and writes its rules when they differ.
func (d *Dataplane) EnsureShim(ctx context.Context, cfg shim.Config) error {
	if _, err := d.shim.Ensure(ctx, cfg); err != nil {
		return fmt.Errorf("ensure netfilter shim: %w", err)
	}
	return nil
}

// AddSetEntry adds one member to one of the shim's sets.
func (d *Dataplane) AddSetEntry(ctx context.Context, e model.SetEntry) error {
	return d.shim.Add(ctx, e)
}

// DeleteSetEntry removes one member from one of the shim's sets.
func (d *Dataplane) DeleteSetEntry(ctx context.Context, e model.SetEntry) error {
	return d.shim.Delete(ctx, e)
}

// DeleteShim removes the shim's rules and sets.
func (d *Dataplane) DeleteShim(ctx context.Context) error {
	if err := d.shim.Remove(ctx); err != nil {
		return fmt.Errorf("remove netfilter shim: %w", err)
	}
	return nil
}

// DeleteKubeProxyShim removes kube-proxy IPVS mode's rules and sets.
func (d *Dataplane) DeleteKubeProxyShim(ctx context.Context) error {
	if err := d.shim.RemoveKubeProxy(ctx); err != nil {
		return fmt.Errorf("remove kube-proxy's netfilter leftovers: %w", err)
	}
	return nil
}
