package fake

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// ipset is one set: its header as the kernel keeps it (type, family,
// maxelem) and its members.
type ipset struct {
	typ     shim.IPSetType
	v6      bool
	skbInfo bool
	maxElem int
	members map[model.SetEntry]struct{}
}

func newIPSet(def shim.SetDef, maxElem int) *ipset {
	return &ipset{typ: def.Type, v6: def.IPv6, skbInfo: def.SkbInfo, maxElem: maxElem, members: map[model.SetEntry]struct{}{}}
}

// holding is the member the set holds under e's key, whatever its mark,
// as the kernel finds members (the mark is data of the member).
func (s *ipset) holding(e model.SetEntry) (model.SetEntry, bool) {
	if _, ok := s.members[e]; ok || !s.skbInfo {
		return e, ok
	}
	for m := range s.members {
		if m.Key() == e.Key() {
			return m, true
		}
	}
	return model.SetEntry{}, false
}

// shimSetDef is the definition of one of the shim's sets by its name (a
// name of no kind gets an empty type).
func shimSetDef(name string) shim.SetDef {
	kind, v6, _ := shim.ParseSetName(name)
	return shim.SetDef{Kind: kind, Name: name, Type: kind.Type(), IPv6: v6}
}

// EnsureShim creates the missing sets of cfg's families (members of sets
// that exist are kept, as the kernel keeps them), replaces a set whose
// type, family or maxelem is not the shim's as the linux dataplane does
// (members kept when the type and family are the same, else ErrSetEmptied),
// and "writes the rules" only when cfg differs from what they were written
// for, whatever became of the sets.
func (f *Fake) EnsureShim(ctx context.Context, cfg shim.Config) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "EnsureShim", cfg); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	var errs []error
	for _, def := range shim.Sets(cfg.IPv4, cfg.IPv6) {
		if err := f.ensureSet(def); err != nil {
			errs = append(errs, err)
		}
	}
	if f.shimCfg == nil || !f.shimCfg.Equal(cfg) {
		c := cfg
		c.PodCIDRs = slices.Clone(cfg.PodCIDRs)
		f.shimCfg = &c
		f.ruleWrites++
		f.announce(dataplane.RulesChanged)
	}
	return errors.Join(errs...)
}

// ensureSet makes def's set as the shim wants it. The caller holds f.mu.
func (f *Fake) ensureSet(def shim.SetDef) error {
	old, ok := f.sets[def.Name]
	switch {
	case !ok:
		f.sets[def.Name] = newIPSet(def, shim.MaxSetMembers)
		return nil
	case old.typ == def.Type && old.v6 == def.IPv6 && old.skbInfo == def.SkbInfo && old.maxElem == shim.MaxSetMembers:
		return nil
	}
	set := newIPSet(def, shim.MaxSetMembers)
	if old.typ == def.Type && old.v6 == def.IPv6 {
		if len(old.members) > set.maxElem {
			return fmt.Errorf("replace ipset %s: %d members do not fit in %d: %w", def.Name, len(old.members), set.maxElem, dataplane.ErrFull)
		}
		set.members = old.members
		f.sets[def.Name] = set
		return nil
	}
	f.sets[def.Name] = set
	return fmt.Errorf("replace ipset %s: %w", def.Name, dataplane.ErrSetEmptied)
}

// ShimInPlace tells whether the rules were written for cfg (and not
// flushed since) and cfg's sets exist, as EnsureShim(cfg) would find them.
func (f *Fake) ShimInPlace(ctx context.Context, cfg shim.Config) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "ShimInPlace", cfg); err != nil {
		return false, err
	}
	if err := cfg.Validate(); err != nil {
		return false, err
	}
	if f.shimCfg == nil || !f.shimCfg.Equal(cfg) {
		return false, nil
	}
	for _, def := range shim.Sets(cfg.IPv4, cfg.IPv6) {
		set, ok := f.sets[def.Name]
		if !ok || set.typ != def.Type || set.v6 != def.IPv6 || set.skbInfo != def.SkbInfo || set.maxElem != shim.MaxSetMembers {
			return false, nil
		}
	}
	return true, nil
}

// addSetEntry adds a member: ErrNotExist without its set, ErrExist when
// it is there, ErrFull when the set holds its maxelem members.
func (f *Fake) addSetEntry(ctx context.Context, e model.SetEntry) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "AddSetEntry", e); err != nil {
		return err
	}
	set, err := f.set(e)
	if err != nil {
		return fmt.Errorf("ipset add %s: %w", e, err)
	}
	if _, ok := set.holding(e); ok {
		return fmt.Errorf("ipset add %s: %w", e, dataplane.ErrExist)
	}
	if len(set.members) >= set.maxElem {
		return fmt.Errorf("ipset add %s: set %s: %w", e, e.Set(), dataplane.ErrFull)
	}
	set.members[e] = struct{}{}
	return nil
}

// deleteSetEntry removes a member: ErrNotExist without it or its set.
func (f *Fake) deleteSetEntry(ctx context.Context, e model.SetEntry) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "DeleteSetEntry", e); err != nil {
		return err
	}
	set, err := f.set(e)
	if err != nil {
		return fmt.Errorf("ipset del %s: %w", e, err)
	}
	held, ok := set.holding(e)
	if !ok {
		return fmt.Errorf("ipset del %s: %w", e, dataplane.ErrNotExist)
	}
	delete(set.members, held)
	return nil
}

// set finds e's set and checks that e fits it (its type and family, as
// the set was made), as the kernel would.
func (f *Fake) set(e model.SetEntry) (*ipset, error) {
	if err := dataplane.CheckSetEntry(e); err != nil {
		return nil, err
	}
	set, ok := f.sets[e.Set()]
	if !ok {
		return nil, fmt.Errorf("set %s: %w", e.Set(), dataplane.ErrNotExist)
	}
	wantV6 := set.v6
	fits := e.Addr().IsValid() && e.Addr().Is6() == wantV6 && e.Proto() != 0
	switch set.typ {
	case shim.HashIP:
		fits = e.Addr().IsValid() && e.Addr().Is6() == wantV6 && e.Proto() == 0 && e.Port() == 0 && !e.Addr2().IsValid() && !e.Net().IsValid()
	case shim.HashIPPortIP:
		fits = fits && e.Addr2().IsValid() && e.Addr2().Is6() == wantV6 && !e.Net().IsValid()
	case shim.HashIPPortNet:
		fits = fits && e.Net().IsValid() && e.Net().Addr().Is6() == wantV6 && !e.Addr2().IsValid()
	default:
		fits = fits && !e.Addr2().IsValid() && !e.Net().IsValid()
	}
	if e.SkbMark() != 0 && !set.skbInfo {
		fits = false // only a set made with skbinfo keeps a mark
	}
	if !fits {
		return nil, fmt.Errorf("member %s does not fit set %s (%s)", e.Member(), e.Set(), set.typ)
	}
	return set, nil
}

// SetEntries lists the members of every set there is.
func (f *Fake) SetEntries(ctx context.Context) (map[model.SetEntry]struct{}, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "SetEntries", nil); err != nil {
		return nil, err
	}
	return f.members(), nil
}

// members copies the members of every set. The caller holds f.mu.
func (f *Fake) members() map[model.SetEntry]struct{} {
	out := map[model.SetEntry]struct{}{}
	for _, set := range f.sets {
		maps.Copy(out, set.members)
	}
	return out
}

// DeleteShim removes the rules and every set.
func (f *Fake) DeleteShim(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "DeleteShim", nil); err != nil {
		return err
	}
	clear(f.sets)
	f.shimCfg = nil
	f.announce(dataplane.RulesChanged)
	return nil
}

// DeleteKubeProxyShim removes kube-proxy's leftovers (SetKubeProxyLeftovers).
func (f *Fake) DeleteKubeProxyShim(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "DeleteKubeProxyShim", nil); err != nil {
		return err
	}
	f.kubeProxyLeft = false
	return nil
}
