//go:build linux

package linux

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// applySets adds or deletes one window of set members in one send. A
// member naming a network is not batched: AddSetEntry reads it back (see
// checkHeld), and only source ranges have such members, a few per Service.
func (s *Shim) applySets(ctx context.Context, win []model.Op, errs []error) {
	var enc setEncoder
	reqs := make([]request, 0, len(win))
	idx := make([]int, 0, len(win)) // win index of each request
	for i, c := range win {
		if err := checkMember(c.Entry); err != nil {
			errs[i] = setChangeError(c, err)
			continue
		}
		if c.Entry.Net().IsValid() {
			errs[i] = s.single(ctx, c)
			continue
		}
		reqs = append(reqs, enc.change(c.Kind == model.AddSetEntry, c.Entry))
		idx = append(idx, i)
	}
	if len(reqs) == 0 {
		return
	}
	rerrs := make([]error, len(reqs))
	s.mu.Lock()
	err := s.ipsets.run(ctx, "ipset batch", func(h ipsetHandle) error { return h.batch.exchange(reqs, rerrs) })
	s.mu.Unlock()
	for j, i := range idx {
		e := rerrs[j]
		if err != nil {
			e = err
		}
		if e != nil {
			errs[i] = setChangeError(win[i], ipsetErrno(e))
		}
	}
}

// single makes one change through its own method.
func (s *Shim) single(ctx context.Context, c model.Op) error {
	if c.Kind == model.AddSetEntry {
		return s.AddSetEntry(ctx, c.Entry)
	}
	return s.DeleteSetEntry(ctx, c.Entry)
}

// checkMember is what AddSetEntry and DeleteSetEntry check before sending.
func checkMember(e model.SetEntry) error {
	if err := dataplane.CheckSetEntry(e); err != nil {
		return err
	}
	if !shim.IsOurs(e.Set()) {
		return errors.New("not one of the shim's sets")
	}
	return nil
}

// ipsetErrno turns ipset's private errnos into the library's IPSetError,
// as its single calls do, so both paths' errors read alike.
func ipsetErrno(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) && errno >= nl.IPSET_ERR_PRIVATE {
		return nl.IPSetError(uintptr(errno))
	}
	return err
}

// setChangeError words a failed change as change (shim.go) does.
func setChangeError(c model.Op, err error) error {
	what, onExist := "add", dataplane.ErrExist
	if c.Kind == model.DeleteSetEntry {
		what, onExist = "delete", dataplane.ErrNotExist
	}
	switch {
	case errors.Is(err, nl.IPSetError(nl.IPSET_ERR_EXIST)):
		err = fmt.Errorf("%w: %w", onExist, err)
	case errors.Is(err, syscall.ENOENT):
		err = fmt.Errorf("set %s: %w: %w", c.Entry.Set(), dataplane.ErrNotExist, err)
	case isSetFull(err):
		err = fmt.Errorf("set %s: %w: %w", c.Entry.Set(), dataplane.ErrFull, err)
	}
	return fmt.Errorf("ipset %s %s: %w", what, c.Entry, err)
}

// ipsetErrHashFull is IPSET_ERR_HASH_FULL (ip_set_hash.h), the first of
// the hash types' own errnos: the set holds maxelem members. The netlink
// library knows it only as "errno 4352".
const ipsetErrHashFull = nl.IPSET_ERR_TYPE_SPECIFIC

// isSetFull tells whether the kernel refused a member because its set is
// full.
func isSetFull(err error) bool {
	return errors.Is(err, nl.IPSetError(ipsetErrHashFull))
}

// ipset's netlink protocol (include/uapi/linux/netfilter/ipset/ip_set.h).
const (
	ipsetProtocol   = 6
	ipsetCmdAdd     = 9
	ipsetCmdDel     = 10
	ipsetAttrProto  = 1 // IPSET_ATTR_PROTOCOL
	ipsetAttrName   = 2 // IPSET_ATTR_SETNAME
	ipsetAttrData   = 7 // IPSET_ATTR_DATA
	ipsetAttrIP     = 1
	ipsetAttrPort   = 4
	ipsetAttrL4     = 7 // IPSET_ATTR_PROTO
	ipsetAttrIP2    = 20
	ipsetAttrIPv4   = 1 // IPSET_ATTR_IPADDR_IPV4
	ipsetAttrIPv6   = 2 // IPSET_ATTR_IPADDR_IPV6
	nfnlSubsysIPSet = 6
)

type setEncoder struct{ a attrBuf }

// change encodes an exclusive add or delete of one member (the kernel
// answers IPSET_ERR_EXIST for a member that is there, or not there).
func (e *setEncoder) change(add bool, m model.SetEntry) request {
	return e.changeIn(m.Set(), add, m)
}

// changeIn is change of m's member in the set named set (a replacement
// being filled, see swapIn).
func (e *setEncoder) changeIn(set string, add bool, m model.SetEntry) request {
	if e.a.b == nil {
		e.a.b = make([]byte, 0, encodeBufSize)
	}
	start := len(e.a.b)
	// struct nfgenmsg: family, version, resource id (big endian).
	e.a.b = append(e.a.b, unix.AF_NETLINK, 0, 0, 0)
	e.a.u8(ipsetAttrProto, ipsetProtocol)
	e.a.str(ipsetAttrName, set)
	data := e.a.nest(ipsetAttrData)
	e.ip(ipsetAttrIP, m.Addr())
	if m.Proto() != 0 {
		e.a.u8(ipsetAttrL4, uint8(m.Proto()))
		e.a.be16(ipsetAttrPort|nlaNetByteOrder, m.Port())
		if m.Addr2().IsValid() {
			e.ip(ipsetAttrIP2, m.Addr2())
		}
		if n := m.Net(); n.IsValid() {
			e.ip(ipsetAttrIP2, n.Addr())
			e.a.u8(ipsetAttrCIDR2, uint8(n.Bits()))
		}
	}
	if mark := m.SkbMark(); mark != 0 {
		// The whole mark: IPVS finds a firewall-mark service by the
		// packet's mark as a whole.
		e.a.put(ipsetAttrSkbMark|nlaNetByteOrder, binary.BigEndian.AppendUint64(nil, uint64(mark)<<32|0xffffffff))
	}
	e.a.end(data)
	cmd := uint16(ipsetCmdDel)
	if add {
		cmd = ipsetCmdAdd
	}
	return request{typ: nfnlSubsysIPSet<<8 | cmd, flags: unix.NLM_F_EXCL, data: e.a.b[start:]}
}

// ip puts an address nested as ipset wants it.
func (e *setEncoder) ip(typ uint16, a netip.Addr) {
	at := e.a.nest(typ)
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		e.a.put(ipsetAttrIPv4|nlaNetByteOrder, b[:])
	} else {
		b := a.As16()
		e.a.put(ipsetAttrIPv6|nlaNetByteOrder, b[:])
	}
	e.a.end(at)
}
