package fake

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Init creates the link if missing and sets the sysctls, like linux.Init.
func (f *Fake) Init(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "Init", nil); err != nil {
		return err
	}
	f.link = true
	for _, k := range []string{"net/ipv4/vs/conntrack", "net/ipv4/vs/expire_nodest_conn",
		"net/ipv4/vs/expire_quiescent_template", "net/ipv4/ip_forward"} {
		f.sysctls[k] = "1"
	}
	return nil
}

// addAddr binds addr to the link; the link must exist (Init).
func (f *Fake) addAddr(ctx context.Context, addr netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "AddAddr", addr); err != nil {
		return err
	}
	if !f.link {
		return fmt.Errorf("bind %s: link %s %w", addr, dataplane.LinkName, dataplane.ErrNotExist)
	}
	addr = addr.Unmap()
	if addr.Is6() && f.noIPv6 {
		// The kernel refuses an address of a family disabled on the link.
		return fmt.Errorf("bind %s to %s: %w", addr, dataplane.LinkName, syscall.EACCES)
	}
	if _, ok := f.addrs[addr]; ok {
		return fmt.Errorf("bind %s to %s: %w", addr, dataplane.LinkName, dataplane.ErrExist)
	}
	f.addrs[addr] = struct{}{}
	f.announce(dataplane.AddrsChanged)
	return nil
}

// deleteAddr unbinds addr from the link.
func (f *Fake) deleteAddr(ctx context.Context, addr netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "DeleteAddr", addr); err != nil {
		return err
	}
	addr = addr.Unmap()
	if !f.link {
		return fmt.Errorf("unbind %s: link %s %w", addr, dataplane.LinkName, dataplane.ErrNotExist)
	}
	if _, ok := f.addrs[addr]; !ok {
		return fmt.Errorf("unbind %s from %s: %w", addr, dataplane.LinkName, dataplane.ErrNotExist)
	}
	delete(f.addrs, addr)
	f.announce(dataplane.AddrsChanged)
	return nil
}

// DeleteLink removes the link and every bound address; the IPVS table
// stays, as in the kernel. ErrNotExist if there is no link.
func (f *Fake) DeleteLink(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "DeleteLink", nil); err != nil {
		return err
	}
	if !f.link {
		return fmt.Errorf("delete link %s: %w", dataplane.LinkName, dataplane.ErrNotExist)
	}
	f.link = false
	clear(f.addrs)
	f.announce(dataplane.AddrsChanged)
	return nil
}

// LinkFamilies is IPv4, and IPv6 unless SetIPv6Disabled switched it off.
func (f *Fake) LinkFamilies(ctx context.Context) (model.Families, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "LinkFamilies", nil); err != nil {
		return model.Families{}, err
	}
	return model.Families{IPv4: true, IPv6: !f.noIPv6}, nil
}

// Probe answers unless the link is gone, as the kernel's lookup of it.
func (f *Fake) Probe(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "Probe", nil); err != nil {
		return err
	}
	if !f.link {
		return fmt.Errorf("probe: link %s %w", dataplane.LinkName, dataplane.ErrNotExist)
	}
	return nil
}
