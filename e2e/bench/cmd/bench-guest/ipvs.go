package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/ipvs"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/protocol"
)

// ipvsTable is the IPVS table as the kernel shows it: virtual server
// address (TCP, protocol.Port) -> real server address -> weight.
type ipvsTable map[netip.Addr]map[netip.Addr]int

// procIPVSPath is the IPVS table of the calling thread's network namespace.
// Not /proc/net/ip_vs: that is /proc/self/net, the namespace of the
// process's first thread, which may be one of the pod dialer's threads
// (moved into the pod's namespace, where the table is empty).
const procIPVSPath = "/proc/thread-self/net/ip_vs"

// readProcIPVS reads the IPVS table from /proc: the whole table in one
// read, however large, with no netlink dump to page through.
func readProcIPVS() (ipvsTable, error) {
	f, err := os.Open(procIPVSPath)
	if err != nil {
		return nil, fmt.Errorf("read the IPVS table: %w", err)
	}
	defer f.Close()
	return parseProcIPVS(bufio.NewScanner(f))
}

// parseProcIPVS: "TCP  0A600100:0050 rr" opens a virtual server,
// "  -> 0A800000:1F90      Masq    1      0          0" is one of its reals.
func parseProcIPVS(sc *bufio.Scanner) (ipvsTable, error) {
	t := ipvsTable{}
	var cur map[netip.Addr]int
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 2 && (f[0] == "TCP" || f[0] == "UDP" || f[0] == "SCTP"):
			cur = nil
			a, port, err := hexAddrPort(f[1])
			if err != nil || f[0] != "TCP" || port != protocol.Port {
				continue
			}
			cur = map[netip.Addr]int{}
			t[a] = cur
		case len(f) >= 4 && f[0] == "->" && cur != nil:
			a, _, err := hexAddrPort(f[1])
			if err != nil {
				continue // the header line
			}
			w, err := strconv.Atoi(f[3])
			if err != nil {
				return nil, fmt.Errorf("weight in %q: %w", sc.Text(), err)
			}
			cur[a] = w
		}
	}
	return t, sc.Err()
}

// hexAddrPort parses "0A600100:0050" (IPv4 only: the bench is IPv4).
func hexAddrPort(s string) (netip.Addr, int, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok || len(h) != 8 {
		return netip.Addr{}, 0, fmt.Errorf("not an IPv4 hex address: %q", s)
	}
	b, err := hex.DecodeString(h)
	if err != nil {
		return netip.Addr{}, 0, err
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.Addr{}, 0, err
	}
	return netip.AddrFrom4([4]byte(b)), int(port), nil
}

// changeSeen: the new endpoint takes traffic, the old one takes no new
// connections (gone, or weight 0 while it drains).
func changeSeen(reals map[netip.Addr]int, ch protocol.Change) bool {
	add, del := netip.MustParseAddr(ch.Add), netip.MustParseAddr(ch.Del)
	return reals[add] > 0 && reals[del] == 0
}

// ipvsObserver reads the IPVS table: all of it from /proc for the cold
// start and the burst, one virtual server over netlink for single changes.
type ipvsObserver struct {
	h       *ipvs.Handle
	vip     []netip.Addr
	eps     int
	missing string // what the last full() found not whole
}

func newIPVSObserver(p protocol.Plan) (*ipvsObserver, error) {
	h, err := ipvs.New("")
	if err != nil {
		return nil, fmt.Errorf("open IPVS netlink: %w", err)
	}
	o := &ipvsObserver{h: h, eps: p.Endpoints}
	for _, s := range p.VIPs {
		o.vip = append(o.vip, netip.MustParseAddr(s))
	}
	return o, nil
}

func (o *ipvsObserver) full() (bool, time.Time, error) {
	t, err := readProcIPVS()
	at := time.Now()
	if err != nil {
		return false, at, err
	}
	o.missing = notWhole(t, o.vip, o.eps)
	return o.missing == "", at, nil
}

// notWhole says which virtual servers lack exactly eps live real servers:
// how many, and the first with its reals and weights ("" when none).
func notWhole(t ipvsTable, vips []netip.Addr, eps int) string {
	n, first := 0, ""
	for _, v := range vips {
		live := 0
		for _, w := range t[v] {
			if w > 0 {
				live++
			}
		}
		if live == eps {
			continue
		}
		if n == 0 {
			first = fmt.Sprintf("%s: %d live of %d real servers", v, live, len(t[v]))
			if _, ok := t[v]; !ok {
				first = fmt.Sprintf("%s: no virtual server", v)
			}
		}
		n++
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d virtual servers without %d live real servers (%s)", n, eps, first)
}

func (o *ipvsObserver) notFull() string { return o.missing }

func (o *ipvsObserver) seen(ch protocol.Change) (bool, error) {
	dests, err := o.h.GetDestinations(&ipvs.Service{
		AddressFamily: syscall.AF_INET, Protocol: syscall.IPPROTO_TCP,
		Address: net.ParseIP(ch.VIP), Port: protocol.Port,
	})
	if err != nil {
		// No such virtual server (yet, or any more): not seen.
		return false, nil
	}
	reals := map[netip.Addr]int{}
	for _, d := range dests {
		if a, ok := netip.AddrFromSlice(d.Address.To4()); ok {
			reals[a] = d.Weight
		}
	}
	return changeSeen(reals, ch), nil
}

func (o *ipvsObserver) seenAll(chs []protocol.Change) (int, error) {
	t, err := readProcIPVS()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, ch := range chs {
		if changeSeen(t[netip.MustParseAddr(ch.VIP)], ch) {
			n++
		}
	}
	return n, nil
}

func (o *ipvsObserver) close() { o.h.Close() }
