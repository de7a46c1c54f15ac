//go:build linux

package linux

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// part is the socket a change goes out on.
type part uint8

const (
	partNone  part = iota
	partIPVS       // generic netlink, the IPVS family
	partAddrs      // rtnetlink
	partSets       // nfnetlink, ipset
)

func partOf(k model.OpKind) part {
	switch k {
	case model.AddService, model.UpdateService, model.DeleteService,
		model.AddReal, model.UpdateReal, model.DeleteReal:
		return partIPVS
	case model.BindAddr, model.UnbindAddr:
		return partAddrs
	case model.AddSetEntry, model.DeleteSetEntry:
		return partSets
	}
	return partNone
}

// Apply sends the changes in order, each run of changes for one socket
// batchWindow at a time (see batchSocket): a window is one kernel call, so
// cancellation and the call deadline apply between windows.
func (d *Dataplane) Apply(ctx context.Context, changes []model.Op) []error {
	errs := make([]error, len(changes))
	for start := 0; start < len(changes); {
		p := partOf(changes[start].Kind)
		end := start + 1
		for end < len(changes) && end-start < batchWindow && partOf(changes[end].Kind) == p {
			end++
		}
		win, werrs := changes[start:end], errs[start:end]
		if ctx.Err() != nil {
			for i := range werrs {
				werrs[i] = dataplane.NotTried(ctx)
			}
			start = end
			continue
		}
		switch p {
		case partIPVS:
			d.applyIPVS(ctx, win, werrs)
		case partAddrs:
			d.applyAddrs(ctx, win, werrs)
		case partSets:
			d.Shim.applySets(ctx, win, werrs)
		default:
			for i, c := range win {
				werrs[i] = fmt.Errorf("unknown change kind %s", c.Kind)
			}
		}
		start = end
	}
	return errs
}

// applyIPVS sends one window of IPVS changes; errors read as the single
// methods' do.
func (d *Dataplane) applyIPVS(ctx context.Context, win []model.Op, errs []error) {
	var enc ipvsEncoder
	reqs := make([]request, len(win))
	for i, c := range win {
		reqs[i] = enc.change(d.ipvsFamily, c)
	}
	err := d.do(ctx, "apply IPVS changes", func(h *handles) error {
		s, err := h.batchSocket(&h.genl, netlinkGeneric, d.timeout)
		if err != nil {
			return err
		}
		return s.exchange(reqs, errs)
	})
	wordErrors(win, errs, err, ipvsChangeError)
}

// wordErrors gives every change of a window its error as its single method
// words it: the window's own error (err: the exchange failed as a whole)
// for all, else each change's.
func wordErrors(win []model.Op, errs []error, err error, word func(model.Op, error) error) {
	for i, c := range win {
		e := errs[i]
		if err != nil {
			e = err
		}
		if e != nil {
			errs[i] = word(c, e)
		}
	}
}

// ipvsChangeError words a failed change as its single method does.
func ipvsChangeError(c model.Op, err error) error {
	k := c.VS.Key
	switch c.Kind {
	case model.AddService:
		return fmt.Errorf("add virtual server %s: %w", c.VS, serviceErrs.wrap(err))
	case model.UpdateService:
		return fmt.Errorf("update virtual server %s: %w", c.VS, serviceErrs.wrap(err))
	case model.DeleteService:
		return fmt.Errorf("delete virtual server %s: %w", k, serviceErrs.wrap(err))
	case model.AddReal:
		return fmt.Errorf("add real server %s to %s: %w", c.RS.Addr, k, destErrs.wrap(err))
	case model.UpdateReal:
		return fmt.Errorf("update real server %s of %s: %w", c.RS.Addr, k, destErrs.wrap(err))
	}
	return fmt.Errorf("delete real server %s of %s: %w", c.RS.Addr, k, destErrs.wrap(err))
}

// applyAddrs binds or unbinds one window of VIPs: the link is looked up
// once for the window, not once per address.
func (d *Dataplane) applyAddrs(ctx context.Context, win []model.Op, errs []error) {
	err := d.do(ctx, "bind addresses", func(h *handles) error {
		link, err := d.linkFor(h)
		if err != nil {
			return err
		}
		var enc addrEncoder
		reqs := make([]request, len(win))
		for i, c := range win {
			reqs[i] = enc.change(int32(link.Attrs().Index), c.Kind == model.BindAddr, c.Addr)
		}
		s, err := h.batchSocket(&h.rt, netlinkRoute, d.timeout)
		if err != nil {
			return err
		}
		return s.exchange(reqs, errs)
	})
	wordErrors(win, errs, err, func(c model.Op, e error) error { return addrChangeError(c, d.linkName, e) })
}

func addrChangeError(c model.Op, link string, err error) error {
	if c.Kind == model.BindAddr {
		return fmt.Errorf("bind %s to %s: %w", c.Addr, link, addrErrs.wrap(err))
	}
	return fmt.Errorf("unbind %s from %s: %w", c.Addr, link, addrErrs.wrap(err))
}

// addrFamily is the AF_* of an address.
func addrFamily(a netip.Addr) uint8 {
	if a.Unmap().Is4() {
		return afInet
	}
	return afInet6
}
