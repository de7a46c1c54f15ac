//go:build linux

package linux_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/dataplanetest"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/linux"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// envIsolated marks a test process already running in a network namespace
// of its own (re-executed by isolated, or inside the VM).
const envIsolated = "KUBE_IPVS_NETNS"

// isolated makes the calling top-level test run in a fresh network
// namespace: outside one it re-runs just that test under `unshare -n` and
// returns false (the caller returns; the child's verdict is the test's);
// inside one (or in the VM, which is throwaway) it returns true. The shim
// changes netfilter state, which must never be the host's own.
func isolated(t *testing.T) bool {
	t.Helper()
	if os.Getenv(envIsolated) == "1" || os.Getenv("KUBE_IPVS_VM") == "1" {
		return true
	}
	if os.Geteuid() != 0 {
		skipOrFail(t, "the netfilter shim test needs root (it runs in a fresh network namespace)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		skipOrFail(t, "unshare (util-linux) is needed to make a network namespace")
	}
	cmd := exec.Command("unshare", "-n", os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envIsolated+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in a fresh network namespace:\n%s", out)
	if err != nil {
		t.Fatalf("test failed in its network namespace: %v", err)
	}
	if strings.Contains(string(out), "--- SKIP: "+t.Name()) {
		t.Skip("skipped in its network namespace")
	}
	return false
}

// needBackend skips when the backend's tools are missing (the VM has only
// iptables-nft).
func needBackend(t *testing.T, b shim.Backend) {
	t.Helper()
	for _, tool := range []string{"iptables-save", "iptables-restore", "ip6tables-save", "ip6tables-restore"} {
		if _, err := exec.LookPath(b.Command(tool)); err != nil {
			t.Skipf("%s not installed", b.Command(tool))
		}
	}
	if _, err := exec.LookPath("ipset"); err != nil {
		skipOrFail(t, "ipset not installed")
	}
}

func newShim(t *testing.T, b shim.Backend) *linux.Shim {
	return newShimWith(t, linux.ShimOptions{Backend: b})
}

// newShimWith is newShim with options.
func newShimWith(t *testing.T, o linux.ShimOptions) *linux.Shim {
	s := linux.NewShim(o)
	clean := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.DeleteShim(ctx); err != nil {
			t.Errorf("remove the shim: %v", err)
		}
	}
	clean()
	t.Cleanup(clean)
	return s
}

// ctx30 bounds a test so that a hung iptables call fails it instead of
// hanging the suite. The bound is generous: under software emulation on a
// loaded machine (the VM), thirty rewrites with a reader racing them have
// taken longer than 30 s.
func ctx30(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestShimNFT(t *testing.T)    { testShimBackend(t, shim.BackendNFT) }
func TestShimLegacy(t *testing.T) { testShimBackend(t, shim.BackendLegacy) }

func testShimBackend(t *testing.T, b shim.Backend) {
	if !isolated(t) {
		return
	}
	needBackend(t, b)
	t.Run("Contract", func(t *testing.T) {
		dataplanetest.RunNetfilter(t, func(t *testing.T) dataplane.Netfilter { return netfilterMakingSets{newShim(t, b)} })
	})
	t.Run("RulesWrittenOnlyOnChange", func(t *testing.T) { testRulesOnlyOnChange(t, b) })
	t.Run("AtomicReplacement", func(t *testing.T) { testAtomicReplacement(t, b) })
	t.Run("RemoveLeavesForeignRules", func(t *testing.T) { testRemoveForeign(t, b) })
	t.Run("RemoveKubeProxyLeftovers", func(t *testing.T) { testRemoveKubeProxy(t, b) })
	t.Run("ThousandMembers", func(t *testing.T) { testThousandMembers(t, b) })
	t.Run("SmallSetSwappedUnderItsRules", func(t *testing.T) { testSmallSetSwapped(t, b) })
	t.Run("OtherTypeUnderRules", func(t *testing.T) { testOtherTypeUnderRules(t, b) })
	if b == shim.BackendNFT {
		t.Run("InPlaceByGeneration", testInPlaceByGeneration)
	}
}

// testInPlaceByGeneration: once the rules were found in place, ShimInPlace
// reads them again only after the nftables generation moved: a change of
// anyone's (an unrelated chain too), and the one that removes rules of
// ours is found.
func testInPlaceByGeneration(t *testing.T) {
	s, ctx := newShim(t, shim.BackendNFT), ctx30(t)
	cfg := shim.Config{Families: model.Families{IPv4: true}}
	if err := s.EnsureShim(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	check := func(what string, want bool, read bool) {
		t.Helper()
		before := s.RuleReads()
		ok, err := s.ShimInPlace(ctx, cfg)
		if err != nil || ok != want {
			t.Fatalf("%s: in place %v (%v), want %v", what, ok, err, want)
		}
		if got := s.RuleReads() > before; got != read {
			t.Fatalf("%s: read the rules %v, want %v", what, got, read)
		}
	}
	check("after ensure", true, true)
	check("nothing changed", true, false)
	check("still nothing", true, false)
	ipt := shim.BackendNFT.Command("iptables")
	run(t, ipt, "-t", "filter", "-N", "FOREIGN-TEST")
	check("an unrelated chain added", true, true)
	check("nothing changed since", true, false)
	run(t, ipt, "-t", "filter", "-X", "FOREIGN-TEST")
	run(t, ipt, "-t", "nat", "-F", shim.ChainPostrouting)
	check("our chain flushed", false, true)
	check("still flushed", false, true)
}

// testThousandMembers adds and lists 1,000 members (one netlink message
// each, no exec) and times an Ensure that finds nothing to change.
func testThousandMembers(t *testing.T, b shim.Backend) {
	s, ctx := newShim(t, b), ctx30(t)
	cfg := shim.Config{Families: model.Families{IPv4: true, IPv6: true}}
	if err := s.EnsureShim(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range 1000 {
		vip := netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(i%250 + 1)})
		if err := s.AddSetEntry(ctx, shim.Entry(shim.ClusterIP, vip, model.TCP, 80)); err != nil {
			t.Fatal(err)
		}
	}
	added := time.Since(start)
	start = time.Now()
	got, err := s.SetEntries(ctx)
	if err != nil || len(got) != 1000 {
		t.Fatalf("listed %d members (%v), want 1000", len(got), err)
	}
	listed := time.Since(start)
	start = time.Now()
	writes := s.RuleWrites()
	if err := s.EnsureShim(ctx, cfg); err != nil || s.RuleWrites() != writes {
		t.Fatalf("unchanged ensure rewrote %d families: %v", s.RuleWrites()-writes, err)
	}
	t.Logf("1000 adds %s (%s each), list %s, unchanged Ensure %s", added, added/1000, listed, time.Since(start))
}

func testRulesOnlyOnChange(t *testing.T, b shim.Backend) {
	s, ctx := newShim(t, b), ctx30(t)
	cfg := shim.Config{Families: model.Families{IPv4: true, IPv6: true}}
	ensure := func(cfg shim.Config, want int, why string) {
		t.Helper()
		before := s.RuleWrites()
		if err := s.EnsureShim(ctx, cfg); err != nil {
			t.Fatalf("ensure (%s): %v", why, err)
		}
		if n := s.RuleWrites() - before; n != want {
			t.Fatalf("ensure (%s) rewrote %d families, want %d", why, n, want)
		}
	}
	ensure(cfg, 2, "first")
	ensure(cfg, 0, "unchanged")
	// Someone deletes one of our rules: repaired, in that family only.
	run(t, b.Command("iptables"), "-t", "filter", "-D", shim.ChainSourceRanges, "-j", "DROP")
	ensure(cfg, 1, "a rule deleted")
	// Someone deletes a jump: put back once, not duplicated.
	run(t, b.Command("ip6tables"), "-t", "nat", "-D", "OUTPUT", "-j", shim.ChainServices)
	ensure(cfg, 1, "a jump deleted")
	ensure(cfg, 0, "repaired")
	save := run(t, b.Command("iptables-save"))
	if n := strings.Count(save, "-A PREROUTING -j "+shim.ChainServices+"\n"); n != 1 {
		t.Fatalf("%d PREROUTING jumps, want 1:\n%s", n, save)
	}
	cfg.MasqueradeAll = true
	ensure(cfg, 2, "config changed")
	save = run(t, b.Command("iptables-save"))
	if !strings.Contains(save, "-A KUBE-IPVS-SERVICES -m set --match-set KUBE-IPVS-CLUSTER-IP dst,dst -j KUBE-IPVS-MARK-MASQ") {
		t.Fatalf("masquerade-all rule missing:\n%s", save)
	}
	// Each detect-local form and the ends of the masquerade bit's range:
	// written once, then read back exactly as rendered (a second ensure
	// writes nothing), which is what keeps resyncs from rewriting them.
	for _, c := range []shim.Config{
		{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")}},
		{PodInterface: "cbr0"},
		{PodInterface: "veth+", MasqueradeMark: 1},
		{PodInterface: "veth+", MasqueradeMark: 1 << 31},
	} {
		c.Families = cfg.Families
		ensure(c, 2, fmt.Sprintf("%+v", c))
		ensure(c, 0, fmt.Sprintf("%+v again", c))
	}
	save = run(t, b.Command("iptables-save"))
	for _, want := range []string{
		"-A KUBE-IPVS-SERVICES ! -i veth+ -m set --match-set KUBE-IPVS-CLUSTER-IP dst,dst -j KUBE-IPVS-MARK-MASQ",
		"-A KUBE-IPVS-MARK-MASQ -j MARK --set-xmark 0x80000000/0x80000000",
	} {
		if !strings.Contains(save, want) {
			t.Fatalf("%q missing:\n%s", want, save)
		}
	}
}

// testAtomicReplacement rewrites the rules back and forth while a reader
// keeps listing them: every listing must show one whole version of our
// chain, never an empty or half-written one.
func testAtomicReplacement(t *testing.T, b shim.Backend) {
	s, ctx := newShim(t, b), ctx30(t)
	a := shim.Config{Families: model.Families{IPv4: true}}
	c := shim.Config{Families: model.Families{IPv4: true}, MasqueradeAll: true}
	var versions [][]string
	for _, cfg := range []shim.Config{a, c} {
		for _, ch := range shim.Rules(cfg, false).Tables[0].Chains {
			if ch.Name == shim.ChainServices {
				versions = append(versions, ch.Rules)
			}
		}
	}
	if err := s.EnsureShim(ctx, a); err != nil {
		t.Fatal(err)
	}
	stop := readAlong(func() string {
		out, err := exec.Command(b.Command("iptables-save"), "-t", "nat").Output()
		if err != nil {
			return err.Error()
		}
		got := shim.ParseSave(string(out))["nat"].Rules[shim.ChainServices]
		if !slices.ContainsFunc(versions, func(v []string) bool { return slices.Equal(v, got) }) {
			return fmt.Sprintf("%q", got)
		}
		return ""
	})
	rounds := 30
	if os.Getenv("KUBE_IPVS_VM") == "1" {
		rounds = 10 // emulated CPUs: enough to interleave, not to time out
	}
	for i := range rounds {
		if err := s.EnsureShim(ctx, []shim.Config{c, a}[i%2]); err != nil {
			t.Fatal(err)
		}
	}
	reads, bad := stop()
	t.Logf("%d rewrites, %d concurrent listings", rounds, reads)
	if len(bad) > 0 {
		t.Fatalf("%d listings saw a partial chain, first: %s", len(bad), bad[0])
	}
}

// testSmallSetSwapped: a VIPs set an older version made with a small
// maxelem, matched by a rule, is replaced by EnsureShim while a reader
// lists it: every listing holds every member, the rule matches the
// replacement, and no replacement set is left behind.
func testSmallSetSwapped(t *testing.T, b shim.Backend) {
	s, ctx := newShim(t, b), ctx30(t)
	def := shim.SetDef{Kind: shim.VIPs, Name: shim.VIPs.Name(false), Type: shim.HashIP}
	const n = 5000
	if err := makeIPSet(def, n); err != nil {
		t.Fatal(err)
	}
	var restore strings.Builder
	for i := range n {
		fmt.Fprintf(&restore, "add %s %s\n", def.Name, netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}))
	}
	cmd := exec.Command("ipset", "restore")
	cmd.Stdin = strings.NewReader(restore.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ipset restore: %v\n%s", err, out)
	}
	iptables := b.Command("iptables")
	run(t, iptables, "-w", "-N", "VIPSET-TEST")
	run(t, iptables, "-w", "-A", "VIPSET-TEST", "-m", "set", "--match-set", def.Name, "dst", "-j", "RETURN")
	t.Cleanup(func() {
		_ = exec.Command(iptables, "-w", "-F", "VIPSET-TEST").Run()
		_ = exec.Command(iptables, "-w", "-X", "VIPSET-TEST").Run()
	})
	stop := readAlong(func() string {
		out, err := exec.Command("ipset", "list", "-t", def.Name).CombinedOutput()
		if err != nil || !strings.Contains(string(out), fmt.Sprintf("Number of entries: %d\n", n)) {
			return fmt.Sprintf("%v: %s", err, out)
		}
		return ""
	})
	start := time.Now()
	err := s.EnsureShim(ctx, shim.Config{Families: model.Families{IPv4: true}})
	took := time.Since(start)
	reads, bad := stop()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("EnsureShim replaced the set of %d members and wrote the rules in %s; %d listings meanwhile", n, took.Round(time.Millisecond), reads)
	if len(bad) > 0 {
		t.Fatalf("%d listings saw the set without its %d members, first: %s", len(bad), n, bad[0])
	}
	header := run(t, "ipset", "list", "-t", def.Name)
	maxElem := regexp.MustCompile(fmt.Sprintf(`maxelem %d\b`, shim.MaxSetMembers))
	if !maxElem.MatchString(header) || !strings.Contains(header, fmt.Sprintf("Number of entries: %d\n", n)) {
		t.Fatalf("after the replacement:\n%s", header)
	}
	if rules := run(t, iptables, "-w", "-S", "VIPSET-TEST"); !strings.Contains(rules, "--match-set "+def.Name+" dst") {
		t.Fatalf("the rule lost its set:\n%s", rules)
	}
	if names := run(t, "ipset", "list", "-n"); strings.Contains(names, shim.ReplacementName(def.Name)) {
		t.Fatalf("a replacement set was left behind:\n%s", names)
	}
}

// testOtherTypeUnderRules: a set under the shim's name but of another
// type, which the kernel will not swap, matched by the shim's own rules,
// is made again with the shim's type and the rules are written back. One
// that a foreign rule matches too cannot be destroyed: EnsureShim says
// so, and still writes the shim's rules.
func testOtherTypeUnderRules(t *testing.T, b shim.Backend) {
	s, ctx := newShim(t, b), ctx30(t)
	cfg := shim.Config{Families: model.Families{IPv4: true}}
	other := shim.SetDef{Kind: shim.VIPs, Name: shim.VIPs.Name(false), Type: shim.HashIPPort}
	oldSets := func() {
		t.Helper()
		for _, def := range shim.Sets(true, false) {
			if def.Name == other.Name {
				def = other
			}
			if err := makeIPSet(def, shim.MaxSetMembers); err != nil {
				t.Fatal(err)
			}
		}
	}
	typeOf := func() string {
		t.Helper()
		_, rest, _ := strings.Cut(run(t, "ipset", "list", "-t", other.Name), "Type: ")
		typ, _, _ := strings.Cut(rest, "\n")
		return typ
	}
	inPlace := func(what string) {
		t.Helper()
		if ok, err := s.ShimInPlace(ctx, cfg); err != nil || !ok {
			t.Fatalf("%s: rules in place %v, %v", what, ok, err)
		}
	}
	oldSets()
	rules := shim.Rules(cfg, false)
	_, missing := rules.Plan(shim.ParseSave(run(t, b.Command("iptables-save"))))
	restore := exec.Command(b.Command("iptables-restore"), "--noflush")
	restore.Stdin = strings.NewReader(rules.Restore(missing))
	if out, err := restore.CombinedOutput(); err != nil {
		t.Fatalf("write the rules over the other set: %v\n%s", err, out)
	}
	// A reader meanwhile finds every rule of the shim's chains, the VIPs
	// guard among them, matching the old set or the replacement.
	ourRules := func(save string) (n int, guarded bool) {
		saved := shim.ParseSave(save)
		for table, chains := range shim.OurChains() {
			for _, c := range chains {
				if t, ok := saved[table]; ok {
					for _, r := range t.Rules[c] {
						n++
						guarded = guarded || strings.Contains(r, "REJECT") &&
							(strings.Contains(r, "--match-set "+other.Name+" dst ") ||
								strings.Contains(r, "--match-set "+shim.ReplacementName(other.Name)+" dst "))
					}
				}
			}
		}
		return n, guarded
	}
	want, guarded := ourRules(run(t, b.Command("iptables-save")))
	if !guarded {
		t.Fatal("no VIPs guard among the rules written")
	}
	var raced int
	stop := readAlong(func() string {
		out, err := exec.Command(b.Command("iptables-save")).Output()
		if setGoneWhileSaving(err) {
			raced++
			return ""
		}
		if n, guarded := ourRules(string(out)); err != nil || n != want || !guarded {
			return fmt.Sprintf("%d rules of %d, guard %v (%v):\n%s", n, want, guarded, err, out)
		}
		return ""
	})
	err := s.EnsureShim(ctx, cfg)
	reads, bad := stop()
	t.Logf("%d rule reads during the replacement, %d of them failed by iptables-save's own race", reads, raced)
	if len(bad) > 0 {
		t.Fatalf("%d of %d reads during the replacement found rules missing, first: %s", len(bad), reads, bad[0])
	}
	if !errors.Is(err, dataplane.ErrSetEmptied) {
		t.Fatalf("EnsureShim over the other set: %v, want ErrSetEmptied", err)
	}
	if names := run(t, "ipset", "list", "-n"); strings.Contains(names, shim.ReplacementName(other.Name)) {
		t.Fatalf("a replacement set was left behind:\n%s", names)
	}
	if err := s.EnsureShim(ctx, cfg); err != nil {
		t.Fatalf("ensure again: %v", err)
	}
	if got := typeOf(); got != string(shim.HashIP) {
		t.Fatalf("%s is %s after EnsureShim, want %s", other.Name, got, shim.HashIP)
	}
	inPlace("after the set was made again")
	if err := s.AddSetEntry(ctx, shim.VIPEntry(netip.MustParseAddr("10.96.0.1"))); err != nil {
		t.Fatal(err)
	}

	if err := s.DeleteShim(ctx); err != nil {
		t.Fatal(err)
	}
	oldSets()
	iptables := b.Command("iptables")
	run(t, iptables, "-w", "-N", "FOREIGN-TEST")
	run(t, iptables, "-w", "-A", "FOREIGN-TEST", "-m", "set", "--match-set", other.Name, "dst,dst", "-j", "RETURN")
	t.Cleanup(func() {
		_ = exec.Command(iptables, "-w", "-F", "FOREIGN-TEST").Run()
		_ = exec.Command(iptables, "-w", "-X", "FOREIGN-TEST").Run()
	})
	err = s.EnsureShim(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "replace ipset "+other.Name) {
		t.Fatalf("EnsureShim with a foreign rule on the other set: %v, want an error naming the set", err)
	}
	if got := typeOf(); got != string(shim.HashIPPort) {
		t.Fatalf("%s is %s, want it left as it was", other.Name, got)
	}
	// The rules are back on the set, which is still not the shim's.
	if ok, err := s.ShimInPlace(ctx, cfg); err != nil || ok {
		t.Fatalf("after the failed replacement: in place %v, %v; want false", ok, err)
	}
	if _, missing := rules.Plan(shim.ParseSave(run(t, b.Command("iptables-save")))); len(missing) > 0 {
		t.Fatalf("after the failed replacement jumps are missing: %v", missing)
	}
	if names := run(t, "ipset", "list", "-n"); strings.Contains(names, shim.ReplacementName(other.Name)) {
		t.Fatalf("a replacement set was left behind:\n%s", names)
	}
}

func testRemoveForeign(t *testing.T, b shim.Backend) {
	s, ctx := newShim(t, b), ctx30(t)
	if err := s.EnsureShim(ctx, shim.Config{Families: model.Families{IPv4: true, IPv6: true}}); err != nil {
		t.Fatal(err)
	}
	run(t, b.Command("iptables"), "-t", "filter", "-A", "INPUT", "-s", "10.9.9.9/32", "-j", "DROP")
	// A comment that reads like a jump to our chain is still a comment.
	decoy := "see -j " + shim.ChainFirewall + " \"here\""
	run(t, b.Command("iptables"), "-t", "filter", "-A", "INPUT", "-m", "comment", "--comment", decoy, "-j", "ACCEPT")
	run(t, "ipset", "create", "foreign-set", "hash:ip")
	if err := s.DeleteShim(ctx); err != nil {
		t.Fatal(err)
	}
	save := run(t, b.Command("iptables-save")) + run(t, b.Command("ip6tables-save"))
	for _, line := range strings.Split(save, "\n") {
		if strings.Contains(line, "KUBE-IPVS") && !strings.Contains(line, "--comment") {
			t.Fatalf("our rules survived removal:\n%s", save)
		}
	}
	if !strings.Contains(save, "-A INPUT -s 10.9.9.9/32 -j DROP") || !strings.Contains(save, "see -j "+shim.ChainFirewall) {
		t.Fatalf("a foreign rule was removed:\n%s", save)
	}
	sets := run(t, "ipset", "list", "-n")
	if strings.Contains(sets, "KUBE-IPVS") || !strings.Contains(sets, "foreign-set") {
		t.Fatalf("sets after removal:\n%s", sets)
	}
	run(t, b.Command("iptables"), "-t", "filter", "-D", "INPUT", "-s", "10.9.9.9/32", "-j", "DROP")
	run(t, b.Command("iptables"), "-t", "filter", "-D", "INPUT", "-m", "comment", "--comment", decoy, "-j", "ACCEPT")
	run(t, "ipset", "destroy", "foreign-set")
}

// kubeProxyLeftovers is a small kube-proxy IPVS-mode shaped ruleset.
const kubeProxyLeftovers = `*nat
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-LOAD-BALANCER - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
COMMIT
*filter
:KUBE-FORWARD - [0:0]
:KUBE-IPVS-FILTER - [0:0]
-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A KUBE-IPVS-FILTER -m set --match-set KUBE-IPVS-IPS dst -j REJECT
COMMIT
`

func testRemoveKubeProxy(t *testing.T, b shim.Backend) {
	s, ctx := newShim(t, b), ctx30(t)
	run(t, "ipset", "create", "KUBE-CLUSTER-IP", "hash:ip,port")
	run(t, "ipset", "create", "KUBE-IPVS-IPS", "hash:ip")
	run(t, "ipset", "create", "KUBE-6-CLUSTER-IP", "hash:ip,port", "family", "inet6")
	cmd := exec.Command(b.Command("iptables-restore"), "--noflush")
	cmd.Stdin = strings.NewReader(kubeProxyLeftovers)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("plant kube-proxy leftovers: %v\n%s", err, out)
	}
	if err := s.EnsureShim(ctx, shim.Config{Families: model.Families{IPv4: true}}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteKubeProxyShim(ctx); err != nil {
		t.Fatal(err)
	}
	save := run(t, b.Command("iptables-save"))
	for _, gone := range []string{"KUBE-SERVICES", "KUBE-POSTROUTING", "KUBE-MARK-MASQ", "KUBE-IPVS-FILTER", "KUBE-FORWARD"} {
		if strings.Contains(save, gone+" ") || strings.Contains(save, gone+"\n") {
			t.Fatalf("kube-proxy chain %s survived:\n%s", gone, save)
		}
	}
	if !strings.Contains(save, "-A INPUT -j "+shim.ChainFirewall) {
		t.Fatalf("our rules were removed with kube-proxy's:\n%s", save)
	}
	sets := run(t, "ipset", "list", "-n")
	if strings.Contains(sets, "KUBE-CLUSTER-IP") || strings.Contains(sets, "KUBE-6-") || strings.Contains(sets, "KUBE-IPVS-IPS") {
		t.Fatalf("kube-proxy sets survived:\n%s", sets)
	}
	if !strings.Contains(sets, shim.ClusterIP.Name(false)) {
		t.Fatalf("our sets were destroyed:\n%s", sets)
	}
}

// TestShimDetectsBackend: rules in the legacy tables make legacy the
// backend; a bare node gets nft.
func TestShimDetectsBackend(t *testing.T) {
	if !isolated(t) {
		return
	}
	needBackend(t, shim.BackendLegacy)
	needBackend(t, shim.BackendNFT)
	if got := linux.NewShim(linux.ShimOptions{}).Backend(ctx30(t)); got != shim.BackendNFT {
		t.Errorf("bare node: backend %s, want nft", got)
	}
	for i := range 3 {
		run(t, "iptables-legacy", "-A", "INPUT", "-s", fmt.Sprintf("10.9.9.%d/32", i), "-j", "ACCEPT")
	}
	t.Cleanup(func() { _, _ = exec.Command("iptables-legacy", "-F", "INPUT").CombinedOutput() })
	if got := linux.NewShim(linux.ShimOptions{}).Backend(ctx30(t)); got != shim.BackendLegacy {
		t.Errorf("rules in legacy: backend %s, want legacy", got)
	}
}

// TestShimXtablesLockHeld: while another program holds the xtables lock,
// EnsureShim fails within its bound (LockWait) with an error naming the
// lock, instead of stalling the sync; once the lock is free it succeeds.
func TestShimXtablesLockHeld(t *testing.T) {
	if !isolated(t) {
		return
	}
	needBackend(t, shim.BackendLegacy)
	if _, err := exec.LookPath("flock"); err != nil {
		skipOrFail(t, "flock (util-linux) is needed to hold the xtables lock")
	}
	// The lock file is the machine's, not the network namespace's: holding
	// /run/xtables.lock would stall every iptables-legacy user of the
	// machine. iptables-legacy takes XTABLES_LOCKFILE in its place (the
	// tools the shim runs inherit it), so the test holds a lock of its own.
	lock := filepath.Join(t.TempDir(), "xtables.lock")
	t.Setenv("XTABLES_LOCKFILE", lock)
	s, ctx := newShimWith(t, linux.ShimOptions{Backend: shim.BackendLegacy, LockWait: time.Second}), ctx30(t)
	cfg := shim.Config{Families: model.Families{IPv4: true}}

	// flock's child (sleep) holds the lock too: both go, as a group.
	holder := exec.Command("flock", lock, "sleep", "120")
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			_ = syscall.Kill(-holder.Process.Pid, syscall.SIGKILL)
			_ = holder.Wait()
		}
	}
	t.Cleanup(release)
	for exec.Command("flock", "-n", lock, "true").Run() == nil {
		time.Sleep(10 * time.Millisecond) // until the holder has it
	}

	start := time.Now()
	err := s.EnsureShim(ctx, cfg)
	took := time.Since(start)
	t.Logf("ensure with the lock held: %s: %v", took, err)
	if err == nil || !strings.Contains(err.Error(), "xtables lock") {
		t.Fatalf("ensure with the lock held: got %v, want an error naming the xtables lock", err)
	}
	// LockWait is 1 s; the rest is the tools' own start-up, generous for a
	// loaded machine, and far below the call's one-minute bound.
	if took < time.Second || took > 10*time.Second {
		t.Fatalf("ensure with the lock held took %s, want about LockWait (1s)", took)
	}
	release()
	if err := s.EnsureShim(ctx, cfg); err != nil {
		t.Fatalf("ensure once the lock is free: %v", err)
	}
}

// TestShimReadBackCatchesLostPrefix: were a network member sent without
// its prefix (what the netlink library does with a zero-length one), the
// kernel would hold the host prefix; the read-back after the add catches
// that and takes the add back, leaving no wrong member.
func TestShimReadBackCatchesLostPrefix(t *testing.T) {
	if !isolated(t) {
		return
	}
	needBackend(t, shim.BackendNFT)
	s, ctx := newShim(t, shim.BackendNFT), ctx30(t)
	if err := s.EnsureShim(ctx, shim.Config{Families: model.Families{IPv4: true}}); err != nil {
		t.Fatal(err)
	}
	lost := shim.SourceRangeEntry(netip.MustParseAddr("192.0.2.10"), model.TCP, 443, netip.MustParsePrefix("0.0.0.0/0"))
	err := s.AddUnchecked(ctx, lost)
	if err == nil || !strings.Contains(err.Error(), "does not hold it as asked") {
		t.Fatalf("add of a member the kernel stores otherwise: got %v, want the read-back to refuse it", err)
	}
	if got, err := s.SetEntries(ctx); err != nil || len(got) != 0 {
		t.Fatalf("members after the refused add: %v (%v), want none", got, err)
	}
	ok := shim.SourceRangeEntry(netip.MustParseAddr("192.0.2.10"), model.TCP, 443, netip.MustParsePrefix("10.0.0.0/8"))
	if err := s.AddUnchecked(ctx, ok); err != nil {
		t.Fatalf("control: a /8 member: %v", err)
	}
}

// TestIPSetNamesOnce: the names-only listing DeleteShim destroys sets by
// names each set once, a set whose members span many netlink messages too
// (5,000 span dozens; a whole list named such a set once per message).
func TestIPSetNamesOnce(t *testing.T) {
	if !isolated(t) {
		return
	}
	if _, err := exec.LookPath("ipset"); err != nil {
		skipOrFail(t, "ipset not installed")
	}
	var in strings.Builder
	in.WriteString("create big hash:ip,port,ip maxelem 1048576\ncreate small hash:ip\nadd small 10.0.0.1\n")
	for i := range 5000 {
		fmt.Fprintf(&in, "add big 10.%d.%d.%d,tcp:8080,10.%d.%d.%d\n", 128+i>>16, byte(i>>8), byte(i), 128+i>>16, byte(i>>8), byte(i))
	}
	cmd := exec.Command("ipset", "restore")
	cmd.Stdin = strings.NewReader(in.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ipset restore: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = exec.Command("ipset", "destroy").CombinedOutput() })
	names, err := linux.IPSetNames(ctx30(t))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if want := []string{"big", "small"}; !slices.Equal(names, want) {
		t.Fatalf("set names %q, want %q", names, want)
	}
}

// setGoneWhileSaving: iptables-save failed because a set its snapshot of
// the rules names by index was destroyed before it asked ipset for the
// name. The tool lists the rules first and resolves each set after, so a
// read that overlaps a set's destruction fails whatever the rules are; the
// kernel itself refuses to destroy a set that a rule still matches, so
// such a read saw no rule without its set.
func setGoneWhileSaving(err error) bool {
	var exit *exec.ExitError
	return errors.As(err, &exit) && setGoneMessage.Match(exit.Stderr)
}

var setGoneMessage = regexp.MustCompile(`Set with index \d+ in kernel doesn't exist`)

// readAlong reads over and over on another goroutine, while the test
// changes what is read, until the returned stop is called; read says what
// was wrong with one reading ("": nothing). stop returns how many readings
// were made and what was wrong with them.
func readAlong(read func() string) (stop func() (reads int, bad []string)) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var n int
	var problems []string
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			n++
			if p := read(); p != "" {
				problems = append(problems, p)
			}
		}
	}()
	return func() (int, []string) {
		close(done)
		wg.Wait()
		return n, problems
	}
}
