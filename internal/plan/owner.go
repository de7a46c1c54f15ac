package plan

import (
	"net/netip"
	"sync"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// OwnerPolicy is what the flags say about ownership: the NodePort range,
// the excluded CIDRs and the families the agent serves; what the Services
// say (the nodePorts they name); and the addresses no Service may claim.
type OwnerPolicy struct {
	NodePortRange model.PortRange
	// NodePorts are the protocols and ports the Services name as their
	// nodePorts, inside the range or not: the API server allocates them
	// from its own --service-node-port-range, which need not be the
	// agent's --nodeport-range. Read only while the owner is in use.
	NodePorts map[NodePort]struct{}
	// Exclude are kube-proxy's ipvs.excludeCIDRs: where other tools keep
	// virtual servers. Nothing there is ours unless our sets record it;
	// Services there are still served.
	Exclude  []netip.Prefix
	Families model.Families
	Reserved Reserved
}

// NodePort is a protocol and port a Service names as its nodePort.
type NodePort struct {
	Proto model.Protocol
	Port  uint16
}

// Owner is the single predicate that decides what the agent may delete.
// Anything it does not own (keepalived's services, addresses of other
// tools) survives every sync, full or not. Build it with NewOwner.
type Owner struct {
	policy OwnerPolicy
	// linkAddrs are the addresses bound on our link, as observed.
	linkAddrs map[netip.Addr]struct{}
	// setMembers are the members of our sets, as observed. A frontend
	// listed there was made by us even when its VIP is not bound (its bind
	// failed, then its Service went): without this it would be orphaned.
	setMembers map[model.SetEntry]struct{}
	// nodeAddrs are the node addresses NodePorts are served on.
	nodeAddrs map[netip.Addr]struct{}
	// foreign indexes the observed virtual servers not ours by address;
	// made are the ones this agent created (see Made).
	foreign *foreignIndex
	made    map[model.VSKey]struct{}
	// marks indexes the marks our LocalSources members carry.
	marks *markIndex
}

// NewOwner builds the predicate from one observed state: its link
// addresses and its set members are read together, so that they never come
// from two different reads of the kernel.
func NewOwner(observed model.State, nodeAddrs []netip.Addr, p OwnerPolicy) Owner {
	o := Owner{
		policy:     p,
		linkAddrs:  observed.Addrs,
		setMembers: observed.Sets,
		nodeAddrs:  make(map[netip.Addr]struct{}, len(nodeAddrs)),
		foreign:    newForeignIndex(observed.Services),
		marks:      &markIndex{members: observed.Sets},
	}
	for _, a := range nodeAddrs {
		o.nodeAddrs[a] = struct{}{}
	}
	return o
}

// OwnsService tells whether a virtual server is ours to delete: one of
// our sets names it as a frontend; or, outside the excluded CIDRs, it is
// adoptable (see adoptable). Never a virtual server of a family not
// served, nor a firewall-mark one.
//
// The Frontends set is what makes ownership durable: the agent records
// every frontend there before creating it, so its record outlives restarts,
// node address changes, the Node's deletion, and holds inside the excluded
// CIDRs too: a Service served there has its virtual server removed with
// it. Inside them nothing else is ours, as kube-proxy never deletes a
// virtual server there (cleanLegacyService skips isIPInExcludeCIDRs): that
// is where keepalived and other tools keep theirs.
//
// A firewall-mark virtual server is ours only when one of our LocalSources
// members carries its mark in its family: the agent adds that member
// before it creates the virtual server and removes it after deleting it,
// and no other rule makes one ours, so keepalived's and anyone else's
// firewall-mark services survive.
func (o Owner) OwnsService(k model.VSKey) bool {
	if k.FWMark != 0 {
		return o.policy.Families.Has(k.Addr) && o.marks.has(k)
	}
	return o.recorded(k) || (!o.excluded(k.Addr) && o.adoptable(k))
}

// recorded tells whether one of our sets names k, a frontend of a family
// served.
func (o Owner) recorded(k model.VSKey) bool {
	return k.FWMark == 0 && o.policy.Families.Has(k.Addr) && o.namedBySet(k)
}

// adoptable tells whether k is what kube-proxy (or an agent before the
// records) made, which a migrating agent must take over, not refuse: its
// address is bound to our link (the VIPs kube-proxy left on kube-ipvs0),
// or it is a NodePort (nodePort). A reserved address is never ours
// because it is on our link: a node's or the API server's address bound
// there (by an older agent, or by hand) would otherwise make the virtual
// servers another tool keeps on it ours, to take over or delete. Inside
// the excluded CIDRs this adopts a frontend a Service names (claims) and
// never deletes (OwnsService).
func (o Owner) adoptable(k model.VSKey) bool {
	if k.FWMark != 0 || !o.policy.Families.Has(k.Addr) {
		return false
	}
	if _, ok := o.linkAddrs[k.Addr]; ok && !o.policy.Reserved.Has(k.Addr) {
		return true
	}
	return o.nodePort(k)
}

// nodePort tells whether k is a NodePort's virtual server: on a node
// address, with a port some Service names as its nodePort (so that a
// cluster whose API server has its own --service-node-port-range keeps
// its NodePorts through a migration), or one inside --nodeport-range, which
// the API server keeps for NodePorts, so that kube-proxy's NodePorts of
// Services deleted while no proxy ran are removed too. A virtual server on
// a node address on another port that no Service names could be any
// tool's: it is left alone.
func (o Owner) nodePort(k model.VSKey) bool {
	if _, node := o.nodeAddrs[k.Addr]; !node {
		return false
	}
	_, named := o.policy.NodePorts[NodePort{Proto: k.Proto, Port: k.Port}]
	return named || o.policy.NodePortRange.Contains(k.Port)
}

// excluded tells whether a is inside the excluded CIDRs.
func (o Owner) excluded(a netip.Addr) bool {
	for _, p := range o.policy.Exclude {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// claimsReserved tells whether frontend k would claim a reserved address:
// any frontend there (Reserved.Refuses) but a NodePort's. A NodePort is
// served on the node's own addresses by design (nodePort); every other
// frontend's address is bound on our link and guarded as a VIP, but a
// load-balancer frontend on a host-only address, served there unbound.
func (o Owner) claimsReserved(k model.VSKey) bool {
	if k.FWMark != 0 || !o.policy.Reserved.Refuses(k) {
		return false
	}
	return !o.nodePort(k)
}

// frontendKinds are the set kinds whose members name a frontend.
var frontendKinds = shim.FrontendKinds()

// namedBySet tells whether one of our sets names k as a frontend.
func (o Owner) namedBySet(k model.VSKey) bool {
	for _, kind := range frontendKinds {
		if _, ok := o.setMembers[shim.Entry(kind, k.Addr, k.Proto, k.Port)]; ok {
			return true
		}
	}
	return false
}

// OwnsAddr tells whether an address on our link is ours to unbind: of a
// family served and, inside the excluded CIDRs, recorded in our VIPs set
// (bound by the agent for a Service there).
func (o Owner) OwnsAddr(a netip.Addr) bool {
	if !o.policy.Families.Has(a) {
		return false
	}
	if !o.excluded(a) {
		return true
	}
	_, ours := o.setMembers[shim.VIPEntry(a)]
	return ours
}

// markIndex is the set of firewall marks (with their family) that our
// LocalSources members carry. It walks every member of our sets, so it is
// built once per owner and only when a diff asks about a firewall-mark
// virtual server.
type markIndex struct {
	once    sync.Once
	members map[model.SetEntry]struct{}
	marks   map[model.VSKey]struct{}
}

// has tells whether a member carries k's mark in k's family.
func (m *markIndex) has(k model.VSKey) bool {
	if m == nil {
		return false
	}
	m.once.Do(func() {
		m.marks = map[model.VSKey]struct{}{}
		for e := range m.members {
			if mk, ok := MarkedFor(e); ok {
				m.marks[mk] = struct{}{}
			}
		}
	})
	_, ok := m.marks[model.VSKey{FWMark: k.FWMark, Addr: unspecified(k.IsIPv6())}]
	return ok
}

// MarkedFor is the firewall-mark virtual server a LocalSources member
// steers its connections to; false for every other member.
func MarkedFor(e model.SetEntry) (model.VSKey, bool) {
	if shim.KindOf(e) != shim.LocalSources || e.SkbMark() == 0 {
		return model.VSKey{}, false
	}
	return model.VSKey{FWMark: e.SkbMark(), Addr: unspecified(e.Addr().Is6())}, true
}

// unspecified is the address a firewall-mark key of a family holds.
func unspecified(v6 bool) netip.Addr {
	if v6 {
		return netip.IPv6Unspecified()
	}
	return netip.IPv4Unspecified()
}
