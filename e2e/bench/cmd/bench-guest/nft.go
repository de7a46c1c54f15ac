package main

import (
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/protocol"
)

// kube-proxy's nftables mode keeps a Service's endpoints in its service
// chain, in the map of a `numgen random mod N` rule: "dnat ip addr . port
// to numgen random mod 10 map { 0 : 10.128.0.16 . 8080, ... }" (or, with
// session affinity, a vmap of "goto endpoint-...__10.128.0.16/8080"
// chains). The ClusterIP leads there through the service-ips map:
// "10.96.1.0 . tcp . 80 : goto service-HASH-default/bench-00000/tcp/http".
const nftTable = "kube-proxy"

var (
	reChain      = regexp.MustCompile(`(?m)^\s*chain (\S+) \{`)
	reServiceIPs = regexp.MustCompile(`(\d+\.\d+\.\d+\.\d+) \. tcp \. (\d+) : goto (\S+?)[,\s}]`)
	reMapIP      = regexp.MustCompile(`(\d+\.\d+\.\d+\.\d+) \. \d+|__(\d+\.\d+\.\d+\.\d+)/\d+`)
)

func nft(args ...string) (string, error) {
	out, err := exec.Command("nft", args...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return "", fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, ee.Stderr)
		}
		return "", fmt.Errorf("nft %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// parseServiceIPs maps each ClusterIP (TCP, protocol.Port) to its service chain.
func parseServiceIPs(listing string) map[netip.Addr]string {
	m := map[netip.Addr]string{}
	for _, g := range reServiceIPs.FindAllStringSubmatch(listing, -1) {
		if g[2] != fmt.Sprint(protocol.Port) {
			continue
		}
		if a, err := netip.ParseAddr(g[1]); err == nil {
			m[a] = g[3]
		}
	}
	return m
}

// numgenEndpoints is the endpoint set of the first numgen map in text.
func numgenEndpoints(text string) map[netip.Addr]bool {
	i := strings.Index(text, "numgen random mod")
	if i < 0 {
		return nil
	}
	text = text[i:]
	if j := strings.IndexByte(text, '}'); j >= 0 {
		text = text[:j]
	}
	eps := map[netip.Addr]bool{}
	for _, g := range reMapIP.FindAllStringSubmatch(text, -1) {
		s := g[1]
		if s == "" {
			s = g[2]
		}
		if a, err := netip.ParseAddr(s); err == nil {
			eps[a] = true
		}
	}
	return eps
}

// parseChains splits a table listing into chain name -> numgen endpoints.
func parseChains(listing string) map[string]map[netip.Addr]bool {
	m := map[string]map[netip.Addr]bool{}
	locs := reChain.FindAllStringSubmatchIndex(listing, -1)
	for k, loc := range locs {
		end := len(listing)
		if k+1 < len(locs) {
			end = locs[k+1][0]
		}
		name := listing[loc[2]:loc[3]]
		if eps := numgenEndpoints(listing[loc[1]:end]); eps != nil {
			m[name] = eps
		}
	}
	return m
}

func nftChangeSeen(eps map[netip.Addr]bool, ch protocol.Change) bool {
	return eps[netip.MustParseAddr(ch.Add)] && !eps[netip.MustParseAddr(ch.Del)]
}

// nftObserver reads kube-proxy's nftables table with the nft tool.
type nftObserver struct {
	vip    []netip.Addr
	eps    int
	chains map[netip.Addr]string // ClusterIP -> service chain, once known
}

func newNFTObserver(p protocol.Plan) *nftObserver {
	o := &nftObserver{eps: p.Endpoints}
	for _, s := range p.VIPs {
		o.vip = append(o.vip, netip.MustParseAddr(s))
	}
	return o
}

// full: every ClusterIP in service-ips, and each service chain's map holds
// all its endpoints. kube-proxy writes a sync as one nftables transaction,
// so the cheap check (the map) comes first and the whole table is read
// only once that passes.
func (o *nftObserver) full() (bool, error) {
	out, err := nft("list", "map", "ip", nftTable, "service-ips")
	if err != nil {
		return false, nil // the table or map does not exist yet
	}
	chains := parseServiceIPs(out)
	for _, v := range o.vip {
		if chains[v] == "" {
			return false, nil
		}
	}
	table, err := nft("list", "table", "ip", nftTable)
	if err != nil {
		return false, err
	}
	eps := parseChains(table)
	for _, v := range o.vip {
		if len(eps[chains[v]]) != o.eps {
			return false, nil
		}
	}
	o.chains = chains
	return true, nil
}

func (o *nftObserver) seen(ch protocol.Change) (bool, error) {
	chain := o.chains[netip.MustParseAddr(ch.VIP)]
	if chain == "" {
		return false, fmt.Errorf("no service chain known for %s", ch.VIP)
	}
	out, err := nft("list", "chain", "ip", nftTable, chain)
	if err != nil {
		return false, nil // a Service's chain is replaced, not edited: it may be missing for an instant
	}
	return nftChangeSeen(numgenEndpoints(out), ch), nil
}

func (o *nftObserver) seenAll(chs []protocol.Change) (int, error) {
	table, err := nft("list", "table", "ip", nftTable)
	if err != nil {
		return 0, err
	}
	eps := parseChains(table)
	n := 0
	for _, ch := range chs {
		if nftChangeSeen(eps[o.chains[netip.MustParseAddr(ch.VIP)]], ch) {
			n++
		}
	}
	return n, nil
}

func (o *nftObserver) close() {}
