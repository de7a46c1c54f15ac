package model

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// SetEntry is one member of one of the agent's ipsets. Which parts count
// depends on the set's type: hash:ip,port uses Addr, Proto and Port;
// hash:ip,port,ip adds Addr2; hash:ip,port,net adds Net. Unused parts are
// zero, so that entries compare with ==.
//
// It is held compact and without pointers: the agent keeps every member
// three times over (each Service's translation, the desired state, the
// observed cache), a large cluster has more than ten members per Service,
// and a map of values without pointers is not scanned by the garbage
// collector. Addresses are kept as 16 bytes and a
// family (ipset addresses have no zone), the set's name as a number
// (setNames), Addr2 and Net in one place (no set type has both).
type SetEntry struct {
	addr, addr2 [16]byte
	set         setName
	flags       entryFlags
	bits        uint8 // Net's prefix length
	proto       Protocol
	port        uint16
}

type entryFlags uint8

const (
	addrValid entryFlags = 1 << iota
	addrIs6
	addr2Valid
	addr2Is6
	addr2IsNet // addr2 and bits are Net
	// addr2IsMark: addr2's first four bytes are the packet mark a member
	// of a set made with skbinfo gives the packets it matches (ipset's
	// skbmark). Only hash:ip,port members carry one, so it shares addr2's
	// room. It is data of the member, not part of its key: the kernel
	// holds one member per address, protocol and port whatever its mark
	// (see Key).
	addr2IsMark
)

// NewSetEntry is a member of set: an address, with a protocol and port
// when proto is not zero.
func NewSetEntry(set string, addr netip.Addr, proto Protocol, port uint16) SetEntry {
	e := SetEntry{set: setNameOf(set), proto: proto, port: port}
	e.addr, e.flags = packAddr(addr, addrValid, addrIs6)
	return e
}

// WithAddr2 is e with a second address (hash:ip,port,ip).
func (e SetEntry) WithAddr2(a netip.Addr) SetEntry {
	var f entryFlags
	e.addr2, f = packAddr(a, addr2Valid, addr2Is6)
	e.flags = e.flags&^(addr2Valid|addr2Is6|addr2IsNet|addr2IsMark) | f
	e.bits = 0
	return e
}

// WithNet is e with a network (hash:ip,port,net); an invalid prefix is none.
func (e SetEntry) WithNet(p netip.Prefix) SetEntry {
	if !p.IsValid() {
		return e.WithAddr2(netip.Addr{})
	}
	e = e.WithAddr2(p.Addr())
	e.flags |= addr2IsNet
	e.bits = uint8(p.Bits())
	return e
}

// packAddr is a's 16 bytes and its flags: valid, and is6 for IPv6.
func packAddr(a netip.Addr, valid, is6 entryFlags) ([16]byte, entryFlags) {
	if !a.IsValid() {
		return [16]byte{}, 0
	}
	f := valid
	if a.Is6() {
		f |= is6
	}
	return a.As16(), f
}

// unpackAddr is packAddr undone.
func unpackAddr(b [16]byte, f, valid, is6 entryFlags) netip.Addr {
	switch {
	case f&valid == 0:
		return netip.Addr{}
	case f&is6 != 0:
		return netip.AddrFrom16(b)
	}
	return netip.AddrFrom4([4]byte(b[12:]))
}

// WithSkbMark is e, a member with no second address or net, with the
// packet mark its set gives matching packets (0: none).
func (e SetEntry) WithSkbMark(mark uint32) SetEntry {
	e = e.WithAddr2(netip.Addr{})
	if mark != 0 {
		binary.BigEndian.PutUint32(e.addr2[:4], mark)
		e.flags |= addr2IsMark
	}
	return e
}

// SkbMark is the member's packet mark, 0 when it has none.
func (e SetEntry) SkbMark() uint32 {
	if e.flags&addr2IsMark == 0 {
		return 0
	}
	return binary.BigEndian.Uint32(e.addr2[:4])
}

// Key is the member without its mark: what the kernel finds it by (an
// add of a member whose key is there fails, whatever the mark; a delete
// removes it whatever the mark).
func (e SetEntry) Key() SetEntry {
	if e.flags&addr2IsMark == 0 {
		return e
	}
	return e.WithSkbMark(0)
}

// Set is the name of the member's set.
func (e SetEntry) Set() string { return e.set.String() }

// Addr is the member's (first) address.
func (e SetEntry) Addr() netip.Addr { return unpackAddr(e.addr, e.flags, addrValid, addrIs6) }

// Proto is the member's protocol, zero in a hash:ip set.
func (e SetEntry) Proto() Protocol { return e.proto }

// Port is the member's port, zero in a hash:ip set.
func (e SetEntry) Port() uint16 { return e.port }

// Addr2 is the second address of a hash:ip,port,ip member; invalid otherwise.
func (e SetEntry) Addr2() netip.Addr {
	if e.flags&addr2IsNet != 0 {
		return netip.Addr{}
	}
	return unpackAddr(e.addr2, e.flags, addr2Valid, addr2Is6)
}

// Net is the network of a hash:ip,port,net member; invalid otherwise.
func (e SetEntry) Net() netip.Prefix {
	if e.flags&addr2IsNet == 0 {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(unpackAddr(e.addr2, e.flags, addr2Valid, addr2Is6), int(e.bits))
}

// Member renders the entry's member as `ipset add` takes it:
// "10.96.0.1,tcp:80", "10.244.0.5,tcp:8080,10.244.0.5", "192.0.2.1,tcp:80,10.0.0.0/8",
// "192.0.2.1,tcp:80 skbmark 0x1a2b0000".
func (e SetEntry) Member() string {
	var b strings.Builder
	b.WriteString(e.Addr().String())
	if e.proto != 0 {
		fmt.Fprintf(&b, ",%s:%d", strings.ToLower(e.proto.String()), e.port)
	}
	if a := e.Addr2(); a.IsValid() {
		b.WriteString("," + a.String())
	}
	if n := e.Net(); n.IsValid() {
		b.WriteString("," + n.String())
	}
	if m := e.SkbMark(); m != 0 {
		fmt.Fprintf(&b, " skbmark %#x", m)
	}
	return b.String()
}

// String renders "SET MEMBER", the line `ipset save` would print after "add".
func (e SetEntry) String() string { return e.Set() + " " + e.Member() }

// Compare orders entries by set, then address, protocol, port, second
// address and net (as netip orders addresses: IPv4 before IPv6).
func (e SetEntry) Compare(o SetEntry) int {
	// Field by field, stopping at the first that differs (cmp.Or would
	// compare every field first): a cold start sorts 130,000 members.
	if e.set != o.set {
		if c := strings.Compare(e.Set(), o.Set()); c != 0 {
			return c
		}
	}
	if c := comparePacked(e.addr, o.addr, e.flags, o.flags, addrValid, addrIs6); c != 0 {
		return c
	}
	if c := cmp.Compare(e.proto, o.proto); c != 0 {
		return c
	}
	if c := cmp.Compare(e.port, o.port); c != 0 {
		return c
	}
	// Neither, then a network (by address and prefix length), then a
	// second address: the order of comparing Addr2 and then Net.
	if c := cmp.Compare(e.secondRank(), o.secondRank()); c != 0 {
		return c
	}
	if c := comparePacked(e.addr2, o.addr2, e.flags, o.flags, addr2Valid, addr2Is6); c != 0 {
		return c
	}
	return cmp.Compare(e.bits, o.bits)
}

func (e SetEntry) secondRank() int {
	switch {
	case e.flags&addr2IsMark != 0:
		return 3 // compared by its bytes, the mark's, next
	case e.flags&addr2Valid == 0:
		return 0
	case e.flags&addr2IsNet != 0:
		return 1
	}
	return 2
}

// comparePacked orders two packed addresses as netip.Addr.Compare would:
// invalid, then IPv4, then IPv6, each by its bytes.
func comparePacked(a, b [16]byte, fa, fb, valid, is6 entryFlags) int {
	rank := func(f entryFlags) int {
		switch {
		case f&valid == 0:
			return 0
		case f&is6 == 0:
			return 1
		}
		return 2
	}
	if c := cmp.Compare(rank(fa), rank(fb)); c != 0 {
		return c
	}
	return bytes.Compare(a[:], b[:])
}

// setName is a set's name as a small number: an entry holds no string.
// Names are few (the shim's sets, per family) and never forgotten.
type setName uint16

// setNames are the names seen so far, in the order first seen; ids is
// the reverse. The table is replaced, never changed, when a name is added,
// so that reading a name takes no lock.
type setNameTable struct {
	names []string
	ids   map[string]setName
}

var (
	setNames   atomic.Pointer[setNameTable]
	setNamesMu sync.Mutex
)

// setNameOf is name's number, given one the first time it is seen.
func setNameOf(name string) setName {
	if t := setNames.Load(); t != nil {
		if id, ok := t.ids[name]; ok {
			return id
		}
	}
	setNamesMu.Lock()
	defer setNamesMu.Unlock()
	old := setNames.Load()
	if old == nil {
		old = &setNameTable{names: []string{""}, ids: map[string]setName{"": 0}}
	}
	if id, ok := old.ids[name]; ok {
		setNames.Store(old)
		return id
	}
	if len(old.names) > math.MaxUint16 {
		panic("model: more set names than a SetEntry can number")
	}
	t := &setNameTable{names: append(slices.Clip(old.names), name), ids: maps.Clone(old.ids)}
	t.ids[name] = setName(len(old.names))
	setNames.Store(t)
	return t.ids[name]
}

func (n setName) String() string {
	if n == 0 {
		return ""
	}
	return setNames.Load().names[n]
}

// SortedSetEntries lists the state's set entries in order.
func (s State) SortedSetEntries() []SetEntry {
	out := slices.Collect(maps.Keys(s.Sets))
	slices.SortFunc(out, SetEntry.Compare)
	return out
}
