// Package shim describes, purely, the small netfilter shim kube-ipvs keeps
// beside IPVS: a few ipsets whose members follow the Services, and a
// constant handful of iptables rules in chains of its own (KUBE-IPVS-*)
// that match those sets. It renders the rules as iptables-restore input,
// reads iptables-save output back, and decides what must change. The
// semantics follow kube-proxy's IPVS mode so that a node switched over
// behaves the same; every name differs from kube-proxy's so both can be
// told apart and cleaned up separately.
package shim

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// SetKind is one of the shim's ipsets; each kind is one set per address
// family. The kind knows its set's name, its ipset type and what its
// members mean to the rest of the agent.
type SetKind uint8

const (
	// ClusterIP holds ClusterIP,proto:port of every ClusterIP frontend. It
	// marks for masquerade the node's own connections to a ClusterIP (their
	// source is the VIP, bound locally on kube-ipvs0), every connection with
	// --masquerade-all, or those from outside --cluster-cidr.
	ClusterIP SetKind = iota + 1
	// External holds addr,proto:port of every external IP, load-balancer IP
	// and NodePort frontend with externalTrafficPolicy Cluster: reached from
	// anywhere, they are masqueraded so replies come back through this node.
	// Local-policy frontends are left out, which keeps the client's address.
	External
	// LoopBack holds endpoint,proto:port,endpoint of this node's endpoints:
	// a pod reaching itself through its Service (hairpin) must be
	// masqueraded or it would answer itself directly.
	LoopBack
	// Firewall holds lbIP,proto:port of load-balancer frontends that have
	// loadBalancerSourceRanges; their traffic must come from SourceRanges.
	Firewall
	// SourceRanges holds lbIP,proto:port,cidr: the allowed client ranges.
	SourceRanges
	// NoEndpoints holds addr,proto:port of frontends with no usable real
	// server: new connections are rejected at once (TCP reset, ICMP port
	// unreachable) instead of timing out.
	NoEndpoints
	// Frontends holds addr,proto:port of every frontend the agent makes
	// (ClusterIP, external, load-balancer and NodePort, either traffic
	// policy). A member is added before its virtual server is created and
	// removed after it is deleted, so it is the durable record of what is
	// ours: it survives restarts, node address changes, the Node's deletion
	// and a crash between creating a virtual server and binding its VIP. It
	// is also the list of ports a VIP accepts (see VIPs).
	Frontends
	// VIPs holds every address the agent binds on its link. New connections
	// to a VIP on a port that Frontends does not list are rejected, so host
	// sockets (sshd on 0.0.0.0:22, the kubelet) cannot be reached through a
	// ClusterIP or external IP (kube-proxy's KUBE-IPVS-FILTER does the same).
	VIPs
	// LocalSources holds addr,proto:port of every load-balancer IP,
	// external IP and NodePort frontend with externalTrafficPolicy Local,
	// each with the mark (skbmark) of the firewall-mark virtual server
	// that serves it with every endpoint of the cluster. New connections
	// to it from this node's pods or from the node itself are given that
	// mark, so IPVS serves them from every endpoint, as kube-proxy's
	// iptables and nftables modes send such "internal traffic to an
	// external destination" to the cluster-wide endpoints; everyone else
	// gets this node's endpoints only. A member is added before its
	// virtual server is created and removed after it is deleted, so it is
	// also the record that the mark's virtual server is ours.
	LocalSources
)

// IPSetType is an ipset type as `ipset create` takes it. It decides which
// fields of a model.SetEntry count.
type IPSetType string

const (
	HashIP        IPSetType = "hash:ip"          // Addr
	HashIPPort    IPSetType = "hash:ip,port"     // Addr, Proto, Port
	HashIPPortIP  IPSetType = "hash:ip,port,ip"  // and Addr2
	HashIPPortNet IPSetType = "hash:ip,port,net" // and Net
)

// kindInfo is what a set kind is.
type kindInfo struct {
	suffix string
	typ    IPSetType
	// frontend: a member names a frontend (addr,proto:port) the agent made.
	frontend bool
	// guardsSource: the member is part of a load balancer's source-range
	// filter, which must be in place before its VIP goes live.
	guardsSource bool
	// skbInfo: the set is made with ipset's skbinfo extension, and its
	// members carry a packet mark.
	skbInfo bool
}

var kindInfos = [...]kindInfo{
	ClusterIP:    {suffix: "CLUSTER-IP", typ: HashIPPort, frontend: true},
	External:     {suffix: "EXTERNAL", typ: HashIPPort, frontend: true},
	LoopBack:     {suffix: "LOOP-BACK", typ: HashIPPortIP},
	Firewall:     {suffix: "LB-FW", typ: HashIPPort, frontend: true, guardsSource: true},
	SourceRanges: {suffix: "LB-SOURCE-CIDR", typ: HashIPPortNet, guardsSource: true},
	NoEndpoints:  {suffix: "NO-ENDPOINTS", typ: HashIPPort, frontend: true},
	Frontends:    {suffix: "FRONTENDS", typ: HashIPPort, frontend: true},
	// Not "IPS": kube-proxy's set of the addresses on kube-ipvs0 is
	// KUBE-IPVS-IPS.
	VIPs:         {suffix: "VIPS", typ: HashIP},
	LocalSources: {suffix: "LOCAL-SOURCES", typ: HashIPPort, frontend: true, skbInfo: true},
}

// MaxSetMembers is the maxelem every set is created with. The kernel's
// default, 65,536, is what kube-proxy uses too; the LOOP-BACK set holds one
// member per local endpoint and the others one per frontend, so a node of
// a 10,000-Service cluster with 10 endpoints each needs 100,000. A hash set
// grows as members come, so a larger bound costs nothing until it is used.
// A set found with another maxelem (made by a version that used the
// kernel's default) is replaced by one with this bound, members and all.
const MaxSetMembers = 1 << 20

// kinds lists every set kind in creation order.
var kinds = []SetKind{ClusterIP, External, LoopBack, Firewall, SourceRanges, NoEndpoints, Frontends, VIPs, LocalSources}

func (k SetKind) info() kindInfo {
	if k == 0 || int(k) >= len(kindInfos) {
		return kindInfo{}
	}
	return kindInfos[k]
}

// String is the kind's part of its set names ("CLUSTER-IP").
func (k SetKind) String() string {
	if s := k.info().suffix; s != "" {
		return s
	}
	return fmt.Sprintf("set-kind(%d)", uint8(k))
}

// Name is the ipset name of the kind in a family. kube-proxy's sets are
// KUBE-<kind> (and KUBE-6-<kind>); ours never collide with them.
func (k SetKind) Name(v6 bool) string {
	f := 0
	if v6 {
		f = 1
	}
	if int(k) < len(setNames) && setNames[k][f] != "" {
		return setNames[k][f]
	}
	return makeName(k, v6)
}

func makeName(k SetKind, v6 bool) string {
	if v6 {
		return "KUBE-IPVS6-" + k.String()
	}
	return "KUBE-IPVS-" + k.String()
}

// setNames are the kinds' names, made once: every member carries its set's
// name, and a name built per member would be a string of its own for each
// of a table's members.
var setNames = func() (out [len(kindInfos)][2]string) {
	for _, k := range kinds {
		out[k] = [2]string{makeName(k, false), makeName(k, true)}
	}
	return out
}()

// Type is the kind's ipset type.
func (k SetKind) Type() IPSetType { return k.info().typ }

// SkbInfo tells whether the kind's sets are made with ipset's skbinfo
// extension: their members carry a packet mark (model.SetEntry.SkbMark).
func (k SetKind) SkbInfo() bool { return k.info().skbInfo }

// NamesFrontend tells whether a member names a frontend (address, protocol
// and port of a virtual server the agent made).
func (k SetKind) NamesFrontend() bool { return k.info().frontend }

// GuardsSource tells whether a member is part of a source-range filter.
func (k SetKind) GuardsSource() bool { return k.info().guardsSource }

// GuardsVIP tells whether a member must be in place before its address is
// bound: a source-range filter's, and the VIPs member itself, without which
// the address accepts new connections on every port a host socket listens
// on (sshd, the kubelet) instead of only on its frontends' ports.
func (k SetKind) GuardsVIP() bool { return k.GuardsSource() || k == VIPs }

// setFamily is one of our sets: a kind in a family.
type setFamily struct {
	kind SetKind
	v6   bool
}

// ourSets maps each of our set names to its kind and family.
var ourSets = func() map[string]setFamily {
	m := map[string]setFamily{}
	for _, k := range kinds {
		m[k.Name(false)] = setFamily{k, false}
		m[k.Name(true)] = setFamily{k, true}
	}
	return m
}()

// ParseSetName tells which kind and family an ipset name is; ok is false
// when the set is not one of ours.
func ParseSetName(name string) (kind SetKind, v6, ok bool) {
	s, ok := ourSets[name]
	return s.kind, s.v6, ok
}

// KindOf is the kind of the set a member belongs to, 0 when the set is not
// one of ours.
func KindOf(e model.SetEntry) SetKind {
	k, _, _ := ParseSetName(e.Set())
	return k
}

// SetDef is one ipset the shim needs.
type SetDef struct {
	Kind SetKind
	Name string
	Type IPSetType
	IPv6 bool
	// SkbInfo: made with the skbinfo extension (`ipset create ... skbinfo`).
	SkbInfo bool
}

// Sets lists the sets of the enabled families.
func Sets(ipv4, ipv6 bool) []SetDef {
	var out []SetDef
	for _, fam := range []struct{ on, v6 bool }{{ipv4, false}, {ipv6, true}} {
		if !fam.on {
			continue
		}
		for _, k := range kinds {
			out = append(out, SetDef{Kind: k, Name: k.Name(fam.v6), Type: k.Type(), IPv6: fam.v6, SkbInfo: k.SkbInfo()})
		}
	}
	return out
}

// IsOurs tells whether an ipset name is one of the shim's (any family).
func IsOurs(name string) bool {
	_, _, ok := ParseSetName(name)
	return ok
}

// replacementSuffix marks the set a replacement is built in before it is
// swapped in (see ReplacementName). The longest name with it is 29
// characters, inside ipset's 31.
const replacementSuffix = "-NEW"

// ReplacementName is the name of the set in which a replacement of the set
// name is filled before the two are swapped: a set cannot be renamed while
// rules match it, but it can be swapped, atomically, with one of the same
// type and family.
func ReplacementName(name string) string { return name + replacementSuffix }

// IsReplacement tells whether an ipset name is a replacement of one of the
// shim's sets, left behind when the agent stopped between making it and
// swapping it in.
func IsReplacement(name string) bool {
	base, ok := strings.CutSuffix(name, replacementSuffix)
	return ok && IsOurs(base)
}

// Entry builds a hash:ip,port member of a kind for addr's family.
func Entry(kind SetKind, addr netip.Addr, proto model.Protocol, port uint16) model.SetEntry {
	addr = addr.Unmap()
	return model.NewSetEntry(kind.Name(addr.Is6()), addr, proto, port)
}

// VIPEntry is the VIPs member of an address bound on the link.
func VIPEntry(addr netip.Addr) model.SetEntry {
	addr = addr.Unmap()
	return model.NewSetEntry(VIPs.Name(addr.Is6()), addr, 0, 0)
}

// LoopBackEntry is the hairpin member of an endpoint.
func LoopBackEntry(proto model.Protocol, ep netip.AddrPort) model.SetEntry {
	a := ep.Addr().Unmap()
	return model.NewSetEntry(LoopBack.Name(a.Is6()), a, proto, ep.Port()).WithAddr2(a)
}

// LocalSourceEntry is the LocalSources member of a Local-policy frontend:
// its pods' and the node's new connections get mark, the firewall mark of
// the virtual server that serves them from every endpoint.
func LocalSourceEntry(addr netip.Addr, proto model.Protocol, port uint16, mark uint32) model.SetEntry {
	return Entry(LocalSources, addr, proto, port).WithSkbMark(mark)
}

// SourceRangeEntry allows src to reach a load-balancer frontend.
func SourceRangeEntry(lb netip.Addr, proto model.Protocol, port uint16, src netip.Prefix) model.SetEntry {
	lb = lb.Unmap()
	return model.NewSetEntry(SourceRanges.Name(lb.Is6()), lb, proto, port).WithNet(src.Masked())
}

// FrontendKinds lists the kinds whose members name a frontend.
func FrontendKinds() []SetKind {
	var out []SetKind
	for _, k := range kinds {
		if k.NamesFrontend() {
			out = append(out, k)
		}
	}
	return out
}
