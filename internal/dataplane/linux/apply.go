//go:build linux

package linux

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// part is the socket an operation goes out on.
type part uint8

const (
	partNone  part = iota
	partIPVS       // generic netlink, the IPVS family
	partAddrs      // rtnetlink
	partSets       // nfnetlink, ipset
)

// partOf is the socket each kind of operation goes out on.
var partOf = [...]part{
	model.AddService:     partIPVS,
	model.UpdateService:  partIPVS,
	model.DeleteService:  partIPVS,
	model.AddReal:        partIPVS,
	model.UpdateReal:     partIPVS,
	model.DeleteReal:     partIPVS,
	model.BindAddr:       partAddrs,
	model.UnbindAddr:     partAddrs,
	model.AddSetEntry:    partSets,
	model.DeleteSetEntry: partSets,
}

// partFor is the socket op goes out on (partNone: an unknown kind).
func partFor(op model.Op) part {
	if int(op.Kind) < len(partOf) {
		return partOf[op.Kind]
	}
	return partNone
}

// Apply sends the operations in order, each run of operations for one
// socket batchWindow at a time (see socket.exchange): a window is one kernel
// call, so cancellation and the call deadline apply between windows.
func (d *Dataplane) Apply(ctx context.Context, ops []model.Op) []error {
	return inWindows(ctx, ops, func(p part, win []model.Op, errs []error) {
		switch p {
		case partIPVS:
			d.applyIPVS(ctx, win, errs)
		case partAddrs:
			d.applyAddrs(ctx, win, errs)
		case partSets:
			d.Shim.applySets(ctx, win, errs)
		default:
			unknownKinds(win, errs)
		}
	})
}

// Apply makes the operations on set members, in windows as
// Dataplane.Apply does; the shim alone has no IPVS table or link, so it
// refuses every other kind.
func (s *Shim) Apply(ctx context.Context, ops []model.Op) []error {
	return inWindows(ctx, ops, func(p part, win []model.Op, errs []error) {
		if p == partSets {
			s.applySets(ctx, win, errs)
			return
		}
		for i, op := range win {
			errs[i] = fmt.Errorf("%s: not an operation on a set member", op)
		}
	})
}

// inWindows cuts ops into windows of one part, at most batchWindow long,
// and hands each to send with its slice of the errors. Once ctx ends, the
// windows left are not sent: their operations fail as not tried.
func inWindows(ctx context.Context, ops []model.Op, send func(p part, win []model.Op, errs []error)) []error {
	errs := make([]error, len(ops))
	for start := 0; start < len(ops); {
		p := partFor(ops[start])
		end := start + 1
		for end < len(ops) && end-start < batchWindow && partFor(ops[end]) == p {
			end++
		}
		win, werrs := ops[start:end], errs[start:end]
		start = end
		if ctx.Err() != nil {
			for i := range werrs {
				werrs[i] = dataplane.NotTried(ctx)
			}
			continue
		}
		send(p, win, werrs)
	}
	return errs
}

// unknownKinds fails every operation of a window of no known kind.
func unknownKinds(win []model.Op, errs []error) {
	for i, op := range win {
		errs[i] = fmt.Errorf("unknown operation kind %s", op.Kind)
	}
}

// applyIPVS sends one window of IPVS operations; errors read as the
// single methods' do.
func (d *Dataplane) applyIPVS(ctx context.Context, win []model.Op, errs []error) {
	var enc ipvsEncoder
	reqs := make([]request, len(win))
	for i, c := range win {
		reqs[i] = enc.change(d.ipvsFamily, c)
	}
	err := d.do(ctx, "apply IPVS operations", func(ctx context.Context, h *handles) error {
		return h.genl.exchange(ctx, reqs, errs)
	})
	wordErrors(win, errs, err, ipvsChangeError)
}

// wordErrors gives every operation of a window its error as its single
// method words it: the window's own error (err: the exchange failed as a
// whole) for all, else each operation's.
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

// ipvsChangeError words a failed operation as its single method does.
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
// once for the window, not once per address. A VIP is bound the way the
// dataplane binds (an address, or a local route: Options.LocalRoutes); an
// unbind that finds no VIP bound that way unbinds the other way, in a
// second send, because the VIPs read back are those bound either way.
func (d *Dataplane) applyAddrs(ctx context.Context, win []model.Op, errs []error) {
	err := d.do(ctx, "bind addresses", func(ctx context.Context, h *handles) error {
		link, err := d.linkFor(h)
		if err != nil {
			return err
		}
		index := int32(link.Attrs().Index)
		var v vipEncoder
		reqs := make([]request, len(win))
		for i, c := range win {
			reqs[i] = v.change(index, c.Kind == model.BindAddr, d.localRoutes, c.Addr)
		}
		if err := h.rt.exchange(ctx, reqs, errs); err != nil {
			return err
		}
		return d.unbindOtherWay(ctx, h, index, win, errs)
	})
	wordErrors(win, errs, err, func(c model.Op, e error) error { return addrChangeError(c, d.linkName, e) })
}

// unbindOtherWay unbinds, as an address where the dataplane binds local
// routes and as a local route where it binds addresses, each VIP of win
// whose unbind found nothing, and puts the answer in its place in errs.
func (d *Dataplane) unbindOtherWay(ctx context.Context, h *handles, index int32, win []model.Op, errs []error) error {
	var v vipEncoder
	var reqs []request
	var at []int
	for i, c := range win {
		if c.Kind == model.UnbindAddr && errors.Is(addrErrs.wrap(errs[i]), dataplane.ErrNotExist) {
			reqs = append(reqs, v.change(index, false, !d.localRoutes, c.Addr))
			at = append(at, i)
		}
	}
	if len(reqs) == 0 {
		return nil
	}
	other := make([]error, len(reqs))
	if err := h.rt.exchange(ctx, reqs, other); err != nil {
		return err
	}
	for j, i := range at {
		errs[i] = other[j]
	}
	return nil
}

// vipEncoder encodes a VIP's bind or unbind as an address or as a local
// route.
type vipEncoder struct {
	addrs  addrEncoder
	routes routeEncoder
}

func (v *vipEncoder) change(index int32, bind, asRoute bool, a netip.Addr) request {
	if asRoute {
		return v.routes.change(index, bind, a)
	}
	return v.addrs.change(index, bind, a)
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
