package main

import (
	"bufio"
	"fmt"
	"os/exec"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/protocol"
	"github.com/kube-ipvs/kube-ipvs/e2e/bench/result"
)

// What "every Service serves" asks of the kernel beyond the IPVS table (or
// kube-proxy's nftables table), per tool: with IPVS no ClusterIP takes a
// connection before its address is local (bound on kube-ipvs0), and the
// netfilter side (sets and the rules that match them) decides masquerade,
// hairpin and filtering.

// ipvsLink is the link both IPVS tools bind ClusterIPs to.
const ipvsLink = "kube-ipvs0"

// linkAddrs is the IPv4 addresses on a link and the IPv4 local routes
// through it (kube-ipvs --vip-binding=local-route binds VIPs so): the
// addresses local by it (an empty set if there is no link).
func linkAddrs(link string) (map[string]bool, error) {
	out, err := exec.Command("ip", "-4", "-o", "addr", "show", "dev", link).Output()
	if err != nil {
		return map[string]bool{}, nil // no link yet
	}
	m := parseAddrs(string(out))
	routes, err := exec.Command("ip", "-4", "route", "show", "table", "local", "dev", link).Output()
	if err != nil {
		return m, nil // the link went meanwhile: its addresses went too
	}
	for a := range parseLocalRoutes(string(routes)) {
		m[a] = true
	}
	return m, nil
}

// parseLocalRoutes reads `ip route show table local dev LINK` lines:
// "local 10.96.1.0 proto 243 scope host".
func parseLocalRoutes(out string) map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "local" {
			m[f[1]] = true
		}
	}
	return m
}

// parseAddrs reads `ip -o addr` lines: "7: kube-ipvs0    inet 10.96.1.0/32 scope global kube-ipvs0 ...".
func parseAddrs(out string) map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "inet" {
				a, _, _ := strings.Cut(f[i+1], "/")
				m[a] = true
			}
		}
	}
	return m
}

// ipsetMembers is every set's members as `ipset save` prints them
// ("add SET MEMBER"), set name -> members.
func ipsetMembers() (map[string]map[string]bool, error) {
	out, err := exec.Command("ipset", "save").Output()
	if err != nil {
		return nil, fmt.Errorf("ipset save: %w", err)
	}
	return parseIPSetSave(string(out)), nil
}

func parseIPSetSave(out string) map[string]map[string]bool {
	m := map[string]map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[0] != "add" {
			continue
		}
		if m[f[1]] == nil {
			m[f[1]] = map[string]bool{}
		}
		m[f[1]][f[2]] = true
	}
	return m
}

// natRules is `iptables-save -t nat` (the VM has the nft backend only).
func natRules() (string, error) {
	out, err := exec.Command("iptables-save", "-t", "nat").Output()
	if err != nil {
		return "", fmt.Errorf("iptables-save: %w", err)
	}
	return string(out), nil
}

// netfilterWant is what one tool's sets and nat rules must hold once
// every Service serves.
type netfilterWant struct {
	// sets: set -> members (as ipset save prints them).
	sets map[string][]string
	// jumps: rules the nat table must hold, as iptables-save prints them.
	jumps []string
}

// wantNetfilter: kube-ipvs's shim (its sets and chains, KUBE-IPVS-*) or
// kube-proxy's IPVS mode (KUBE-CLUSTER-IP, KUBE-LOOP-BACK; kube-proxy's
// proxier/ipvs syncProxyRules). Every ClusterIP frontend, and a hairpin
// member for each endpoint on this node. nftables mode: nothing beyond its
// table (its sync is one transaction).
func wantNetfilter(tool string, p protocol.Plan) netfilterWant {
	var clusterIP, vips, loop []string
	for _, v := range p.VIPs {
		clusterIP = append(clusterIP, fmt.Sprintf("%s,tcp:%d", v, protocol.Port))
		vips = append(vips, v)
	}
	for _, ep := range p.Local {
		loop = append(loop, fmt.Sprintf("%s,tcp:%d,%s", ep, protocol.TargetPort, ep))
	}
	switch tool {
	case result.KubeIPVS:
		return netfilterWant{
			sets: map[string][]string{
				"KUBE-IPVS-CLUSTER-IP": clusterIP, "KUBE-IPVS-FRONTENDS": clusterIP,
				"KUBE-IPVS-VIPS": vips, "KUBE-IPVS-LOOP-BACK": loop,
			},
			jumps: []string{"-A PREROUTING -j KUBE-IPVS-SERVICES", "-A OUTPUT -j KUBE-IPVS-SERVICES", "-A POSTROUTING -j KUBE-IPVS-POSTROUTING"},
		}
	case result.KubeProxyIPVS:
		return netfilterWant{
			sets:  map[string][]string{"KUBE-CLUSTER-IP": clusterIP, "KUBE-LOOP-BACK": loop},
			jumps: []string{"-j KUBE-SERVICES", "-j KUBE-POSTROUTING"},
		}
	}
	return netfilterWant{}
}

// missing is what of w the kernel lacks ("" when nothing): the first
// absent member of each set, with the count, and any absent rule.
func (w netfilterWant) missing(sets map[string]map[string]bool, nat string) string {
	var out []string
	for name, members := range w.sets {
		n, first := 0, ""
		for _, m := range members {
			if !sets[name][m] {
				if n == 0 {
					first = m
				}
				n++
			}
		}
		if n > 0 {
			out = append(out, fmt.Sprintf("%s lacks %d (%s)", name, n, first))
		}
	}
	for _, j := range w.jumps {
		if !strings.Contains(nat, j) {
			out = append(out, fmt.Sprintf("no nat rule %q", j))
		}
	}
	return strings.Join(out, "; ")
}

func (w netfilterWant) empty() bool { return len(w.sets) == 0 && len(w.jumps) == 0 }

// netfilterReady reads the sets and nat rules and says what is missing.
func netfilterReady(w netfilterWant) (string, error) {
	if w.empty() {
		return "", nil
	}
	sets, err := ipsetMembers()
	if err != nil {
		return "", err
	}
	nat, err := natRules()
	if err != nil {
		return "", err
	}
	return w.missing(sets, nat), nil
}

// addrsMissing: the ClusterIPs not bound on kube-ipvs0, as a count and the
// first ("" when all are).
func addrsMissing(vips []string) (string, error) {
	have, err := linkAddrs(ipvsLink)
	if err != nil {
		return "", err
	}
	n, first := 0, ""
	for _, v := range vips {
		if !have[v] {
			if n == 0 {
				first = v
			}
			n++
		}
	}
	if n == 0 {
		return "", nil
	}
	return fmt.Sprintf("%d ClusterIPs not on %s (%s)", n, ipvsLink, first), nil
}
