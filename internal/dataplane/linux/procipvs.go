//go:build linux

package linux

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// procIPVSPath is where the kernel lists every virtual server with its real
// servers, in one read. A full read of the table used to ask for each virtual
// server's destinations with a netlink dump of its own: at 10,000 virtual
// servers, 10,000 round trips, and most of a full resync's tens of seconds in
// the VM. The file shows everything the agent keeps of a real server
// (address, port, forwarding method, weight and the connection counters); a
// virtual server's own settings are not all in it (an IPv6 service's flags,
// the netmask), so those still come from the netlink dump of services.
var procIPVSPath = "/proc/net/ip_vs"

// realRead is one real server line of the file.
type realRead struct {
	rs model.RealServer
	c  model.Conns
}

// procList is one virtual server's real servers as the file lists them.
type procList struct{ reals []realRead }

// procTable is the file's real servers by virtual server. A fwmark line does
// not say its family, so marks are kept apart and one listed twice (an IPv4
// and an IPv6 service with the same mark) is not used at all.
type procTable struct {
	byKey  map[model.VSKey]*procList // protocol/address/port services
	byMark map[uint32]*procList
	twice  map[uint32]bool // marks listed more than once
	count  int             // real server lines kept
}

// reals are the real servers the file lists for k; ok is false when the file
// does not list k (created after it was read, or a line it could not tell
// apart), so that the caller asks the kernel over netlink instead.
func (t *procTable) reals(k model.VSKey) ([]realRead, bool) {
	if t == nil {
		return nil, false
	}
	if k.FWMark == 0 {
		l, ok := t.byKey[k]
		if !ok {
			return nil, false
		}
		return l.reals, true
	}
	l, ok := t.byMark[k.FWMark]
	if !ok || t.twice[k.FWMark] {
		return nil, false
	}
	for _, r := range l.reals {
		if r.rs.Addr.Addr().Is6() != k.IsIPv6() {
			return nil, false
		}
	}
	return l.reals, true
}

// readProcIPVS reads the file; nil (not an error) when it cannot be read or
// parsed: every service is then read over netlink, as before.
func readProcIPVS() *procTable {
	f, err := os.Open(procIPVSPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	t, err := parseProcIPVS(f)
	if err != nil {
		return nil
	}
	return t
}

// parseProcIPVS parses the kernel's listing (ip_vs_info_seq_show): three
// header lines, then each virtual server's line followed by its real
// servers' lines ("  -> ADDR:PORT FORWARD WEIGHT ACTIVE INACTIVE").
func parseProcIPVS(r io.Reader) (*procTable, error) {
	t := &procTable{byKey: map[model.VSKey]*procList{}, byMark: map[uint32]*procList{}, twice: map[uint32]bool{}}
	sc := bufio.NewScanner(r)
	// A large buffer: the kernel fills what a read offers, so fewer reads.
	sc.Buffer(make([]byte, 256<<10), 256<<10)
	var cur *procList // the virtual server the next real servers belong to
	skip := false     // the current virtual server's line is one the agent cannot key
	var buf [8]string
	for n := 1; sc.Scan(); n++ {
		if n <= 3 {
			continue // the version line and the two column headers
		}
		fs := fields(sc.Text(), buf[:0])
		if len(fs) > 0 && fs[0] == "->" {
			if skip {
				continue
			}
			if cur == nil {
				return nil, fmt.Errorf("line %d: a real server before any virtual server", n)
			}
			pr, err := parseProcReal(fs)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			cur.reals = append(cur.reals, pr)
			t.count++
			continue
		}
		var err error
		if cur, skip, err = t.open(fs); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return t, nil
}

// open starts a virtual server's list from its line. skip is true for a
// protocol the agent does not use (its real servers are then not kept, and
// such a service is read over netlink).
func (t *procTable) open(fs []string) (l *procList, skip bool, err error) {
	if len(fs) < 3 {
		return nil, false, fmt.Errorf("not a virtual server line: %q", strings.Join(fs, " "))
	}
	if fs[0] == "FWM" {
		mark, err := strconv.ParseUint(fs[1], 16, 32)
		if err != nil {
			return nil, false, fmt.Errorf("firewall mark %q: %w", fs[1], err)
		}
		m := uint32(mark)
		if _, seen := t.byMark[m]; seen {
			t.twice[m] = true
		}
		l = &procList{}
		t.byMark[m] = l
		return l, false, nil
	}
	proto, known := procProtocols[fs[0]]
	if !known {
		return nil, true, nil
	}
	ap, err := parseProcAddrPort(fs[1])
	if err != nil {
		return nil, false, err
	}
	l = &procList{}
	t.byKey[model.NewVSKey(proto, ap.Addr(), ap.Port())] = l
	return l, false, nil
}

// procProtocols are the names ip_vs_proto_name gives the protocols the agent
// programs.
var procProtocols = map[string]model.Protocol{"TCP": model.TCP, "UDP": model.UDP, "SCTP": model.SCTP}

// procForwarding are ip_vs_fwd_name's names (any other method prints Masq).
var procForwarding = map[string]model.Forwarding{"Masq": model.Masq, "Local": model.Local, "Tunnel": model.Tunnel, "Route": model.Route}

// parseProcReal parses "-> ADDR:PORT FORWARD WEIGHT ACTIVE INACTIVE".
func parseProcReal(fs []string) (realRead, error) {
	if len(fs) != 6 {
		return realRead{}, fmt.Errorf("real server line with %d fields", len(fs))
	}
	ap, err := parseProcAddrPort(fs[1])
	if err != nil {
		return realRead{}, err
	}
	fwd, ok := procForwarding[fs[2]]
	if !ok {
		return realRead{}, fmt.Errorf("forwarding method %q", fs[2])
	}
	var n [3]int64
	for i, s := range fs[3:] {
		if n[i], err = strconv.ParseInt(s, 10, 32); err != nil {
			return realRead{}, fmt.Errorf("real server %s: %w", ap, err)
		}
	}
	return realRead{
		rs: model.RealServer{Addr: ap, Forward: fwd, Weight: int(n[0])},
		c:  model.Conns{Active: clampU32(int(n[1])), Inactive: clampU32(int(n[2]))},
	}, nil
}

// parseProcAddrPort parses "0A600001:01BB" (IPv4 in hex) or
// "[fd00:0000:...]:01BB" (IPv6 as %pI6 prints it).
func parseProcAddrPort(s string) (netip.AddrPort, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return netip.AddrPort{}, fmt.Errorf("address %q without a port", s)
	}
	port, err := strconv.ParseUint(s[i+1:], 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: port: %w", s, err)
	}
	host := s[:i]
	var addr netip.Addr
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		addr, err = netip.ParseAddr(host[1 : len(host)-1])
		if err == nil && !addr.Is6() {
			err = fmt.Errorf("not IPv6")
		}
	} else {
		var v uint64
		v, err = strconv.ParseUint(host, 16, 32)
		addr = netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: %w", s, err)
	}
	return netip.AddrPortFrom(addr, uint16(port)), nil
}

// fields splits s at runs of spaces into dst, without allocating while dst
// has room: the file has a line per real server, 110,000 at 10k Services.
func fields(s string, dst []string) []string {
	for {
		s = strings.TrimLeft(s, " ")
		if s == "" {
			return dst
		}
		i := strings.IndexByte(s, ' ')
		if i < 0 {
			return append(dst, s)
		}
		dst = append(dst, s[:i])
		s = s[i:]
	}
}
