package main

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

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

// nftObserver reads kube-proxy's nftables table over netlink: a Service's
// chain's rules, then the elements of the map its numgen rule looks up (two
// requests, a few milliseconds; the nft tool loads its whole cache first,
// which takes a good part of a second in the VM even at 100 Services). The
// whole-table check of the cold start uses the nft tool once, as a second
// opinion on the netlink reading.
type nftObserver struct {
	conn   *nftables.Conn
	table  *nftables.Table
	vip    []netip.Addr
	eps    int
	chains map[netip.Addr]string // ClusterIP -> service chain, once known
}

func newNFTObserver(p protocol.Plan) (*nftObserver, error) {
	c, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, fmt.Errorf("open nftables netlink: %w", err)
	}
	o := &nftObserver{conn: c, eps: p.Endpoints, table: &nftables.Table{Name: nftTable, Family: nftables.TableFamilyIPv4}}
	for _, s := range p.VIPs {
		o.vip = append(o.vip, netip.MustParseAddr(s))
	}
	return o, nil
}

// serviceChains reads the service-ips map: ClusterIP (TCP, protocol.Port)
// -> the chain it jumps to.
func (o *nftObserver) serviceChains() (map[netip.Addr]string, error) {
	elems, err := o.conn.GetSetElements(&nftables.Set{Name: "service-ips", Table: o.table})
	if err != nil {
		return nil, err
	}
	m := map[netip.Addr]string{}
	for _, e := range elems {
		// Key: ipv4_addr . inet_proto . inet_service, each padded to 4 bytes.
		if len(e.Key) < 12 || e.Key[4] != syscall.IPPROTO_TCP || binary.BigEndian.Uint16(e.Key[8:10]) != protocol.Port {
			continue
		}
		if chain := verdictChain(e.Val); chain != "" {
			m[netip.AddrFrom4([4]byte(e.Key[:4]))] = chain
		}
	}
	return m, nil
}

// endpoints of a service chain: the elements of its numgen rule's map
// (dnat to "ip . port" data, or a vmap of "goto endpoint-...__IP/PORT").
func (o *nftObserver) endpoints(chain string) (map[netip.Addr]bool, error) {
	rules, err := o.conn.GetRules(o.table, &nftables.Chain{Name: chain, Table: o.table})
	if err != nil {
		return nil, err
	}
	for _, r := range rules {
		set, vmap := numgenLookup(r.Exprs)
		if set == "" {
			continue
		}
		elems, err := o.conn.GetSetElements(&nftables.Set{Name: set, Table: o.table})
		if err != nil {
			return nil, err
		}
		eps := map[netip.Addr]bool{}
		for _, e := range elems {
			switch {
			case vmap:
				for a := range numgenEndpoints("numgen random mod 1 vmap { 0 : goto " + verdictChain(e.Val) + " }") {
					eps[a] = true
				}
			case len(e.Val) >= 4: // ipv4_addr . inet_service
				eps[netip.AddrFrom4([4]byte(e.Val[:4]))] = true
			}
		}
		return eps, nil
	}
	return nil, nil
}

// numgenLookup is the set a `numgen ... map/vmap` rule looks up ("" if
// none), and whether it maps to verdicts (a vmap: its lookup writes the
// verdict register, 0) rather than data.
func numgenLookup(exprs []expr.Any) (string, bool) {
	numgen := false
	for _, e := range exprs {
		switch x := e.(type) {
		case *expr.Numgen:
			numgen = true
		case *expr.Lookup:
			if numgen {
				return x.SetName, x.DestRegister == 0
			}
		}
	}
	return "", false
}

// verdictChain is the chain of a "goto/jump CHAIN" element value as the
// kernel sends it (nested attributes: the verdict code, the chain name);
// the library leaves it raw when it does not know the set's data type.
func verdictChain(val []byte) string {
	ad, err := netlink.NewAttributeDecoder(val)
	if err != nil {
		return ""
	}
	chain := ""
	for ad.Next() {
		if ad.Type() == unix.NFTA_VERDICT_CHAIN {
			chain = ad.String()
		}
	}
	if ad.Err() != nil {
		return ""
	}
	return chain
}

// full: every ClusterIP in service-ips and the first and last Service's
// chains holding all their endpoints, read over netlink (the time is taken
// there). kube-proxy writes a sync as one nftables transaction, so that is
// the whole table; the nft tool then confirms it, every chain, untimed.
func (o *nftObserver) full() (bool, time.Time, error) {
	chains, err := o.serviceChains()
	if err != nil {
		return false, time.Now(), nil // no table or map yet
	}
	for _, v := range o.vip {
		if chains[v] == "" {
			return false, time.Now(), nil
		}
	}
	for _, v := range []netip.Addr{o.vip[0], o.vip[len(o.vip)-1]} {
		eps, err := o.endpoints(chains[v])
		if err != nil || len(eps) != o.eps {
			return false, time.Now(), nil
		}
	}
	at := time.Now()
	table, err := nft("list", "table", "ip", nftTable)
	if err != nil {
		return false, at, err
	}
	eps := parseChains(table)
	for _, v := range o.vip {
		if len(eps[chains[v]]) != o.eps {
			return false, at, nil
		}
	}
	o.chains = chains
	return true, at, nil
}

func (o *nftObserver) seen(ch protocol.Change) (bool, error) {
	chain := o.chains[netip.MustParseAddr(ch.VIP)]
	if chain == "" {
		return false, fmt.Errorf("no service chain known for %s", ch.VIP)
	}
	eps, err := o.endpoints(chain)
	if err != nil {
		return false, nil // a chain being rewritten may be missing for an instant
	}
	return nftChangeSeen(eps, ch), nil
}

func (o *nftObserver) seenAll(chs []protocol.Change) (int, error) {
	n := 0
	for _, ch := range chs {
		ok, err := o.seen(ch)
		if err != nil {
			return 0, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

func (o *nftObserver) close() { o.conn.CloseLasting() }

func (o *nftObserver) notFull() string { return "not every Service's chain holds its endpoints" }
