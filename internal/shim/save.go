package shim

import (
	"slices"
	"strings"
)

// Saved is iptables-save output read back: per table, the chains in
// declaration order and each chain's rules (without the "-A CHAIN ").
type Saved map[string]*SavedTable

// SavedTable is one table of Saved.
type SavedTable struct {
	Chains []string
	Rules  map[string][]string
}

// ParseSave reads iptables-save output. Comments, counters and COMMIT lines
// are skipped; what it does not understand it ignores.
func ParseSave(text string) Saved {
	s := Saved{}
	var cur *SavedTable
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "*"):
			cur = &SavedTable{Rules: map[string][]string{}}
			s[line[1:]] = cur
		case cur == nil:
		case strings.HasPrefix(line, ":"):
			if name, _, ok := strings.Cut(line[1:], " "); ok {
				cur.Chains = append(cur.Chains, name)
			}
		case strings.HasPrefix(line, "-A "):
			chain, rule, _ := strings.Cut(line[3:], " ")
			cur.Rules[chain] = append(cur.Rules[chain], rule)
		}
	}
	return s
}

// hasChain tells whether a table declares a chain.
func (s Saved) hasChain(table, chain string) bool {
	t, ok := s[table]
	return ok && slices.Contains(t.Chains, chain)
}

// rules returns a chain's rules ("" table or chain: none).
func (s Saved) rules(table, chain string) []string {
	if t, ok := s[table]; ok {
		return t.Rules[chain]
	}
	return nil
}

// Plan compares what is there with the ruleset: upToDate is true when every
// chain of ours exists with exactly our rules and every jump is present;
// missing lists the jumps to insert.
func (r Ruleset) Plan(s Saved) (upToDate bool, missing []Jump) {
	upToDate = true
	for _, t := range r.Tables {
		for _, c := range t.Chains {
			if !s.hasChain(t.Name, c.Name) || !slices.Equal(s.rules(t.Name, c.Name), c.Rules) {
				upToDate = false
			}
		}
	}
	for _, j := range r.Jumps {
		if !slices.Contains(s.rules(j.Table, j.From), "-j "+j.To) {
			missing = append(missing, j)
			upToDate = false
		}
	}
	return upToDate, missing
}

// Removal renders iptables-restore --noflush input that deletes every rule
// of a built-in (or other foreign) chain jumping to one of chains, then
// flushes and deletes those chains; "" when none of them is there. Chains
// are given per table.
func Removal(s Saved, chains map[string][]string) string {
	var b strings.Builder
	for _, table := range sortedKeys(chains) {
		t, ok := s[table]
		if !ok {
			continue
		}
		doomed := map[string]bool{}
		for _, c := range chains[table] {
			if slices.Contains(t.Chains, c) {
				doomed[c] = true
			}
		}
		if len(doomed) == 0 {
			continue
		}
		b.WriteString("*" + table + "\n")
		for _, c := range t.Chains {
			if doomed[c] {
				b.WriteString(":" + c + " - [0:0]\n")
			}
		}
		for _, from := range t.Chains {
			if doomed[from] {
				continue // flushed whole by its declaration above
			}
			for _, rule := range t.Rules[from] {
				if doomed[jumpTarget(rule)] {
					b.WriteString("-D " + from + " " + rule + "\n")
				}
			}
		}
		for _, c := range t.Chains {
			if doomed[c] {
				b.WriteString("-X " + c + "\n")
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// Retarget renders iptables-restore --noflush input that makes the rules
// of chains (per table) that match the set from match the set to instead:
// each such chain is declared (which flushes it) and written again whole,
// all of a table in one transaction, so no moment has the chain without
// its rules. "" when no rule of chains matches from.
func Retarget(s Saved, chains map[string][]string, from, to string) string {
	old, repl := "--match-set "+from+" ", "--match-set "+to+" "
	var b strings.Builder
	for _, table := range sortedKeys(chains) {
		t, ok := s[table]
		if !ok {
			continue
		}
		var body strings.Builder
		for _, c := range chains[table] {
			rules := t.Rules[c]
			if !slices.ContainsFunc(rules, func(r string) bool { return strings.Contains(r, old) }) {
				continue
			}
			body.WriteString(":" + c + " - [0:0]\n")
			for _, r := range rules {
				body.WriteString("-A " + c + " " + strings.ReplaceAll(r, old, repl) + "\n")
			}
		}
		if body.Len() > 0 {
			b.WriteString("*" + table + "\n" + body.String() + "COMMIT\n")
		}
	}
	return b.String()
}

// jumpTarget is the chain a rule jumps (-j, --jump) or goes (-g, --goto)
// to, "" if none. The rule is split into arguments as iptables-restore
// splits it, so that "-j KUBE-IPVS-..." inside a quoted argument (a
// foreign rule's comment) is text, not a jump; a rule it cannot split is
// nobody's jump.
func jumpTarget(rule string) string {
	args, ok := splitArgs(rule)
	if !ok {
		return ""
	}
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "-j", "--jump", "-g", "--goto":
			return args[i+1]
		}
	}
	return ""
}

// splitArgs splits a rule of iptables-save output into its arguments:
// blanks separate them, except inside double quotes, where a backslash
// escapes the next character (iptables-save quotes a comment so, escaping
// its quotes and backslashes). ok is false for an unclosed quote.
func splitArgs(rule string) (args []string, ok bool) {
	var cur strings.Builder
	inArg, quoted, escaped := false, false, false
	for _, r := range rule {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case quoted && r == '\\':
			escaped = true
		case r == '"':
			quoted, inArg = !quoted, true
		case !quoted && (r == ' ' || r == '\t'):
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteRune(r)
			inArg = true
		}
	}
	if quoted {
		return nil, false
	}
	if inArg {
		args = append(args, cur.String())
	}
	return args, true
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// OurChains are the shim's chains per table, for removal.
func OurChains() map[string][]string {
	out := map[string][]string{}
	for _, t := range Rules(Config{}, false).Tables {
		for _, c := range t.Chains {
			out[t.Name] = append(out[t.Name], c.Name)
		}
	}
	return out
}

// KubeProxyChains are the chains kube-proxy's IPVS mode creates (its
// iptablesCleanupChains), per table.
func KubeProxyChains() map[string][]string {
	return map[string][]string{
		"nat": {"KUBE-SERVICES", "KUBE-POSTROUTING", "KUBE-NODE-PORT", "KUBE-LOAD-BALANCER", "KUBE-MARK-MASQ"},
		"filter": {"KUBE-FORWARD", "KUBE-NODE-PORT", "KUBE-PROXY-FIREWALL", "KUBE-SOURCE-RANGES-FIREWALL",
			"KUBE-IPVS-FILTER", "KUBE-IPVS-OUT-FILTER"},
	}
}

// kubeProxySets are kube-proxy IPVS mode's ipsets (its ipsetInfo).
var kubeProxySets = []string{
	"KUBE-LOOP-BACK", "KUBE-CLUSTER-IP", "KUBE-EXTERNAL-IP", "KUBE-EXTERNAL-IP-LOCAL",
	"KUBE-LOAD-BALANCER", "KUBE-LOAD-BALANCER-FW", "KUBE-LOAD-BALANCER-LOCAL",
	"KUBE-LOAD-BALANCER-SOURCE-IP", "KUBE-LOAD-BALANCER-SOURCE-CIDR",
	"KUBE-NODE-PORT-TCP", "KUBE-NODE-PORT-LOCAL-TCP", "KUBE-NODE-PORT-UDP", "KUBE-NODE-PORT-LOCAL-UDP",
	"KUBE-NODE-PORT-SCTP-HASH", "KUBE-NODE-PORT-LOCAL-SCTP-HASH", "KUBE-HEALTH-CHECK-NODE-PORT",
	"KUBE-IPVS-IPS",
}

// IsKubeProxySet tells whether an ipset name is one kube-proxy's IPVS mode
// creates, in either family. Its IPv6 sets are named KUBE-6-*, and it cuts
// a name to the kernel's 31 characters, so two of them are
// KUBE-6-LOAD-BALANCER-SOURCE-CID and KUBE-6-NODE-PORT-LOCAL-SCTP-HAS (the
// multi-node test found them left behind).
func IsKubeProxySet(name string) bool {
	for _, s := range kubeProxySets {
		if name == s || name == ipsetName("KUBE-6-"+strings.TrimPrefix(s, "KUBE-")) {
			return true
		}
	}
	return false
}

// ipsetName is a set name as the kernel keeps it: at most 31 characters
// (IPSET_MAXNAMELEN with its terminating NUL), as kube-proxy truncates.
func ipsetName(name string) string {
	if len(name) > 31 {
		return name[:31]
	}
	return name
}
