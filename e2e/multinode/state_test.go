package multinode

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
)

// nodeState is what a proxy leaves in a node's kernel, normalized so two
// nodes compare equal when the same tool made the same state: the node's
// own addresses become NODE and POD-GW, counters and comments go, and lines
// are sorted (the kernel lists in hash order). Real servers are left out:
// with traffic policy Local they differ by node on purpose.
type nodeState map[string][]string

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

func readState(n *node) (nodeState, error) {
	st := nodeState{}
	norm := func(s string) string {
		s = strings.ReplaceAll(s, nodeAddr(n.i), "NODE")
		return strings.ReplaceAll(s, podGateway(n.i), "POD-GW")
	}
	for _, tool := range []string{"iptables-save", "ip6tables-save"} {
		out, err := inNS(n.name, tool)
		if err != nil {
			return nil, err
		}
		var lines []string
		for _, l := range withoutEmptyTables(strings.Split(out, "\n")) {
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			lines = append(lines, norm(counters.ReplaceAllString(l, "[0:0]")))
		}
		st[tool] = sorted(lines)
	}
	out, err := inNS(n.name, "ipset", "list", "-n")
	if err != nil {
		return nil, err
	}
	st["ipset list -n"] = sorted(strings.Fields(out))
	out, err = inNS(n.name, "ipvsadm", "-Sn")
	if err != nil {
		return nil, err
	}
	var vss []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "-A ") {
			vss = append(vss, norm(l))
		}
	}
	st["ipvsadm -Sn (virtual servers)"] = sorted(vss)
	st[boundVIPs] = sorted(readVIPs(n))
	return st, nil
}

// boundVIPs names the VIPs bound on kube-ipvs0 in a nodeState. They are
// compared as bare addresses, whichever way each is bound: kube-proxy
// binds addresses, kube-ipvs local routes by default, and a migrated node
// keeps the addresses kube-proxy bound.
const boundVIPs = "VIPs bound on kube-ipvs0"

// readVIPs lists the addresses of kube-ipvs0 and kube-ipvs' local routes
// through it (protocol 243), both families; no link reads as none.
func readVIPs(n *node) []string {
	var vips []string
	if out, err := inNS(n.name, "ip", "-o", "addr", "show", "dev", "kube-ipvs0"); err == nil {
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			for i := 0; i+1 < len(f); i++ {
				if f[i] == "inet" || f[i] == "inet6" {
					vips = append(vips, strings.SplitN(f[i+1], "/", 2)[0])
				}
			}
		}
	}
	for _, family := range []string{"-4", "-6"} {
		out, err := inNS(n.name, "ip", family, "route", "show", "table", "local", "dev", "kube-ipvs0", "proto", "243")
		if err != nil {
			continue
		}
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "local" {
				vips = append(vips, f[1])
			}
		}
	}
	return vips
}

// withoutEmptyTables drops the tables of iptables-save output that hold
// no rule and no chain of anyone's: a table once used stays listed with
// its built-in chains after its last rule goes (the mangle table after
// `kube-ipvs cleanup`), and holds nothing.
func withoutEmptyTables(lines []string) []string {
	var out, table []string
	empty := true
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "*"):
			table, empty = []string{l}, true
		case table == nil:
			out = append(out, l)
		case l == "COMMIT":
			if !empty {
				out = append(append(out, table...), l)
			}
			table = nil
		default:
			table = append(table, l)
			// A built-in chain's line names its policy; anyone's own
			// chain's names "-".
			f := strings.Fields(l)
			if strings.HasPrefix(l, "-A ") || (strings.HasPrefix(l, ":") && len(f) > 1 && f[1] == "-") {
				empty = false
			}
		}
	}
	return out
}

func sorted(s []string) []string {
	sort.Strings(s)
	return s
}

// diffState lists what a has and b lacks and the other way round, per
// section ("" when equal).
func diffState(aName string, a nodeState, bName string, b nodeState) string {
	var out []string
	var sections []string
	for k := range a {
		sections = append(sections, k)
	}
	sort.Strings(sections)
	for _, k := range sections {
		onlyA, onlyB := minus(a[k], b[k]), minus(b[k], a[k])
		for _, l := range onlyA {
			out = append(out, fmt.Sprintf("%s: only on %s: %s", k, aName, l))
		}
		for _, l := range onlyB {
			out = append(out, fmt.Sprintf("%s: only on %s: %s", k, bName, l))
		}
	}
	return strings.Join(out, "\n")
}

// minus is the lines of a not in b (as multisets).
func minus(a, b []string) []string {
	have := map[string]int{}
	for _, l := range b {
		have[l]++
	}
	var out []string
	for _, l := range a {
		if have[l] > 0 {
			have[l]--
			continue
		}
		out = append(out, l)
	}
	return out
}

// kubeProxyLeftovers is every line of a node's state that names one of
// kube-proxy's IPVS-mode chains or sets.
func kubeProxyLeftovers(st nodeState) []string {
	re := regexp.MustCompile(`KUBE-(SERVICES|POSTROUTING|MARK-MASQ|NODE-PORT|LOAD-BALANCER|FORWARD|PROXY-FIREWALL|SOURCE-RANGES-FIREWALL|IPVS-FILTER|IPVS-OUT-FILTER|CLUSTER-IP|LOOP-BACK|EXTERNAL-IP|6-)`)
	var out []string
	for k, lines := range st {
		for _, l := range lines {
			if re.MatchString(l) {
				out = append(out, k+": "+l)
			}
		}
	}
	sort.Strings(out)
	return out
}

// kubeProxySettled reads a kube-proxy node's state once kube-proxy has
// written all of it: its IPv4 and IPv6 rules are in place and two reads 3 s
// apart agree (it writes sets, then rules, per family, one sync each).
func kubeProxySettled(n *node) (nodeState, error) {
	var st nodeState
	_, err := waitFor(settle, func() (bool, string) {
		a, err := readState(n)
		if err != nil {
			return false, err.Error()
		}
		if !contains(a["iptables-save"], "-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT") ||
			!contains(a["ip6tables-save"], ":KUBE-SERVICES - [0:0]") {
			return false, "kube-proxy's rules not written yet"
		}
		time.Sleep(3 * time.Second)
		b, err := readState(n)
		if err != nil {
			return false, err.Error()
		}
		if d := diffState("first read", a, "second read", b); d != "" {
			return false, d
		}
		st = b
		return true, ""
	})
	return st, err
}

func contains(lines []string, l string) bool {
	for _, x := range lines {
		if x == l {
			return true
		}
	}
	return false
}
