//go:build linux

package linux_test

import (
	"context"
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
