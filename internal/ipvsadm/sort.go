package ipvsadm

import (
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/internal/ipvstable"
)

// ipvsadm sorts with qsort(3) and libipvs' comparators, which subtract
// unsigned 32-bit values and read the difference as a signed int. That
// wraps: 10.0.0.1 sorts after 192.168.0.1, because 0x0a000001-0xc0a80001
// is positive as an int. Such an order is not even transitive, so the
// result depends on the sorting algorithm too. To print the same lines in
// the same order we reproduce both: the comparators with their wrap, and
// glibc's qsort, which is a top-down merge sort (msort.c) for tables this
// size.

// diff32 is C's `int r = a - b` for two u32 values.
func diff32(a, b uint32) int { return int(int32(a - b)) }

// addrWords are the address's 32-bit words in host order (ntohl of each).
func addrWords(a netip.Addr) [4]uint32 {
	var w [4]uint32
	if a.Is4() {
		b := a.As4()
		w[0] = uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		return w
	}
	b := a.As16()
	for i := range w {
		w[i] = uint32(b[4*i])<<24 | uint32(b[4*i+1])<<16 | uint32(b[4*i+2])<<8 | uint32(b[4*i+3])
	}
	return w
}

// cmpAddr is libipvs' address comparison: word by word for IPv6, one word
// for IPv4 (af decides, as in C, not the address itself).
func cmpAddr(af uint16, a, b netip.Addr) int {
	wa, wb := addrWords(a), addrWords(b)
	if af != ipvstable.AFInet6 {
		return diff32(wa[0], wb[0])
	}
	r := 0
	for i := 0; r == 0 && i < 4; i++ {
		r = diff32(wa[i], wb[i])
	}
	return r
}

// cmpServices is ipvs_cmp_services: fwmark, family, protocol, address, port.
func cmpServices(a, b *ipvstable.Service) int {
	if r := diff32(a.FWMark, b.FWMark); r != 0 {
		return r
	}
	if r := int(a.AF) - int(b.AF); r != 0 {
		return r
	}
	if r := int(a.Protocol) - int(b.Protocol); r != 0 {
		return r
	}
	if r := cmpAddr(a.AF, a.Addr, b.Addr); r != 0 {
		return r
	}
	return int(a.Port) - int(b.Port)
}

// cmpDests is ipvs_cmp_dests: address (by the first one's family), port.
func cmpDests(a, b *ipvstable.Dest) int {
	if r := cmpAddr(a.AF, a.Addr, b.Addr); r != 0 {
		return r
	}
	return int(a.Port) - int(b.Port)
}

// msort sorts s the way glibc's msort_with_tmp does: split at n/2, sort
// both halves, merge taking from the left while cmp(left, right) <= 0.
func msort[T any](s []T, cmp func(a, b *T) int) {
	if len(s) <= 1 {
		return
	}
	tmp := make([]T, len(s))
	msortRec(s, tmp, cmp)
}

func msortRec[T any](s, tmp []T, cmp func(a, b *T) int) {
	n := len(s)
	if n <= 1 {
		return
	}
	n1 := n / 2
	left, right := s[:n1], s[n1:]
	msortRec(left, tmp[:n1], cmp)
	msortRec(right, tmp[n1:], cmp)
	i, j, k := 0, 0, 0
	for i < len(left) && j < len(right) {
		if cmp(&left[i], &right[j]) <= 0 {
			tmp[k] = left[i]
			i++
		} else {
			tmp[k] = right[j]
			j++
		}
		k++
	}
	k += copy(tmp[k:], left[i:])
	copy(tmp[k:], right[j:])
	copy(s, tmp[:n])
}
