package objects

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// NodeAddrs is what the agent keeps of a Node other than its own: the
// addresses that are the Node's (status.addresses) and its pod CIDRs, which
// no Service may claim as a VIP.
type NodeAddrs struct {
	Addrs    []netip.Addr   // sorted
	PodCIDRs []netip.Prefix // sorted
}

// Equal tells whether two Nodes' addresses are the same.
func (n NodeAddrs) Equal(o NodeAddrs) bool {
	return slices.Equal(n.Addrs, o.Addrs) && slices.Equal(n.PodCIDRs, o.PodCIDRs)
}

// AddrsOf reads a Node's addresses (those that are IPs: hostnames and
// DNS names are skipped) and pod CIDRs (spec.podCIDRs, else spec.podCIDR).
func AddrsOf(node *corev1.Node) NodeAddrs {
	var out NodeAddrs
	if node == nil {
		return out
	}
	for _, na := range node.Status.Addresses {
		if a, err := netip.ParseAddr(na.Address); err == nil && a.Zone() == "" {
			out.Addrs = append(out.Addrs, a.Unmap())
		}
	}
	cidrs := node.Spec.PodCIDRs
	if len(cidrs) == 0 && node.Spec.PodCIDR != "" {
		cidrs = []string{node.Spec.PodCIDR}
	}
	for _, s := range cidrs {
		if p, err := netip.ParsePrefix(s); err == nil {
			out.PodCIDRs = append(out.PodCIDRs, p.Masked())
		}
	}
	slices.SortFunc(out.Addrs, netip.Addr.Compare)
	out.Addrs = slices.Compact(out.Addrs)
	slices.SortFunc(out.PodCIDRs, netip.Prefix.Compare)
	out.PodCIDRs = slices.Compact(out.PodCIDRs)
	return out
}

// SetNodeAddrs records the addresses of a Node (any Node, this one
// included). The same addresses again change nothing: a kubelet's status
// update of another Node is not the agent's business.
func (s *Store) SetNodeAddrs(name string, a NodeAddrs) {
	s.mu.Lock()
	old, ok := s.nodes[name]
	changed := !ok || !old.Equal(a)
	if changed {
		s.nodes[name] = a
		s.nodesAll = nil
	}
	s.mu.Unlock()
	if changed {
		s.poke()
	}
}

// DeleteNodeAddrs forgets a Node's addresses.
func (s *Store) DeleteNodeAddrs(name string) {
	s.mu.Lock()
	_, ok := s.nodes[name]
	if ok {
		delete(s.nodes, name)
		s.nodesAll = nil
	}
	s.mu.Unlock()
	if ok {
		s.poke()
	}
}

// AllNodeAddrs returns every known Node's addresses and pod CIDRs in one
// value, shared: it must not be changed.
func (s *Store) AllNodeAddrs() NodeAddrs {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nodesAll == nil {
		all := &NodeAddrs{}
		for _, n := range s.nodes {
			all.Addrs = append(all.Addrs, n.Addrs...)
			all.PodCIDRs = append(all.PodCIDRs, n.PodCIDRs...)
		}
		s.nodesAll = all
	}
	return *s.nodesAll
}
