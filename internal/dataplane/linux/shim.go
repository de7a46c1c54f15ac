//go:build linux

package linux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// Shim is the dataplane.Netfilter of the real kernel: the shim's ipsets
// through netlink (one message per member, no exec) and its iptables rules
// through iptables-save / iptables-restore of the node's backend. Dataplane
// embeds it; it needs no IPVS, so it also runs (and passes the netfilter
// contract) alone in a network namespace of a kernel without IPVS. Its
// methods are serialized by its own lock: netfilter calls never wait behind
// an IPVS call.
//
// Nothing it does can hang the agent: every tool it runs is killed at the
// call's deadline (CallTimeout when the caller gives none) and waits at most
// LockWait for the xtables lock, and every ipset request goes through the
// same serialized, bounded path on sockets of its own as the IPVS requests
// (see calls).
type Shim struct {
	log *zap.Logger
	// run executes a tool with stdin and returns its stdout (a seam).
	run      func(ctx context.Context, stdin, name string, args ...string) (string, error)
	lookPath func(string) (string, error)
	timeout  time.Duration
	lockWait time.Duration
	// ipsets are the netfilter netlink sockets of the ipset requests.
	ipsets *calls[ipsetHandle]

	mu       sync.Mutex
	backend  shim.Backend
	detected bool
	// ruleWrites counts the families whose rules were (re)written;
	// ruleReads the rulesets read by ShimInPlace.
	ruleWrites, ruleReads int
	// inPlace: ShimInPlace last found the rules in place for this
	// configuration at this nftables generation (nil: not known).
	inPlace *rulesSeen
	// lastMembers is how many members the last SetEntries found.
	lastMembers int
}

// rulesSeen is a configuration whose rules were found in place, and the
// nftables generation they were read at.
type rulesSeen struct {
	cfg shim.Config
	gen uint32
}

var _ dataplane.Netfilter = (*Shim)(nil)

// ShimOptions configure NewShim. The zero value detects the backend.
type ShimOptions struct {
	Logger *zap.Logger
	// Backend forces nft or legacy; "" detects it on first use.
	Backend shim.Backend
	// CallTimeout bounds a tool run or an ipset request whose context has
	// no deadline; default one minute.
	CallTimeout time.Duration
	// LockWait is how long iptables-restore waits for the xtables lock
	// (--wait, whole seconds) before it fails; default 5 s, kube-proxy's.
	LockWait time.Duration
}

// xtablesLock is where iptables-legacy serializes its writers (kubelet,
// CNI plugins, kube-proxy, us); the DaemonSet mounts it from the host.
const xtablesLock = "/run/xtables.lock"

// NewShim returns a shim on the real kernel.
func NewShim(o ShimOptions) *Shim {
	s := &Shim{log: o.Logger, run: runTool, lookPath: exec.LookPath, backend: o.Backend, detected: o.Backend != "",
		timeout: o.CallTimeout, lockWait: o.LockWait}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.log = s.log.Named("shim")
	if s.timeout <= 0 {
		s.timeout = time.Minute
	}
	if s.lockWait <= 0 {
		s.lockWait = 5 * time.Second
	}
	s.ipsets = newCalls(s.log, s.timeout, func() (ipsetHandle, error) { return openIPSetHandle(s.timeout) })
	return s
}

// ipsetHandle is a netfilter netlink socket for ipset requests, and one
// for batches of member changes (applySets).
type ipsetHandle struct {
	*netlink.Handle
	batch *batchSocket
}

func (h ipsetHandle) close() {
	h.Close()
	h.batch.close()
}

// openIPSetHandle opens one, with a socket timeout so that even a request
// the kernel never answers ends on its own once abandoned.
func openIPSetHandle(timeout time.Duration) (ipsetHandle, error) {
	h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		return ipsetHandle{}, fmt.Errorf("open netfilter netlink socket: %w", err)
	}
	if err := h.SetSocketTimeout(timeout); err != nil {
		h.Close()
		return ipsetHandle{}, fmt.Errorf("set netfilter netlink socket timeout: %w", err)
	}
	b, err := openBatchSocket(netlinkNetfilter, timeout)
	if err != nil {
		h.Close()
		return ipsetHandle{}, err
	}
	return ipsetHandle{Handle: h, batch: b}, nil
}

// close releases the ipset sockets.
func (s *Shim) close() { s.ipsets.close() }

// exec runs a tool, killed at ctx's deadline or after CallTimeout,
// whichever comes first.
func (s *Shim) exec(ctx context.Context, stdin, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	out, err := s.run(ctx, stdin, name, args...)
	if err != nil && ctx.Err() != nil {
		return "", fmt.Errorf("%s did not finish in time: %w: %w", name, ctx.Err(), err)
	}
	return out, err
}

// runTool runs name with stdin; a failure carries the tool's stderr. At
// ctx's end the tool is killed, and Run waits no more than a second for
// whatever it left holding its output.
func runTool(ctx context.Context, stdin, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = time.Second
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

// Backend returns the iptables backend in use, detecting it once: the one
// holding more rules (see shim.ChooseBackend), or the node's plain
// iptables when neither flavoured binary exists.
func (s *Shim) Backend(ctx context.Context) shim.Backend {
	if s.detected {
		return s.backend
	}
	count := func(b shim.Backend) (int, bool) {
		name := b.Command("iptables-save")
		if _, err := s.lookPath(name); err != nil {
			return 0, false
		}
		out, err := s.exec(ctx, "", name)
		if err != nil {
			s.log.Warn("iptables backend probe failed", zap.String("tool", name), zap.Error(err))
			return 0, false
		}
		return shim.CountRules(out), true
	}
	nftN, nftOK := count(shim.BackendNFT)
	legN, legOK := count(shim.BackendLegacy)
	if nftOK || legOK {
		s.backend = shim.ChooseBackend(nftN, legN, nftOK, legOK)
	}
	s.detected = true
	s.log.Info("iptables backend", zap.String("backend", string(s.backend)),
		zap.Int("nft_rules", nftN), zap.Int("legacy_rules", legN))
	return s.backend
}

// iptables names the family's tool of the backend.
func (s *Shim) iptables(ctx context.Context, tool string, v6 bool) string {
	if v6 {
		tool = strings.Replace(tool, "iptables", "ip6tables", 1)
	}
	return s.Backend(ctx).Command(tool)
}

// save reads the family's whole ruleset.
func (s *Shim) save(ctx context.Context, v6 bool) (shim.Saved, error) {
	out, err := s.exec(ctx, "", s.iptables(ctx, "iptables-save", v6))
	if err != nil {
		return nil, err
	}
	return shim.ParseSave(out), nil
}

// restore applies iptables-restore input without flushing other chains.
// --wait queues behind another writer holding the xtables lock (legacy
// iptables; nft ignores it), for LockWait and no longer: a lock held for
// good fails the call, naming the lock, instead of stalling the sync. The
// "=" form is the one both flavours parse as the option's argument.
func (s *Shim) restore(ctx context.Context, v6 bool, input string) error {
	wait := fmt.Sprintf("--wait=%d", int(math.Ceil(s.lockWait.Seconds())))
	_, err := s.exec(ctx, input, s.iptables(ctx, "iptables-restore", v6), "--noflush", wait)
	if err != nil && strings.Contains(err.Error(), "xtables lock") {
		return fmt.Errorf("the xtables lock (%s) stayed held by another program (kubelet, a CNI plugin, iptables) for more than %s: %w",
			xtablesLock, s.lockWait, err)
	}
	return err
}

// has tells whether a tool is installed.
func (s *Shim) has(tool string) bool {
	_, err := s.lookPath(tool)
	return err == nil
}

// families lists the families cfg enables, false for IPv4.
func families(ipv4, ipv6 bool) []bool {
	var out []bool
	if ipv4 {
		out = append(out, false)
	}
	if ipv6 {
		out = append(out, true)
	}
	return out
}

// EnsureShim creates missing sets and rewrites the rules of each family
// whose chains or jumps differ from cfg's.
func (s *Shim) EnsureShim(ctx context.Context, cfg shim.Config) error {
	if err := s.ensure(ctx, cfg); err != nil {
		return fmt.Errorf("ensure netfilter shim: %w", err)
	}
	return nil
}

// RuleWrites counts how many times a family's rules were (re)written, so
// that tests can tell an unchanged EnsureShim wrote nothing.
func (s *Shim) RuleWrites() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ruleWrites
}

func (s *Shim) ensure(ctx context.Context, cfg shim.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The rules are written even when a set could not be made or replaced:
	// the sets there are keep being matched, and a replacement that had to
	// remove the rules (recreate) must not leave the node without them. A
	// rule naming a missing set fails its family's restore as a whole.
	setsErr := s.ensureSets(ctx, cfg)
	return errors.Join(setsErr, s.ensureRules(ctx, cfg))
}

// ensureRules rewrites the rules of each family whose chains or jumps
// differ from cfg's. The caller holds s.mu.
func (s *Shim) ensureRules(ctx context.Context, cfg shim.Config) error {
	for _, v6 := range families(cfg.IPv4, cfg.IPv6) {
		if tool := s.iptables(ctx, "iptables-restore", v6); v6 && !s.has(tool) {
			// A node without ip6tables has no IPv6 netfilter to shim;
			// IPv4 must not fail for it.
			s.log.Warn("no ip6tables: IPv6 services get no masquerading or filtering", zap.String("tool", tool))
			continue
		}
		saved, err := s.save(ctx, v6)
		if err != nil {
			return fmt.Errorf("read iptables rules: %w", err)
		}
		rules := shim.Rules(cfg, v6)
		ok, missing := rules.Plan(saved)
		if ok {
			continue
		}
		if err := s.restore(ctx, v6, rules.Restore(missing)); err != nil {
			return fmt.Errorf("write iptables rules: %w", &dataplane.RestoreError{IPv6: v6, Err: err})
		}
		s.ruleWrites++
		s.log.Info("iptables rules written", zap.Bool("ipv6", v6), zap.Int("jumps_added", len(missing)))
	}
	return nil
}

// ShimInPlace reads the headers of cfg's sets and each family's rules, as
// ensure does, and tells whether they are all as cfg has them. It writes nothing. A family whose
// tool is missing is skipped, as ensure skips it.
func (s *Shim) ShimInPlace(ctx context.Context, cfg shim.Config) (bool, error) {
	if err := cfg.Validate(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok, err := s.setsInPlace(ctx, cfg); !ok || err != nil {
		return false, err
	}
	// The generation is read before the rules: a change between the two
	// bumps it past the one remembered, and the next check reads again.
	gen, genErr := s.generation(ctx)
	if genErr == nil && s.inPlace != nil && s.inPlace.gen == gen && s.inPlace.cfg.Equal(cfg) {
		return true, nil
	}
	s.inPlace = nil
	for _, v6 := range families(cfg.IPv4, cfg.IPv6) {
		if tool := s.iptables(ctx, "iptables-restore", v6); v6 && !s.has(tool) {
			continue
		}
		saved, err := s.save(ctx, v6)
		s.ruleReads++
		if err != nil {
			return false, fmt.Errorf("read iptables rules: %w", err)
		}
		if ok, _ := shim.Rules(cfg, v6).Plan(saved); !ok {
			return false, nil
		}
	}
	if genErr == nil {
		s.inPlace = &rulesSeen{cfg: cfg, gen: gen}
	}
	return true, nil
}

// setsInPlace tells whether every set of cfg's families is there with the
// type, family and maxelem ensure gives it. A header is one netlink
// request each, no listing: it is read on every check, as no nftables
// generation tells of sets.
func (s *Shim) setsInPlace(ctx context.Context, cfg shim.Config) (bool, error) {
	for _, def := range shim.Sets(cfg.IPv4, cfg.IPv6) {
		have, err := ipsetHeader(ctx, def.Name)
		switch {
		case errors.Is(err, syscall.ENOENT):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("read ipset %s: %w", def.Name, err)
		case have != headerOf(def):
			return false, nil
		}
	}
	return true, nil
}

// generation is the nftables ruleset generation when the rules are
// iptables-nft's; legacy iptables tells nothing of the kind (an error).
func (s *Shim) generation(ctx context.Context) (uint32, error) {
	if s.Backend(ctx) != shim.BackendNFT {
		return 0, errors.New("legacy iptables has no ruleset generation")
	}
	return nftGeneration(ctx)
}

// SetEntries lists the members of every shim set there is (either family).
func (s *Shim) SetEntries(ctx context.Context) (map[model.SetEntry]struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Sized as the last read found it: a map grown from empty to 120,000
	// members (10,000 Services) leaves as much garbage again as it holds.
	out := make(map[model.SetEntry]struct{}, s.lastMembers)
	if err := s.eachSetEntry(ctx, func(e model.SetEntry) { out[e] = struct{}{} }); err != nil {
		return nil, err
	}
	s.lastMembers = len(out)
	return out, nil
}

// EachSetEntry calls each with every member of every set there is, as it
// is decoded, keeping none (Dataplane.Scan).
func (s *Shim) EachSetEntry(ctx context.Context, each func(model.SetEntry)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eachSetEntry(ctx, each)
}

// eachSetEntry is EachSetEntry with the shim's lock held.
func (s *Shim) eachSetEntry(ctx context.Context, each func(model.SetEntry)) error {
	for _, def := range shim.Sets(true, true) {
		err := s.eachMember(ctx, def, each)
		if errors.Is(err, dataplane.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// eachMember calls each with every member of one set (ErrNotExist when it
// is missing). Only the shim's lock orders it with the other set calls: it
// reads on a socket of its own (ipsetlist.go).
func (s *Shim) eachMember(ctx context.Context, def shim.SetDef, each func(model.SetEntry)) error {
	err := ipsetMembers(ctx, def, each)
	if errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("list ipset %s: %w: %w", def.Name, dataplane.ErrNotExist, err)
	}
	if err != nil {
		return fmt.Errorf("list ipset %s: %w", def.Name, err)
	}
	return nil
}

// toIPSetEntry is the netlink form of a member. A hash:ip member (no
// protocol) carries its address only.
func toIPSetEntry(e model.SetEntry) *netlink.IPSetEntry {
	if e.Proto() == 0 {
		return &netlink.IPSetEntry{IP: net.IP(e.Addr().AsSlice())}
	}
	port, proto := e.Port(), uint8(e.Proto())
	ne := &netlink.IPSetEntry{IP: net.IP(e.Addr().AsSlice()), Port: &port, Protocol: &proto}
	if e.Addr2().IsValid() {
		ne.IP2 = net.IP(e.Addr2().AsSlice())
	}
	if e.Net().IsValid() {
		ne.IP2 = net.IP(e.Net().Addr().AsSlice())
		ne.CIDR2 = uint8(e.Net().Bits())
	}
	return ne
}

// AddSetEntry adds a member: ErrExist when it is there, ErrNotExist when
// the set is missing. A network member is read back: the kernel must hold
// the very prefix asked for (see checkHeld).
func (s *Shim) AddSetEntry(ctx context.Context, e model.SetEntry) error {
	if err := dataplane.CheckSetEntry(e); err != nil {
		return fmt.Errorf("ipset add: %w", err)
	}
	if e.SkbMark() != 0 {
		return s.marked(ctx, model.AddSetEntry, e)
	}
	if err := s.change(ctx, "add", e, ipsetHandle.add, dataplane.ErrExist); err != nil {
		return err
	}
	if !e.Net().IsValid() {
		return nil
	}
	return s.checkHeld(ctx, e)
}

// DeleteSetEntry removes a member: ErrNotExist when it or its set is
// missing.
func (s *Shim) DeleteSetEntry(ctx context.Context, e model.SetEntry) error {
	if err := dataplane.CheckSetEntry(e); err != nil {
		return fmt.Errorf("ipset delete: %w", err)
	}
	if e.SkbMark() != 0 {
		return s.marked(ctx, model.DeleteSetEntry, e)
	}
	return s.change(ctx, "delete", e, ipsetHandle.del, dataplane.ErrNotExist)
}

// marked sends the change of a member carrying a mark through the batch
// encoder, which knows ipset's skbmark attribute (the netlink library does
// not).
func (s *Shim) marked(ctx context.Context, kind model.OpKind, e model.SetEntry) error {
	errs := make([]error, 1)
	s.applySets(ctx, []model.Op{{Kind: kind, Entry: e}}, errs)
	return errs[0]
}

func (h ipsetHandle) add(set string, e *netlink.IPSetEntry) error { return h.IpsetAdd(set, e) }
func (h ipsetHandle) del(set string, e *netlink.IPSetEntry) error { return h.IpsetDel(set, e) }

// change sends one add or delete. The kernel answers IPSET_ERR_EXIST both
// for adding a member that is there and deleting one that is not; onExist
// says which it means here.
func (s *Shim) change(ctx context.Context, what string, e model.SetEntry, fn func(ipsetHandle, string, *netlink.IPSetEntry) error, onExist error) error {
	if !shim.IsOurs(e.Set()) {
		return fmt.Errorf("%s %s: not one of the shim's sets", what, e)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.ipsets.run(ctx, "ipset "+what, func(h ipsetHandle) error { return fn(h, e.Set(), toIPSetEntry(e)) })
	switch {
	case err == nil:
		return nil
	case errors.Is(err, nl.IPSetError(nl.IPSET_ERR_EXIST)):
		err = fmt.Errorf("%w: %w", onExist, err)
	case errors.Is(err, syscall.ENOENT):
		err = fmt.Errorf("set %s: %w: %w", e.Set(), dataplane.ErrNotExist, err)
	case isSetFull(err):
		err = fmt.Errorf("set %s: %w: %w", e.Set(), dataplane.ErrFull, err)
	}
	return fmt.Errorf("ipset %s %s: %w", what, e, err)
}

// checkHeld lists e's set back and fails unless the kernel holds e exactly:
// a network whose prefix the request lost or the kernel changed would
// filter other clients than the Service asked for. What the add made is
// taken out again, so no wrong member stays behind.
func (s *Shim) checkHeld(ctx context.Context, e model.SetEntry) error {
	held, err := s.heldAs(ctx, e)
	if err != nil {
		return fmt.Errorf("ipset add %s: read it back: %w", e, err)
	}
	if held {
		return nil
	}
	err = fmt.Errorf("ipset add %s: the kernel does not hold it as asked", e)
	if derr := s.change(ctx, "delete", e, ipsetHandle.del, dataplane.ErrNotExist); derr != nil {
		err = fmt.Errorf("%w; taking the add back: %w", err, derr)
	}
	return err
}

// heldAs tells whether e's set holds e exactly.
func (s *Shim) heldAs(ctx context.Context, e model.SetEntry) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, def := range shim.Sets(true, true) {
		if def.Name != e.Set() {
			continue
		}
		want := e
		if n := e.Net(); n.IsValid() {
			want = e.WithNet(n.Masked()) // the kernel keeps a network's address masked
		}
		found := false
		if err := s.eachMember(ctx, def, func(m model.SetEntry) { found = found || m == want }); err != nil {
			return false, err
		}
		return found, nil
	}
	return false, fmt.Errorf("%s is not one of the shim's sets", e.Set())
}

// DeleteShim deletes the shim's jumps and chains in both families, then
// its sets (a set still matched by a rule cannot be destroyed), a
// replacement left half made included.
func (s *Shim) DeleteShim(ctx context.Context) error {
	ours := func(name string) bool { return shim.IsOurs(name) || shim.IsReplacement(name) }
	if err := s.removeAll(ctx, shim.OurChains(), ours); err != nil {
		return fmt.Errorf("remove netfilter shim: %w", err)
	}
	return nil
}

// DeleteKubeProxyShim deletes kube-proxy IPVS mode's jumps, chains and sets.
func (s *Shim) DeleteKubeProxyShim(ctx context.Context) error {
	if err := s.removeAll(ctx, shim.KubeProxyChains(), shim.IsKubeProxySet); err != nil {
		return fmt.Errorf("remove kube-proxy's netfilter leftovers: %w", err)
	}
	return nil
}

func (s *Shim) removeAll(ctx context.Context, chains map[string][]string, setMatch func(string) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.removeChains(ctx, chains); err != nil {
		return err
	}
	return s.destroySets(ctx, setMatch)
}

// removeChains deletes the given chains and the jumps to them, in both
// families. The caller holds s.mu.
func (s *Shim) removeChains(ctx context.Context, chains map[string][]string) error {
	var errs []error
	for _, v6 := range families(true, true) {
		if !s.has(s.iptables(ctx, "iptables-restore", v6)) {
			continue // no ip6tables here: nothing of that family can exist
		}
		saved, err := s.save(ctx, v6)
		if err != nil {
			errs = append(errs, fmt.Errorf("read iptables rules: %w", err))
			continue
		}
		if input := shim.Removal(saved, chains); input != "" {
			if err := s.restore(ctx, v6, input); err != nil {
				errs = append(errs, fmt.Errorf("remove iptables chains: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// destroySets destroys every set whose name matches.
func (s *Shim) destroySets(ctx context.Context, match func(string) bool) error {
	names, err := ipsetNames(ctx)
	if err != nil {
		return fmt.Errorf("list ipsets: %w", err)
	}
	var errs []error
	for _, name := range names {
		if !match(name) {
			continue
		}
		err := s.ipsets.run(ctx, "destroy ipset", func(h ipsetHandle) error { return h.IpsetDestroy(name) })
		if err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("destroy ipset %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
