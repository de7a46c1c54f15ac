package plan

import (
	"maps"
	"net/netip"
	"slices"
)

// Reserved are the addresses no Service may claim as a VIP: this node's
// own, every Node's status.addresses, the API server's, and the pod CIDRs.
// Any namespace can write an external IP (and a load-balancer controller
// an ingress IP); bound on the agent's link such an address would be
// guarded like a VIP, and every connection to it but the Service's ports
// rejected: sshd, the kubelet, the API server cut off, here and on every
// other node. kube-proxy never binds an address that is already local;
// this goes further, as the other nodes' and the API server's addresses
// are no less someone else's.
type Reserved struct {
	addrs    map[netip.Addr]struct{}
	prefixes []netip.Prefix
}

// NewReserved reserves addrs and every address inside prefixes.
func NewReserved(addrs []netip.Addr, prefixes []netip.Prefix) Reserved {
	r := Reserved{addrs: make(map[netip.Addr]struct{}, len(addrs))}
	for _, a := range addrs {
		if a.IsValid() {
			r.addrs[a.Unmap()] = struct{}{}
		}
	}
	for _, p := range prefixes {
		if p.IsValid() {
			r.prefixes = append(r.prefixes, p.Masked())
		}
	}
	slices.SortFunc(r.prefixes, netip.Prefix.Compare)
	r.prefixes = slices.Compact(r.prefixes)
	return r
}

// Has tells whether a is reserved.
func (r Reserved) Has(a netip.Addr) bool {
	a = a.Unmap()
	if _, ok := r.addrs[a]; ok {
		return true
	}
	for _, p := range r.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Empty tells whether nothing is reserved.
func (r Reserved) Empty() bool { return len(r.addrs) == 0 && len(r.prefixes) == 0 }

// Equal tells whether r and o reserve the same addresses, as listed.
func (r Reserved) Equal(o Reserved) bool {
	return maps.Equal(r.addrs, o.addrs) && slices.Equal(r.prefixes, o.prefixes)
}
