//go:build linux

package linux

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/vishvananda/netlink/nl"
	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// ensureSets makes every set cfg needs as the shim defines it. A missing
// set is created. A set of the shim's name made otherwise is replaced: one
// with a smaller maxelem (made by a version that used the kernel's
// default) would refuse members the agent then counts on, a VIPs member
// among them, without which a bound VIP answers on every host port. The
// caller holds s.mu.
func (s *Shim) ensureSets(ctx context.Context, cfg shim.Config) error {
	// A replacement left by an agent stopped half way holds nothing that
	// its set does not hold too. One that the rules still match (stopped
	// in recreate) is destroyed by a later ensure, once ensureRules has
	// written them back to the set's own name.
	var errs []error
	if err := s.destroySets(ctx, shim.IsReplacement); err != nil {
		errs = append(errs, err)
	}
	for _, def := range shim.Sets(cfg.IPv4, cfg.IPv6) {
		if err := s.ensureSet(ctx, def); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ensureSet makes one set as def has it.
func (s *Shim) ensureSet(ctx context.Context, def shim.SetDef) error {
	want := headerOf(def)
	have, err := ipsetHeader(ctx, def.Name)
	switch {
	case errors.Is(err, syscall.ENOENT):
		return s.createSet(ctx, def.Name, def)
	case err != nil:
		return fmt.Errorf("read ipset %s: %w", def.Name, err)
	case have == want:
		return nil
	}
	s.log.Info("replacing ipset", zap.String("set", def.Name), zap.Stringer("have", have), zap.Stringer("want", want))
	if have.typ == want.typ && have.family == want.family {
		err = s.swapIn(ctx, def)
	} else {
		err = s.recreate(ctx, def)
	}
	if err != nil {
		return fmt.Errorf("replace ipset %s (%s) with one of %s: %w", def.Name, have, want, err)
	}
	return nil
}

// setHeader is what the shim cares of a set's header.
type setHeader struct {
	typ     string
	family  uint8
	maxElem uint32
	skbInfo bool
}

func headerOf(def shim.SetDef) setHeader {
	return setHeader{typ: string(def.Type), family: familyOf(def), maxElem: shim.MaxSetMembers, skbInfo: def.SkbInfo}
}

func (h setHeader) String() string {
	fam := fmt.Sprintf("family %d", h.family)
	switch h.family {
	case syscall.AF_INET:
		fam = "family inet"
	case syscall.AF_INET6:
		fam = "family inet6"
	}
	out := fmt.Sprintf("%s %s maxelem %d", h.typ, fam, h.maxElem)
	if h.skbInfo {
		out += " skbinfo"
	}
	return out
}

// familyOf is the address family of def's set, as ipset numbers it.
func familyOf(def shim.SetDef) uint8 {
	if def.IPv6 {
		return syscall.AF_INET6
	}
	return syscall.AF_INET
}

// createSet creates the set name with def's type and family and room for
// MaxSetMembers. Creating an existing set is refused by the kernel (the
// request is exclusive), which here just means it is there.
func (s *Shim) createSet(ctx context.Context, name string, def shim.SetDef) error {
	err := s.ipsetCommand(ctx, "create ipset", ipsetCreate(name, def))
	if err != nil && !isSetExists(err) {
		return fmt.Errorf("create ipset %s (%s): %w", name, def.Type, err)
	}
	return nil
}

func isSetExists(err error) bool {
	return errors.Is(err, nl.IPSetError(nl.IPSET_ERR_EXIST_SETNAME2)) || errors.Is(err, syscall.EEXIST)
}

// destroySet destroys one set; a missing one is not an error.
func (s *Shim) destroySet(ctx context.Context, name string) error {
	err := s.whenNotBusy(ctx, "destroy ipset", ipsetDestroy(name))
	if err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("destroy ipset %s: %w", name, err)
	}
	return nil
}

// swapIn replaces def's set by one made as def has it, holding the same
// members, with no moment at which the name holds fewer: the replacement
// is made under another name and filled, then the two swap (atomic in the
// kernel; the rules that match the set by name match the replacement from
// then on), and the old one, now under the other name, is destroyed. The
// kernel swaps only sets of the same type and family.
func (s *Shim) swapIn(ctx context.Context, def shim.SetDef) error {
	tmp := shim.ReplacementName(def.Name)
	if err := s.createSet(ctx, tmp, def); err != nil {
		return err
	}
	err := s.copyMembers(ctx, def, tmp)
	if err == nil {
		err = s.whenNotBusy(ctx, "swap ipsets", ipsetSwap(tmp, def.Name))
		if err != nil {
			err = fmt.Errorf("swap in %s: %w", tmp, err)
		}
	}
	// After the swap tmp is the old set; before it, an unfinished
	// replacement. Either way it goes.
	if derr := s.destroySet(ctx, tmp); derr != nil {
		err = errors.Join(err, derr)
	}
	return err
}

// Busy sets: the kernel will not swap or destroy a set while a listing of
// it is under way (anyone's `ipset list`), and answers EBUSY or
// IPSET_ERR_BUSY. A listing takes moments, so the request is tried again
// (a set that rules match stays busy for a destroy: see recreate).
const (
	busyTries = 20
	busyWait  = 50 * time.Millisecond
)

// whenNotBusy runs an ipset request, again while the kernel finds the set
// busy, up to busyTries times.
func (s *Shim) whenNotBusy(ctx context.Context, what string, req request) error {
	for try := 1; ; try++ {
		err := s.ipsetCommand(ctx, what, req)
		if try == busyTries || !isBusy(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(busyWait):
		}
	}
}

// isBusy tells whether the kernel found a set in use: listed, or (for a
// destroy) matched by a rule.
func isBusy(err error) bool {
	return errors.Is(err, syscall.EBUSY) || errors.Is(err, nl.IPSetError(nl.IPSET_ERR_BUSY))
}

// copyMembers adds every member of def's set to the set named to.
func (s *Shim) copyMembers(ctx context.Context, def shim.SetDef, to string) error {
	var members []model.SetEntry
	if err := s.eachMember(ctx, def, func(e model.SetEntry) { members = append(members, e) }); err != nil {
		return err
	}
	var enc setEncoder
	reqs := make([]request, 0, batchWindow)
	rerrs := make([]error, batchWindow)
	for start := 0; start < len(members); start += batchWindow {
		win := members[start:min(start+batchWindow, len(members))]
		reqs = reqs[:0]
		for _, e := range win {
			reqs = append(reqs, enc.changeIn(to, true, e))
		}
		err := s.ipsets.run(ctx, "ipset batch", func(ctx context.Context, h ipsetHandle) error { return h.s.exchange(ctx, reqs, rerrs) })
		if err != nil {
			return fmt.Errorf("copy members to %s: %w", to, err)
		}
		for j, e := range win {
			if rerrs[j] != nil {
				return fmt.Errorf("copy member %s to %s: %w", e.Member(), to, ipsetErrno(rerrs[j]))
			}
		}
		enc.a.b = enc.a.b[:0]
	}
	return nil
}

// recreate replaces def's set by one of another type or family, which the
// kernel will neither swap with it nor convert: the set is made anew,
// empty (its members are of another shape), and ErrSetEmptied says so,
// so that the caller reads the members again. A set that rules match
// cannot be destroyed (the kernel finds it referenced): see recreateUnder.
func (s *Shim) recreate(ctx context.Context, def shim.SetDef) error {
	err := s.ipsetCommand(ctx, "destroy ipset", ipsetDestroy(def.Name))
	switch {
	case isBusy(err) || errors.Is(err, nl.IPSetError(nl.IPSET_ERR_REFERENCED)):
		err = s.recreateUnder(ctx, def)
	case err == nil || errors.Is(err, syscall.ENOENT):
		err = s.createSet(ctx, def.Name, def)
	default:
		err = fmt.Errorf("destroy ipset %s: %w", def.Name, err)
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("ipset %s: %w", def.Name, dataplane.ErrSetEmptied)
}

// recreateUnder is recreate of a set the shim's rules match, with no
// moment at which a rule of the shim is missing: the rules that match it
// are pointed, one iptables-restore transaction per table, at a
// replacement of the shim's type made under another name, the old set is
// destroyed and made anew, and the rules are pointed back at it (the
// kernel renames no set that a rule matches). Rules of another type or
// family's set never matched as the shim means them: matching the empty
// replacement meanwhile loses nothing they did. A set a foreign rule
// matches cannot be destroyed: the rules go back to it and recreate fails.
func (s *Shim) recreateUnder(ctx context.Context, def shim.SetDef) error {
	tmp := shim.ReplacementName(def.Name)
	if err := s.createSet(ctx, tmp, def); err != nil {
		return err
	}
	undo := func(err error) error {
		if rerr := s.retarget(ctx, tmp, def.Name); rerr != nil {
			return errors.Join(err, rerr)
		}
		return errors.Join(err, s.destroySet(ctx, tmp))
	}
	if err := s.retarget(ctx, def.Name, tmp); err != nil {
		return undo(err)
	}
	if err := s.destroySet(ctx, def.Name); err != nil {
		return undo(fmt.Errorf("%w (a rule other than the shim's matches it)", err))
	}
	// From here on a failure leaves the rules on tmp; the next ensure makes
	// the set and writes them back (ensureRules), then destroys tmp.
	if err := s.createSet(ctx, def.Name, def); err != nil {
		return err
	}
	if err := s.retarget(ctx, tmp, def.Name); err != nil {
		return err
	}
	return s.destroySet(ctx, tmp)
}

// retarget makes the rules of the shim's chains, in both families, that
// match the set from match the set to instead (shim.Retarget).
func (s *Shim) retarget(ctx context.Context, from, to string) error {
	for _, v6 := range families(true, true) {
		if !s.has(s.iptables(ctx, "iptables-restore", v6)) {
			continue // no ip6tables here: no rule of that family exists
		}
		saved, err := s.save(ctx, v6)
		if err != nil {
			return fmt.Errorf("read iptables rules: %w", err)
		}
		if input := shim.Retarget(saved, shim.OurChains(), from, to); input != "" {
			if err := s.restore(ctx, v6, input); err != nil {
				return fmt.Errorf("point the rules matching ipset %s at %s: %w", from, to, err)
			}
		}
	}
	return nil
}
