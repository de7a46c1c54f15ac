package model

import "net/netip"

// Families are the address families the agent serves. Translation builds
// virtual servers only for them, the netfilter shim holds sets and rules
// only for them, and only their addresses are ever ours to delete.
type Families struct {
	IPv4, IPv6 bool
}

// Has tells whether addr's family is served (a v4-mapped address is IPv4).
func (f Families) Has(addr netip.Addr) bool {
	if addr.Unmap().Is4() {
		return f.IPv4
	}
	return f.IPv6
}

// String names the families served: "IPv4", "IPv6", "IPv4,IPv6" or "none".
func (f Families) String() string {
	switch {
	case f.IPv4 && f.IPv6:
		return "IPv4,IPv6"
	case f.IPv4:
		return "IPv4"
	case f.IPv6:
		return "IPv6"
	}
	return "none"
}
