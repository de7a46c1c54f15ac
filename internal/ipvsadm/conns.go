package ipvsadm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/internal/ipvstable"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// ConnFile is where the kernel lists IPVS connections; ipvsadm -c reads it
// rather than netlink, and so do we.
const ConnFile = "/proc/net/ip_vs_conn"

// errConnInput is ipvsadm's complaint about an empty connection file.
var errConnInput = errors.New("unexpected input from " + ConnFile)

// RenderConns is `ipvsadm -L -c`: the kernel's connection table (the text
// of ConnFile, whose first line is a header) reformatted. With
// f.PersistentConn the persistence engine's name and data are shown too.
func RenderConns(f Format, proc []byte, names Names) (string, error) {
	p := newPrinter(f, names)
	sc := bufio.NewScanner(bytes.NewReader(proc))
	if !sc.Scan() {
		return "", errConnInput
	}
	p.printf("IPVS connection entries\n")
	if f.PersistentConn {
		p.printf("pro expire %-11s %-18s %-18s %-18s %-16s %s\n",
			"state", "source", "virtual", "destination", "pe name", "pe_data")
	} else {
		p.printf("pro expire %-11s %-18s %-18s %s\n",
			"state", "source", "virtual", "destination")
	}
	for sc.Scan() {
		if err := p.conn(sc.Text()); err != nil {
			return p.b.String(), err
		}
	}
	return p.b.String(), sc.Err()
}

// conn is print_conn for one line of ConnFile:
// "TCP 0A000001 8F6A 0A000002 0050 0A000003 1F90 ESTABLISHED     899[ pe data]"
// with addresses as 8 hex digits (IPv4) or full IPv6 text.
func (p *printer) conn(line string) error {
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return fmt.Errorf("unexpected input from %s", ConnFile)
	}
	get := func(i int) string {
		if i < len(fields) {
			return fields[i]
		}
		return ""
	}
	protocol := get(0)
	proto := map[string]model.Protocol{"TCP": model.TCP, "UDP": model.UDP, "SCTP": model.SCTP}[protocol]

	caddr, af := procAddr(get(1))
	vaddr, _ := procAddr(get(3))
	daddr, daf := procAddr(get(5))
	if af == ipvstable.AFInet { // the virtual address shares the client's family
		vaddr = hexAddr(get(3))
	}
	cport, vport, dport := hexPort(get(2)), hexPort(get(4)), hexPort(get(6))
	expires, _ := strconv.ParseInt(get(8), 10, 32)
	exp := uint32(expires)
	expire := fmt.Sprintf("%02d:%02d", exp/60, exp%60)

	cname := p.addrPort(af, caddr, cport, proto)
	vname := p.addrPort(af, vaddr, vport, proto)
	dname := p.addrPort(daf, daddr, dport, proto)
	if p.f.PersistentConn && len(fields) >= 11 {
		p.printf("%-3s %-6s %-11s %-18s %-18s %-16s %-18s %s\n",
			protocol, expire, get(7), cname, vname, dname, get(9), get(10))
		return nil
	}
	p.printf("%-3s %-6s %-11s %-18s %-18s %s\n",
		protocol, expire, get(7), cname, vname, dname)
	return nil
}

// procAddr reads an address of ConnFile: IPv6 text, or IPv4 as 8 hex digits.
func procAddr(s string) (netip.Addr, uint16) {
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Is6() {
			return a, ipvstable.AFInet6
		}
		return a, ipvstable.AFInet
	}
	return hexAddr(s), ipvstable.AFInet
}

func hexAddr(s string) netip.Addr {
	if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
		return a
	}
	v, _ := strconv.ParseUint(s, 16, 32)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func hexPort(s string) uint16 {
	v, _ := strconv.ParseUint(s, 16, 16)
	return uint16(v)
}
