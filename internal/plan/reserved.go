package plan

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Reserved are the addresses no Service may claim as a VIP: every Node's
// status.addresses, the API server's, the pod and cluster CIDRs, and this
// host's own interface addresses. Any namespace can write an external IP
// (and a load-balancer controller an ingress IP); bound on the agent's
// link such an address would be guarded like a VIP, and every connection
// to it but the Service's ports rejected: sshd, the kubelet, the API
// server cut off, here and on every other node. kube-proxy never binds an
// address that is already local; this goes further, as the other nodes'
// and the API server's addresses are no less someone else's.
//
// Two tiers: the addresses above but this host's refuse every frontend
// (but a NodePort's, see Owner.claimsReserved); an address only on this
// host's interfaces (a load-balancer IP kube-vip or keepalived put there)
// is never bound nor guarded either, yet the load-balancer frontends named
// by WithUnbound are served on it unbound, as kube-proxy serves them. A
// Service's ClusterIP (the allocator's) is never reserved (WithExempt).
type Reserved struct {
	addrs    map[netip.Addr]struct{}
	prefixes []netip.Prefix
	// hostOnly are this host's interface addresses in neither of the above.
	hostOnly map[netip.Addr]struct{}
	// exempt are never reserved; unbound are the frontends on a hostOnly
	// address served without their address bound.
	exempt  map[netip.Addr]struct{}
	unbound map[model.VSKey]struct{}
}

// NewReserved reserves addrs and every address inside prefixes, for every
// frontend.
func NewReserved(addrs []netip.Addr, prefixes []netip.Prefix) Reserved {
	r := Reserved{addrs: addrSet(addrs)}
	for _, p := range prefixes {
		if p.IsValid() {
			r.prefixes = append(r.prefixes, p.Masked())
		}
	}
	slices.SortFunc(r.prefixes, netip.Prefix.Compare)
	r.prefixes = slices.Compact(r.prefixes)
	return r
}

// WithHostOnly is r that also reserves addrs (this host's interface
// addresses) against binding and guarding, the frontends WithUnbound
// names served there all the same.
func (r Reserved) WithHostOnly(addrs []netip.Addr) Reserved {
	r.hostOnly = addrSet(slices.DeleteFunc(slices.Clone(addrs), r.refusesAll))
	return r
}

// WithExempt is r reserving none of addrs.
func (r Reserved) WithExempt(addrs []netip.Addr) Reserved {
	r.exempt = addrSet(addrs)
	return r
}

// WithUnbound is r serving frontends, where they are on a host-only
// address, without binding or guarding their address.
func (r Reserved) WithUnbound(frontends []model.VSKey) Reserved {
	r.unbound = make(map[model.VSKey]struct{}, len(frontends))
	for _, k := range frontends {
		r.unbound[k] = struct{}{}
	}
	return r
}

func addrSet(addrs []netip.Addr) map[netip.Addr]struct{} {
	out := make(map[netip.Addr]struct{}, len(addrs))
	for _, a := range addrs {
		if a.IsValid() {
			out[a.Unmap()] = struct{}{}
		}
	}
	return out
}

// Has tells whether a is reserved: never bound on our link nor guarded
// as a VIP.
func (r Reserved) Has(a netip.Addr) bool {
	a = a.Unmap()
	if _, ok := r.exempt[a]; ok {
		return false
	}
	_, host := r.hostOnly[a]
	return host || r.refusesAll(a)
}

// Refuses tells whether frontend k's address is reserved for it: any
// reserved address, but a host-only one for the frontends served there
// unbound.
func (r Reserved) Refuses(k model.VSKey) bool {
	if !r.Has(k.Addr) {
		return false
	}
	_, unbound := r.unbound[k]
	return !unbound || r.refusesAll(k.Addr.Unmap())
}

// refusesAll tells whether a is in the tier reserved for every frontend,
// exemptions aside.
func (r Reserved) refusesAll(a netip.Addr) bool {
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
func (r Reserved) Empty() bool {
	return len(r.addrs) == 0 && len(r.prefixes) == 0 && len(r.hostOnly) == 0
}

// Equal tells whether r and o reserve the same addresses for the same
// frontends, as listed.
func (r Reserved) Equal(o Reserved) bool {
	return maps.Equal(r.addrs, o.addrs) && slices.Equal(r.prefixes, o.prefixes) && maps.Equal(r.hostOnly, o.hostOnly) &&
		maps.Equal(r.exempt, o.exempt) && maps.Equal(r.unbound, o.unbound)
}
