package model

import (
	"fmt"
	"strconv"
	"strings"
)

// PortRange is an inclusive range of ports (the NodePort range).
type PortRange struct{ First, Last uint16 }

// Contains tells whether p is in the range.
func (r PortRange) Contains(p uint16) bool { return p >= r.First && p <= r.Last }

func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// ParsePortRange reads "30000-32767": two decimal ports and nothing else.
// The range decides which virtual servers on node addresses are ours, so a
// value with anything after it ("30000-32767xyz", which a scanf-style read
// took for 30000-32767) is refused rather than guessed at.
func ParsePortRange(s string) (PortRange, error) {
	bad := fmt.Errorf("want FIRST-LAST with 0 < FIRST <= LAST <= 65535, got %q", s)
	first, last, ok := strings.Cut(s, "-")
	if !ok {
		return PortRange{}, bad
	}
	f, err1 := parsePort(first)
	l, err2 := parsePort(last)
	if err1 != nil || err2 != nil || f == 0 || f > l {
		return PortRange{}, bad
	}
	return PortRange{First: f, Last: l}, nil
}

// parsePort reads a decimal port: digits only (no sign, no spaces).
func parsePort(s string) (uint16, error) {
	if s == "" || strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return 0, fmt.Errorf("%q is not a port number", s)
	}
	n, err := strconv.ParseUint(s, 10, 16)
	return uint16(n), err
}
