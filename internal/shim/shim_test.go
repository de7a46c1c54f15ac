package shim

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

var v4only = model.Families{IPv4: true}

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read golden (run with -update): %v", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from golden:\n--- got\n%s--- want\n%s", name, got, want)
	}
}

func TestRulesGolden(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		v6   bool
	}{
		{"v4-default", Config{Families: v4only}, false},
		{"v4-cluster-cidr", Config{Families: v4only, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/56")}}, false},
		{"v6-cluster-cidr", Config{Families: model.Families{IPv6: true}, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/56")}}, true},
		{"v4-masquerade-all", Config{Families: v4only, MasqueradeAll: true, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}, false},
		// kube-proxy's BridgeInterface and InterfaceNamePrefix detectors:
		// the same "not from a pod" rule, told by the incoming interface,
		// in both families.
		{"v4-bridge-interface", Config{Families: v4only, PodInterface: "cbr0"}, false},
		{"v6-interface-prefix", Config{Families: model.Families{IPv6: true}, PodInterface: "veth+"}, true},
		// --iptables-masquerade-bit 0 and 31, the ends of kube-proxy's range.
		{"v4-mark-bit-0", Config{Families: v4only, MasqueradeMark: 1}, false},
		{"v4-mark-bit-31", Config{Families: v4only, MasqueradeMark: 1 << 31}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			golden(t, "rules-"+tt.name, Rules(tt.cfg, tt.v6).Restore(jumps))
		})
	}
}

func TestValidate(t *testing.T) {
	two := Config{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("10.244.0.0/16")}}
	if err := two.Validate(); err == nil {
		t.Error("two IPv4 cluster CIDRs accepted")
	}
	dual := Config{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/64")}}
	if err := dual.Validate(); err != nil {
		t.Errorf("one per family refused: %v", err)
	}
	for _, bad := range []Config{
		{PodInterface: "cbr0", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}},
		{PodInterface: "+"},
		{PodInterface: "a-very-long-name+"},
		{PodInterface: "veth +"},
		{MasqueradeMark: 0x4001},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	for _, good := range []Config{{PodInterface: "cali+"}, {PodInterface: "br-0123456789ab"}, {MasqueradeMark: 1 << 31}} {
		if err := good.Validate(); err != nil {
			t.Errorf("%+v refused: %v", good, err)
		}
	}
}

func TestMasqueradeMark(t *testing.T) {
	for bit, want := range map[int32]uint32{0: 0x1, 14: 0x4000, 31: 0x80000000} {
		if got, err := MasqueradeMark(bit); err != nil || got != want {
			t.Errorf("bit %d: %#x, %v; want %#x", bit, got, err, want)
		}
	}
	for _, bit := range []int32{-1, 32} {
		if _, err := MasqueradeMark(bit); err == nil {
			t.Errorf("bit %d accepted", bit)
		}
	}
}

// Ownership does not depend on the mark: a shim written with another
// masquerade bit (an agent run with --iptables-masquerade-bit 3) is
// recognised as ours, rewritten to the current bit, and removed whole.
func TestOtherMarkIsStillOurs(t *testing.T) {
	old := saveOf(Rules(Config{Families: v4only, MasqueradeMark: 1 << 3}, false))
	if !strings.Contains(old, "--mark 0x8/0x8") {
		t.Fatalf("bit 3 not rendered as 0x8:\n%s", old)
	}
	cur := Rules(Config{Families: v4only}, false)
	if ok, missing := cur.Plan(ParseSave(old)); ok || len(missing) != 0 {
		t.Errorf("the bit-3 rules: up to date %v, missing jumps %v; want a rewrite of the chains only", ok, missing)
	}
	// iptables-save declares the built-in chains the jumps sit in.
	for _, j := range cur.Jumps {
		old = strings.Replace(old, "*"+j.Table+"\n", "*"+j.Table+"\n:"+j.From+" ACCEPT [0:0]\n", 1)
	}
	removal := Removal(ParseSave(old), OurChains())
	for _, t2 := range cur.Tables {
		for _, c := range t2.Chains {
			if !strings.Contains(removal, "-X "+c.Name+"\n") {
				t.Errorf("removal keeps %s:\n%s", c.Name, removal)
			}
		}
	}
	if n := strings.Count(removal, "-D "); n != len(cur.Jumps) {
		t.Errorf("removal deletes %d jumps, want %d:\n%s", n, len(cur.Jumps), removal)
	}
}

// saveOf renders what iptables-save would print after restoring r into an
// empty table set: our chains with our rules and every jump.
func saveOf(r Ruleset) string {
	var b strings.Builder
	for _, t := range r.Tables {
		b.WriteString("*" + t.Name + "\n")
		for _, j := range r.Jumps {
			if j.Table == t.Name {
				b.WriteString("-A " + j.From + " -j " + j.To + "\n")
			}
		}
		for _, c := range t.Chains {
			b.WriteString(":" + c.Name + " - [0:0]\n")
			for _, rule := range c.Rules {
				b.WriteString("-A " + c.Name + " " + rule + "\n")
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

func TestPlan(t *testing.T) {
	r := Rules(Config{Families: v4only}, false)
	full := saveOf(r)
	if ok, missing := r.Plan(ParseSave(full)); !ok || len(missing) != 0 {
		t.Fatalf("fresh save not up to date: missing %v", missing)
	}
	noJump := strings.Replace(full, "-A INPUT -j KUBE-IPVS-FIREWALL\n", "", 1)
	ok, missing := r.Plan(ParseSave(noJump))
	if ok || len(missing) != 1 || missing[0].From != "INPUT" {
		t.Errorf("missing INPUT jump: up to date %v, missing %v", ok, missing)
	}
	drift := strings.Replace(full, "-A KUBE-IPVS-SOURCE-RANGES -j DROP\n", "", 1)
	if ok, missing := r.Plan(ParseSave(drift)); ok || len(missing) != 0 {
		t.Errorf("a deleted rule went unnoticed (missing %v)", missing)
	}
	other := Rules(Config{Families: v4only, MasqueradeAll: true}, false)
	if ok, _ := other.Plan(ParseSave(full)); ok {
		t.Error("a changed configuration compared equal")
	}
	if ok, missing := r.Plan(ParseSave("")); ok || len(missing) != len(r.Jumps) {
		t.Errorf("empty tables: up to date %v, missing %d jumps", ok, len(missing))
	}
}

func TestRemovalKubeProxy(t *testing.T) {
	save := `# Generated by iptables-nft-save
*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-IPVS-SERVICES - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SERVICES - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A PREROUTING -j KUBE-IPVS-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A POSTROUTING -s 10.0.0.0/8 -j MASQUERADE
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ
COMMIT
*filter
:INPUT ACCEPT [0:0]
:KUBE-IPVS-FILTER - [0:0]
-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER
-A KUBE-IPVS-FILTER -m set --match-set KUBE-IPVS-IPS dst -j REJECT --reject-with icmp-port-unreachable
COMMIT
`
	golden(t, "removal-kube-proxy", Removal(ParseSave(save), KubeProxyChains()))
	golden(t, "removal-ours", Removal(ParseSave(save), OurChains()))
	if got := Removal(ParseSave("*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n"), OurChains()); got != "" {
		t.Errorf("nothing to remove, yet:\n%s", got)
	}
}

// TestRemovalReadsArguments: only a rule whose jump target is one of the
// doomed chains is deleted; text that looks like a jump inside a quoted
// argument (a foreign rule's comment) is not a jump.
func TestRemovalReadsArguments(t *testing.T) {
	const head = "*filter\n:INPUT ACCEPT [0:0]\n:KUBE-IPVS-FIREWALL - [0:0]\n"
	for _, tc := range []struct {
		name, rule string
		deleted    bool
	}{
		{"our jump", `-j KUBE-IPVS-FIREWALL`, true},
		{"our jump, long option", `-m comment --comment "ipvs firewall" --jump KUBE-IPVS-FIREWALL`, true},
		{"our goto", `-s 10.0.0.0/8 -g KUBE-IPVS-FIREWALL`, true},
		{"jump in a foreign comment", `-m comment --comment "-j KUBE-IPVS-FIREWALL" -j ACCEPT`, false},
		{"jump mid-comment", `-m comment --comment "see -j KUBE-IPVS-FIREWALL too" -j ACCEPT`, false},
		{"escaped quote in a comment", `-m comment --comment "a \" -j KUBE-IPVS-FIREWALL" -j DROP`, false},
		{"comment with no jump after it", `-p tcp -m comment --comment "-j KUBE-IPVS-FIREWALL"`, false},
		{"unclosed quote", `-m comment --comment "-j KUBE-IPVS-FIREWALL -j ACCEPT`, false},
		{"other chain", `-j KUBE-IPVS-FIREWALL2`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Removal(ParseSave(head+"-A INPUT "+tc.rule+"\nCOMMIT\n"), OurChains())
			deleted := strings.Contains(got, "-D INPUT "+tc.rule+"\n")
			if deleted != tc.deleted {
				t.Fatalf("rule %s: deleted %v, want %v; removal:\n%s", tc.rule, deleted, tc.deleted, got)
			}
			if !strings.Contains(got, "-X KUBE-IPVS-FIREWALL\n") {
				t.Fatalf("our chain not removed:\n%s", got)
			}
		})
	}
}

func TestSetNames(t *testing.T) {
	for _, s := range Sets(true, true) {
		if len(s.Name) > 31 {
			t.Errorf("set %s: ipset names are at most 31 characters", s.Name)
		}
		if !IsOurs(s.Name) || IsKubeProxySet(s.Name) {
			t.Errorf("set %s: ours %v, kube-proxy's %v", s.Name, IsOurs(s.Name), IsKubeProxySet(s.Name))
		}
		// Its replacement is a name of its own: never taken for the set
		// itself (AddSetEntry refuses it), never kube-proxy's.
		r := ReplacementName(s.Name)
		if len(r) > 31 || !IsReplacement(r) || IsOurs(r) || IsKubeProxySet(r) || IsReplacement(s.Name) {
			t.Errorf("replacement %s of %s: %d characters, a replacement %v, ours %v, kube-proxy's %v",
				r, s.Name, len(r), IsReplacement(r), IsOurs(r), IsKubeProxySet(r))
		}
	}
	for _, name := range []string{"KUBE-IPVS-FOO-NEW", "KUBE-CLUSTER-IP-NEW", "-NEW"} {
		if IsReplacement(name) {
			t.Errorf("%s taken for a replacement of one of ours", name)
		}
	}
	for _, name := range []string{"KUBE-CLUSTER-IP", "KUBE-6-CLUSTER-IP", "KUBE-IPVS-IPS", "KUBE-6-IPVS-IPS",
		// As kube-proxy v1.37 names them, cut to 31 characters.
		"KUBE-6-LOAD-BALANCER-SOURCE-CID", "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS", "KUBE-LOAD-BALANCER-SOURCE-CIDR"} {
		if IsOurs(name) || !IsKubeProxySet(name) {
			t.Errorf("%s: ours %v, kube-proxy's %v", name, IsOurs(name), IsKubeProxySet(name))
		}
	}
}

func TestChooseBackend(t *testing.T) {
	tests := []struct {
		nft, legacy     int
		nftOK, legacyOK bool
		want            Backend
	}{
		{0, 0, true, true, BackendNFT},
		{3, 40, true, true, BackendLegacy},
		{40, 3, true, true, BackendNFT},
		{0, 0, false, true, BackendLegacy},
		{0, 9, true, false, BackendNFT},
	}
	for _, tt := range tests {
		if got := ChooseBackend(tt.nft, tt.legacy, tt.nftOK, tt.legacyOK); got != tt.want {
			t.Errorf("ChooseBackend(%d, %d, %v, %v) = %s, want %s", tt.nft, tt.legacy, tt.nftOK, tt.legacyOK, got, tt.want)
		}
	}
	if got := BackendLegacy.Command("ip6tables-restore"); got != "ip6tables-legacy-restore" {
		t.Errorf("command: %s", got)
	}
	if got := CountRules("*nat\n:A - [0:0]\n-A A -j B\n-A A -j C\nCOMMIT\n"); got != 2 {
		t.Errorf("CountRules = %d", got)
	}
}

func TestSetKinds(t *testing.T) {
	tests := []struct {
		kind             SetKind
		v4, v6           string
		typ              IPSetType
		frontend, guards bool
		guardsVIP        bool
	}{
		{ClusterIP, "KUBE-IPVS-CLUSTER-IP", "KUBE-IPVS6-CLUSTER-IP", HashIPPort, true, false, false},
		{External, "KUBE-IPVS-EXTERNAL", "KUBE-IPVS6-EXTERNAL", HashIPPort, true, false, false},
		{LoopBack, "KUBE-IPVS-LOOP-BACK", "KUBE-IPVS6-LOOP-BACK", HashIPPortIP, false, false, false},
		{Firewall, "KUBE-IPVS-LB-FW", "KUBE-IPVS6-LB-FW", HashIPPort, true, true, true},
		{SourceRanges, "KUBE-IPVS-LB-SOURCE-CIDR", "KUBE-IPVS6-LB-SOURCE-CIDR", HashIPPortNet, false, true, true},
		{NoEndpoints, "KUBE-IPVS-NO-ENDPOINTS", "KUBE-IPVS6-NO-ENDPOINTS", HashIPPort, true, false, false},
		{Frontends, "KUBE-IPVS-FRONTENDS", "KUBE-IPVS6-FRONTENDS", HashIPPort, true, false, false},
		{VIPs, "KUBE-IPVS-VIPS", "KUBE-IPVS6-VIPS", HashIP, false, false, true},
		{LocalSources, "KUBE-IPVS-LOCAL-SOURCES", "KUBE-IPVS6-LOCAL-SOURCES", HashIPPort, true, false, false},
	}
	if len(tests) != len(kinds) {
		t.Fatalf("%d kinds tested, %d exist", len(tests), len(kinds))
	}
	for _, tt := range tests {
		k := tt.kind
		if k.Name(false) != tt.v4 || k.Name(true) != tt.v6 || k.Type() != tt.typ ||
			k.NamesFrontend() != tt.frontend || k.GuardsSource() != tt.guards || k.GuardsVIP() != tt.guardsVIP {
			t.Errorf("%s: names %s %s, type %s, frontend %v, guards source %v, guards its VIP %v", k,
				k.Name(false), k.Name(true), k.Type(), k.NamesFrontend(), k.GuardsSource(), k.GuardsVIP())
		}
		for _, v6 := range []bool{false, true} {
			if got, gotV6, ok := ParseSetName(k.Name(v6)); !ok || got != k || gotV6 != v6 {
				t.Errorf("ParseSetName(%s) = %s, %v, %v", k.Name(v6), got, gotV6, ok)
			}
		}
	}
	for _, name := range []string{"KUBE-CLUSTER-IP", "KUBE-IPVS-IPS", "KUBE-IPVS-", "KUBE-IPVS-set-kind(0)", ""} {
		if k, _, ok := ParseSetName(name); ok || k != 0 {
			t.Errorf("ParseSetName(%q) = %s, %v: not ours", name, k, ok)
		}
	}
	a := netip.MustParseAddr("fd00::1")
	for want, e := range map[SetKind]model.SetEntry{
		NoEndpoints:  Entry(NoEndpoints, a, model.UDP, 53),
		LoopBack:     LoopBackEntry(model.TCP, netip.AddrPortFrom(a, 80)),
		SourceRanges: SourceRangeEntry(a, model.TCP, 443, netip.MustParsePrefix("2001:db8::/32")),
		VIPs:         VIPEntry(a),
	} {
		if _, v6, _ := ParseSetName(e.Set()); KindOf(e) != want || !v6 {
			t.Errorf("%s: kind %s, v6 %v; want %s, v6", e, KindOf(e), v6, want)
		}
	}
	if KindOf(model.NewSetEntry("KUBE-CLUSTER-IP", netip.Addr{}, 0, 0)) != 0 {
		t.Error("kube-proxy's set has one of our kinds")
	}
}

func TestBackendValidate(t *testing.T) {
	for _, b := range []Backend{BackendNFT, BackendLegacy, BackendDetect} {
		if err := b.Validate(); err != nil {
			t.Errorf("%q: %v", b, err)
		}
	}
	if err := Backend("iptables").Validate(); err == nil {
		t.Error(`"iptables" accepted as a backend`)
	}
}

// TestSetNamesMadeOnce: a set's name is the same string every time, not
// one built per member (130,000 members at 10,000 Services).
func TestSetNamesMadeOnce(t *testing.T) {
	for _, k := range kinds {
		if k.Name(false) != "KUBE-IPVS-"+k.String() || k.Name(true) != "KUBE-IPVS6-"+k.String() {
			t.Fatalf("%s: names %q, %q", k, k.Name(false), k.Name(true))
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = LoopBack.Name(false), VIPs.Name(true) }); n != 0 {
		t.Fatalf("naming a set allocates %v times", n)
	}
}

// TestRetarget: only the shim's chains with a rule matching the set are
// written again, whole, every rule matching the set (and no set whose name
// merely begins like it) pointed at the other; nothing else is touched.
func TestRetarget(t *testing.T) {
	save := `*filter
:INPUT ACCEPT [0:0]
:KUBE-IPVS-FILTER - [0:0]
:KUBE-IPVS-FIREWALL - [0:0]
:KUBE-IPVS-SOURCE-RANGES - [0:0]
-A INPUT -j KUBE-IPVS-FIREWALL
-A KUBE-IPVS-FILTER -m set --match-set KUBE-IPVS-VIPS dst -j RETURN
-A KUBE-IPVS-FIREWALL -m set --match-set KUBE-IPVS-FRONTENDS dst,dst -j RETURN
-A KUBE-IPVS-FIREWALL -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-VIPS dst -j REJECT --reject-with icmp-port-unreachable
-A KUBE-IPVS-SOURCE-RANGES -m set --match-set KUBE-IPVS-VIPS-REPLACEMENT dst -j RETURN
COMMIT
*nat
:POSTROUTING ACCEPT [0:0]
:KUBE-IPVS-POSTROUTING - [0:0]
-A KUBE-IPVS-POSTROUTING -j MASQUERADE
COMMIT
`
	want := `*filter
:KUBE-IPVS-FIREWALL - [0:0]
-A KUBE-IPVS-FIREWALL -m set --match-set KUBE-IPVS-FRONTENDS dst,dst -j RETURN
-A KUBE-IPVS-FIREWALL -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-VIPS-TMP dst -j REJECT --reject-with icmp-port-unreachable
COMMIT
`
	if got := Retarget(ParseSave(save), OurChains(), "KUBE-IPVS-VIPS", "KUBE-IPVS-VIPS-TMP"); got != want {
		t.Errorf("retarget:\n%s\nwant:\n%s", got, want)
	}
	if got := Retarget(ParseSave(save), OurChains(), "KUBE-IPVS-NONE", "X"); got != "" {
		t.Errorf("no rule matches the set, yet:\n%s", got)
	}
}
