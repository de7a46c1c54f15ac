package plan

import (
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// Owner is the single predicate that decides what the agent may delete.
// Anything it does not own (keepalived's services, addresses of other
// tools) survives every sync, full or not.
type Owner struct {
	// LinkAddrs are the addresses bound on our link, as observed.
	LinkAddrs map[netip.Addr]struct{}
	// NodeAddrs are the node addresses NodePorts are served on.
	NodeAddrs     map[netip.Addr]struct{}
	NodePortRange config.PortRange
	Exclude       []netip.Prefix
	IPv4, IPv6    bool
	// SetMembers are the members of our sets, as observed. A frontend
	// listed there was made by us even when its VIP is not bound (its bind
	// failed, then its Service went): without this it would be orphaned.
	SetMembers map[model.SetEntry]struct{}
}

// frontendKinds are the sets whose members name a frontend.
var frontendKinds = []string{shim.ClusterIP, shim.External, shim.NoEndpoints, shim.Firewall}

// OwnsService tells whether a virtual server is ours to delete: its
// address is bound to our link, or one of our sets names it as a frontend,
// or it is a node address with a port in the NodePort range; and it is
// neither excluded nor of a disabled family.
func (o Owner) OwnsService(k model.VSKey) bool {
	if k.FWMark != 0 || !o.OwnsAddr(k.Addr) {
		return false
	}
	if _, ok := o.LinkAddrs[k.Addr]; ok {
		return true
	}
	for _, kind := range frontendKinds {
		if _, ok := o.SetMembers[shim.Entry(kind, k.Addr, k.Proto, k.Port)]; ok {
			return true
		}
	}
	_, node := o.NodeAddrs[k.Addr]
	return node && o.NodePortRange.Contains(k.Port)
}

// OwnsAddr tells whether an address on our link is ours to unbind.
func (o Owner) OwnsAddr(a netip.Addr) bool {
	if a.Is4() && !o.IPv4 || a.Is6() && !o.IPv6 {
		return false
	}
	for _, p := range o.Exclude {
		if p.Contains(a) {
			return false
		}
	}
	return true
}
