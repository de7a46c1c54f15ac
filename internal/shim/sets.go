// Package shim describes, purely, the small netfilter shim kube-ipvs keeps
// beside IPVS: a few ipsets whose members follow the Services, and a
// constant handful of iptables rules in chains of its own (KUBE-IPVS-*)
// that match those sets. It renders the rules as iptables-restore input,
// reads iptables-save output back, and decides what must change. The
// semantics follow kube-proxy's IPVS mode (pkg/proxy/ipvs/proxier.go) so
// that a node switched over behaves the same; every name differs from
// kube-proxy's so both can be told apart and cleaned up separately.
package shim

import (
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Set kinds: each is one ipset per address family.
const (
	// ClusterIP holds ClusterIP,proto:port of every ClusterIP frontend. It
	// marks for masquerade the node's own connections to a ClusterIP (their
	// source is the VIP, bound locally on kube-ipvs0), every connection with
	// --masquerade-all, or those from outside --cluster-cidr.
	ClusterIP = "CLUSTER-IP"
	// External holds addr,proto:port of every external IP, load-balancer IP
	// and NodePort frontend with externalTrafficPolicy Cluster: reached from
	// anywhere, they are masqueraded so replies come back through this node.
	// Local-policy frontends are left out, which keeps the client's address.
	External = "EXTERNAL"
	// LoopBack holds endpoint,proto:port,endpoint of this node's endpoints:
	// a pod reaching itself through its Service (hairpin) must be
	// masqueraded or it would answer itself directly.
	LoopBack = "LOOP-BACK"
	// Firewall holds lbIP,proto:port of load-balancer frontends that have
	// loadBalancerSourceRanges; their traffic must come from SourceRanges.
	Firewall = "LB-FW"
	// SourceRanges holds lbIP,proto:port,cidr: the allowed client ranges.
	SourceRanges = "LB-SOURCE-CIDR"
	// NoEndpoints holds addr,proto:port of frontends with no usable real
	// server: new connections are rejected at once (TCP reset, ICMP port
	// unreachable) instead of timing out.
	NoEndpoints = "NO-ENDPOINTS"
)

// SetDef is one ipset the shim needs.
type SetDef struct {
	Kind string
	Name string
	Type string // ipset type, as `ipset create` takes it
	IPv6 bool
}

// kinds lists every set kind with its ipset type, in creation order.
var kinds = []struct{ kind, typ string }{
	{ClusterIP, "hash:ip,port"},
	{External, "hash:ip,port"},
	{LoopBack, "hash:ip,port,ip"},
	{Firewall, "hash:ip,port"},
	{SourceRanges, "hash:ip,port,net"},
	{NoEndpoints, "hash:ip,port"},
}

// SetName is the ipset name of a kind in a family. kube-proxy's sets are
// KUBE-<kind> (and KUBE-6-<kind>); ours never collide with them.
func SetName(kind string, v6 bool) string {
	if v6 {
		return "KUBE-IPVS6-" + kind
	}
	return "KUBE-IPVS-" + kind
}

// Sets lists the sets of the enabled families.
func Sets(ipv4, ipv6 bool) []SetDef {
	var out []SetDef
	for _, fam := range []struct{ on, v6 bool }{{ipv4, false}, {ipv6, true}} {
		if !fam.on {
			continue
		}
		for _, k := range kinds {
			out = append(out, SetDef{Kind: k.kind, Name: SetName(k.kind, fam.v6), Type: k.typ, IPv6: fam.v6})
		}
	}
	return out
}

// IsOurs tells whether an ipset name is one of the shim's (any family).
func IsOurs(name string) bool {
	for _, k := range kinds {
		if name == SetName(k.kind, false) || name == SetName(k.kind, true) {
			return true
		}
	}
	return false
}

// TypeOf returns the ipset type of one of our sets, "" if not ours.
func TypeOf(name string) string {
	for _, k := range kinds {
		if name == SetName(k.kind, false) || name == SetName(k.kind, true) {
			return k.typ
		}
	}
	return ""
}

// Entry builds a hash:ip,port member of a kind for addr's family.
func Entry(kind string, addr netip.Addr, proto model.Protocol, port uint16) model.SetEntry {
	addr = addr.Unmap()
	return model.SetEntry{Set: SetName(kind, addr.Is6()), Addr: addr, Proto: proto, Port: port}
}

// LoopBackEntry is the hairpin member of an endpoint.
func LoopBackEntry(proto model.Protocol, ep netip.AddrPort) model.SetEntry {
	a := ep.Addr().Unmap()
	return model.SetEntry{Set: SetName(LoopBack, a.Is6()), Addr: a, Proto: proto, Port: ep.Port(), Addr2: a}
}

// SourceRangeEntry allows src to reach a load-balancer frontend.
func SourceRangeEntry(lb netip.Addr, proto model.Protocol, port uint16, src netip.Prefix) model.SetEntry {
	lb = lb.Unmap()
	return model.SetEntry{Set: SetName(SourceRanges, lb.Is6()), Addr: lb, Proto: proto, Port: port, Net: src.Masked()}
}
