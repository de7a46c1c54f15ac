package fake

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// This file is the test side of the fake: seeding state, reading it back and
// injecting faults. None of it is part of dataplane.Dataplane.

// Load replaces the kernel's table and addresses with a copy of s (what
// another agent, an earlier run or a foreign tool left behind). A state with
// addresses implies the link exists.
func (f *Fake) Load(s model.State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := s.Clone()
	f.services = c.Services
	for _, svc := range f.services {
		svc.Flags &^= model.FlagHashed
	}
	f.addrs = c.Addrs
	f.announce(dataplane.AddrsChanged)
	if len(f.addrs) > 0 {
		f.link = true
	}
	clear(f.conns)
	clear(f.sets)
	for e := range c.Sets {
		set := f.sets[e.Set()]
		if set == nil {
			set = newIPSet(shimSetDef(e.Set()), shim.MaxSetMembers)
			f.sets[e.Set()] = set
		}
		set.members[e] = struct{}{}
	}
}

// State returns a deep copy of the table, addresses and set members as
// they were configured (without the kernel's hashed flag).
func (f *Fake) State() model.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := model.State{Services: f.services, Addrs: f.addrs, Sets: map[model.SetEntry]struct{}{}}
	for _, set := range f.sets {
		maps.Copy(s.Sets, set.members)
	}
	return s.Clone()
}

// Dump is model.State.Dump of the current table and addresses: the one text
// form tests compare.
func (f *Fake) Dump() string { return f.State().Dump() }

// SetConns sets one real server's connection counters, as traffic would.
// Counters of a real server that is later deleted are forgotten.
func (f *Fake) SetConns(ref dataplane.RealRef, c model.Conns) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conns[ref] = c
}

// SetConntrack plants n conntrack entries of proto that IPVS NATed to
// real: their replies come from it.
func (f *Fake) SetConntrack(proto model.Protocol, real netip.AddrPort, n int) {
	f.PlantConntrack(ConntrackFlow{Proto: proto, Reply: real}, n)
}

// PlantConntrack sets how many entries of fl are live (0 removes them).
func (f *Fake) PlantConntrack(fl ConntrackFlow, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n <= 0 {
		delete(f.flows, fl)
		return
	}
	f.flows[fl] = n
}

// Conntrack lists the live conntrack entries, sorted, one line per flow
// with its count ("udp dst 10.96.0.10:53 reply 10.244.1.3:53 x3"; dst *
// for entries planted by SetConntrack): the end state tests compare.
func (f *Fake) Conntrack() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conntrackDump()
}

// ConntrackDumps tells how many times the IPv4 and the IPv6 conntrack
// tables were read whole.
func (f *Fake) ConntrackDumps() (v4, v6 int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ctDumps[0], f.ctDumps[1]
}

// Timeouts returns IPVS' current timeouts (kernel defaults until set).
func (f *Fake) Timeouts() dataplane.Timeouts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.timeouts
}

// HasLink tells whether the link exists (Init was called, DeleteLink was not).
func (f *Fake) HasLink() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.link
}

// Sysctls returns the sysctls Init set, keyed by their /proc/sys path.
func (f *Fake) Sysctls() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.sysctls)
}

// Do makes one operation, as Apply does: how a test changes the kernel
// behind the agent's back, as another tool would.
func (f *Fake) Do(ctx context.Context, op model.Op) error {
	return f.Apply(ctx, []model.Op{op})[0]
}

// FailNext makes the next call of method return err without changing
// anything. Queued errors are used in order, one per call.
func (f *Fake) FailNext(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext[method] = append(f.failNext[method], err)
}

// FailWhen installs a predicate consulted on every call (after FailNext):
// a non-nil result fails the call without changing anything. Use Call.N to
// fail the Nth call of a method. nil removes the predicate.
func (f *Fake) FailWhen(fn func(Call) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failWhen = fn
}

// ObserveErr makes every Observe fail with err until called with nil,
// modelling an interrupted dump.
func (f *Fake) ObserveErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.observeErr = err
}

// Calls counts calls per method name, failed ones included.
func (f *Fake) Calls() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.calls)
}

// Log lists every call in order, failed ones included.
func (f *Fake) Log() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}

// ResetCalls clears the call counters and log (N restarts at 1), so a test
// can count what one sync did.
func (f *Fake) ResetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.calls)
	f.log = nil
}

// ShimConfig returns the config the rules were last written for, nil when
// there are no rules.
func (f *Fake) ShimConfig() *shim.Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.shimCfg == nil {
		return nil
	}
	c := *f.shimCfg
	return &c
}

// RuleWrites counts how many times the rules were (re)written.
func (f *Fake) RuleWrites() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ruleWrites
}

// SetNames lists the sets that exist, sorted.
func (f *Fake) SetNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.sets))
}

// MakeSet makes a set as an older version of the agent or another tool
// left it: def's name with def's type and family and room for maxElem
// members (ErrExist when a set of that name is there).
func (f *Fake) MakeSet(_ context.Context, def shim.SetDef, maxElem int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sets[def.Name]; ok {
		return fmt.Errorf("create ipset %s: %w", def.Name, dataplane.ErrExist)
	}
	f.sets[def.Name] = newIPSet(def, maxElem)
	return nil
}

// WriteRules "writes" cfg's rules as an older version left them, over the
// sets there are, making or replacing none.
func (f *Fake) WriteRules(_ context.Context, cfg shim.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := cfg
	c.PodCIDRs = slices.Clone(cfg.PodCIDRs)
	f.shimCfg = &c
	f.announce(dataplane.RulesChanged)
	return nil
}

// SetKubeProxyLeftovers plants (true) kube-proxy's chains and sets.
func (f *Fake) SetKubeProxyLeftovers(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kubeProxyLeft = on
}

// KubeProxyLeftovers tells whether kube-proxy's leftovers are still there.
func (f *Fake) KubeProxyLeftovers() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.kubeProxyLeft
}

// SetConntrackDest plants n conntrack entries of proto first sent to dst
// while nothing NATed them: their replies come from dst itself, as those
// made while a frontend had no endpoint.
func (f *Fake) SetConntrackDest(proto model.Protocol, dst netip.AddrPort, n int) {
	f.PlantConntrack(ConntrackFlow{Proto: proto, Dst: dst, Reply: dst}, n)
}

// FlushRules removes the shim's rules as `iptables -F` by someone else
// would, leaving its sets; EnsureShim writes them again.
func (f *Fake) FlushRules() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shimCfg = nil
	f.announce(dataplane.RulesChanged)
}

// SetIPv6Disabled switches IPv6 off (or on again) on the link, as writing
// net.ipv6.conf.<link>.disable_ipv6 does: switched off, the link loses its
// IPv6 addresses and refuses new ones with EACCES; the IPVS table keeps
// its IPv6 virtual servers.
func (f *Fake) SetIPv6Disabled(off bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noIPv6 = off
	if off {
		for a := range f.addrs {
			if a.Is6() {
				delete(f.addrs, a)
				f.announce(dataplane.AddrsChanged)
			}
		}
	}
	return nil
}
