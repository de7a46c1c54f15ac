//go:build linux

package linux_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// The contract's SetMaker for the real kernel: a set made through netlink
// as an older agent (or another tool) made it, beside the dataplane under
// test, in the same network namespace.

type dataplaneMakingSets struct{ dataplane.Dataplane }

func (dataplaneMakingSets) MakeSet(_ context.Context, def shim.SetDef, maxElem int) error {
	return makeIPSet(def, maxElem)
}

type netfilterMakingSets struct{ dataplane.Netfilter }

func (netfilterMakingSets) MakeSet(_ context.Context, def shim.SetDef, maxElem int) error {
	return makeIPSet(def, maxElem)
}

// makeIPSet creates def's set with room for maxElem members.
func makeIPSet(def shim.SetDef, maxElem int) error {
	family := uint8(syscall.AF_INET)
	if def.IPv6 {
		family = syscall.AF_INET6
	}
	return netlink.IpsetCreate(def.Name, string(def.Type), netlink.IpsetCreateOptions{Family: family, MaxElements: uint32(maxElem)})
}

func (d dataplaneMakingSets) WriteRules(ctx context.Context, cfg shim.Config) error {
	return writeShimRules(ctx, d.Dataplane, cfg)
}

func (n netfilterMakingSets) WriteRules(ctx context.Context, cfg shim.Config) error {
	return writeShimRules(ctx, n.Netfilter, cfg)
}

// writeShimRules writes cfg's rules with iptables-restore of the backend
// dp uses, over the sets there are.
func writeShimRules(ctx context.Context, dp any, cfg shim.Config) error {
	b := dp.(interface {
		Backend(context.Context) shim.Backend
	}).Backend(ctx)
	for _, v6 := range []bool{false, true} {
		if v6 && !cfg.IPv6 || !v6 && !cfg.IPv4 {
			continue
		}
		save, restore := b.Command("iptables-save"), b.Command("iptables-restore")
		if v6 {
			save, restore = b.Command("ip6tables-save"), b.Command("ip6tables-restore")
		}
		out, err := exec.CommandContext(ctx, save).Output()
		if err != nil {
			return fmt.Errorf("%s: %w", save, err)
		}
		rules := shim.Rules(cfg, v6)
		_, missing := rules.Plan(shim.ParseSave(string(out)))
		cmd := exec.CommandContext(ctx, restore, "--noflush")
		cmd.Stdin = strings.NewReader(rules.Restore(missing))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", restore, err, out)
		}
	}
	return nil
}
