package shim

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Our chains. kube-proxy's IPVS mode owns KUBE-IPVS-FILTER,
// KUBE-IPVS-OUT-FILTER and the set KUBE-IPVS-IPS: none of ours is named so.
const (
	ChainServices     = "KUBE-IPVS-SERVICES"
	ChainPostrouting  = "KUBE-IPVS-POSTROUTING"
	ChainMarkMasq     = "KUBE-IPVS-MARK-MASQ"
	ChainFirewall     = "KUBE-IPVS-FIREWALL"
	ChainSourceRanges = "KUBE-IPVS-SOURCE-RANGES"
	ChainForward      = "KUBE-IPVS-FORWARD"
	ChainLocalSources = "KUBE-IPVS-LOCAL-SOURCES"
)

// DefaultMasqueradeMark is the packet mark that asks for masquerading
// unless told otherwise: kube-proxy's and kubelet's 0x4000 (bit 14), so CNI
// plugins that honour it keep working.
const DefaultMasqueradeMark uint32 = 1 << 14

// MasqueradeMark is the mark of a masquerade bit (kube-proxy's
// --iptables-masquerade-bit): 1<<bit, for a bit in 0..31 as kube-proxy
// allows.
func MasqueradeMark(bit int32) (uint32, error) {
	if bit < 0 || bit > 31 {
		return 0, fmt.Errorf("must be within the range [0, 31], got %d", bit)
	}
	return 1 << uint32(bit), nil
}

// Config is what shapes the rules.
type Config struct {
	// Families are the families to hold sets and rules for: the agent's.
	model.Families
	// MasqueradeAll masquerades every connection to a ClusterIP.
	MasqueradeAll bool
	// PodCIDRs (at most one per family) tell traffic from pods from the
	// rest, as kube-proxy's local traffic detector does in its ClusterCIDR
	// (the cluster CIDR) and NodeCIDR (this Node's spec.podCIDRs) modes:
	// connections to a ClusterIP from outside them are masqueraded.
	PodCIDRs []netip.Prefix
	// PodInterface tells them apart by the interface they come in on
	// instead, as iptables' -i takes it: a bridge's name (BridgeInterface
	// mode) or a name prefix followed by "+" (InterfaceNamePrefix mode).
	// Connections to a ClusterIP that come in on any other interface (or
	// leave the node itself) are masqueraded. At most one of PodCIDRs and
	// PodInterface is set.
	PodInterface string
	// MasqueradeMark is the packet mark asking for masquerading (see
	// MasqueradeMark); 0 means DefaultMasqueradeMark.
	MasqueradeMark uint32
}

// Validate checks that the rules can be rendered.
func (c Config) Validate() error {
	var errs []error
	if err := CheckPodCIDRs(c.PodCIDRs); err != nil {
		errs = append(errs, fmt.Errorf("pod CIDRs %w", err))
	}
	if c.PodInterface != "" {
		if len(c.PodCIDRs) > 0 {
			errs = append(errs, errors.New("pod traffic is told either by CIDR or by interface, not both"))
		}
		if err := CheckPodInterface(c.PodInterface); err != nil {
			errs = append(errs, err)
		}
	}
	if m := c.MasqueradeMark; m&(m-1) != 0 {
		errs = append(errs, fmt.Errorf("masquerade mark %#x is not a single bit", m))
	}
	return errors.Join(errs...)
}

// Equal tells whether two configurations render the same rules and sets.
func (c Config) Equal(o Config) bool {
	return c.Families == o.Families && c.MasqueradeAll == o.MasqueradeAll &&
		slices.Equal(c.PodCIDRs, o.PodCIDRs) && c.PodInterface == o.PodInterface && c.mark() == o.mark()
}

// mark is the masquerade mark as iptables-save prints it.
func (c Config) mark() string {
	m := c.MasqueradeMark
	if m == 0 {
		m = DefaultMasqueradeMark
	}
	return fmt.Sprintf("%#x", m)
}

// CheckPodCIDRs allows one CIDR per family: the rules hold one "not
// from the pods" match per family. The agent's flag validation uses it too.
func CheckPodCIDRs(ps []netip.Prefix) error {
	var errs []error
	seen := map[bool]netip.Prefix{}
	for _, p := range ps {
		v6 := p.Addr().Is6()
		if old, dup := seen[v6]; dup {
			errs = append(errs, fmt.Errorf("%s and %s are of the same family: give at most one per family", old, p))
		}
		seen[v6] = p
	}
	return errors.Join(errs...)
}

// CheckPodInterface explains why iptables would refuse an -i argument
// (name or prefix+"+"): empty, longer than IFNAMSIZ-1 bytes, or holding a
// character that would split or quote it in iptables-restore input.
func CheckPodInterface(name string) error {
	switch {
	case name == "" || name == "+":
		return errors.New("the pods' interface name must not be empty")
	case len(name) > 15:
		return fmt.Errorf("interface %q is longer than the kernel's 15 bytes", name)
	case strings.ContainsAny(name, " \t\n\"'/!:"):
		return fmt.Errorf("interface %q holds a character no interface name may hold", name)
	}
	return nil
}

// podCIDR is the family's pod CIDR, if any.
func (c Config) podCIDR(v6 bool) (netip.Prefix, bool) {
	for _, p := range c.PodCIDRs {
		if p.Addr().Is6() == v6 {
			return p.Masked(), true
		}
	}
	return netip.Prefix{}, false
}

// ifNotPod is the match for traffic that does not come from a pod, as
// kube-proxy's LocalTrafficDetector.IfNotLocal renders it (iptables-save's
// spelling); "" when the family has no way to tell.
func (c Config) ifNotPod(v6 bool) string {
	if c.PodInterface != "" {
		return "! -i " + c.PodInterface
	}
	if cidr, ok := c.podCIDR(v6); ok {
		return "! -s " + cidr.String()
	}
	return ""
}

// ifPod is the match for traffic from a pod, as kube-proxy's
// LocalTrafficDetector.IfLocal renders it; "" when the family has no way
// to tell.
func (c Config) ifPod(v6 bool) string {
	if c.PodInterface != "" {
		return "-i " + c.PodInterface
	}
	if cidr, ok := c.podCIDR(v6); ok {
		return "-s " + cidr.String()
	}
	return ""
}

// Jump is a rule in a built-in chain that enters one of ours.
type Jump struct{ Table, From, To string }

// Chain is one of our chains and its rules, each exactly as iptables-save
// prints it (so that what is there compares equal to what we want).
type Chain struct {
	Name  string
	Rules []string
}

// Table is one iptables table's part of the shim.
type Table struct {
	Name   string
	Chains []Chain
}

// Ruleset is the whole shim of one family.
type Ruleset struct {
	IPv6   bool
	Tables []Table
	Jumps  []Jump
}

// jumps enter our chains from the built-in ones: nat PREROUTING (traffic
// from elsewhere) and OUTPUT (the node's own) for marking, POSTROUTING for
// masquerading, filter INPUT for the firewall (IPVS takes VIP traffic in
// LOCAL_IN, after filter INPUT) and FORWARD for replies IPVS handles there,
// mangle PREROUTING and OUTPUT for the firewall marks of Local-policy
// frontends (ipset's --map-mark is allowed in the mangle table only).
var jumps = []Jump{
	{"mangle", "PREROUTING", ChainLocalSources},
	{"mangle", "OUTPUT", ChainLocalSources},
	{"nat", "PREROUTING", ChainServices},
	{"nat", "OUTPUT", ChainServices},
	{"nat", "POSTROUTING", ChainPostrouting},
	{"filter", "INPUT", ChainFirewall},
	{"filter", "FORWARD", ChainForward},
}

// Rules renders the family's shim.
func Rules(c Config, v6 bool) Ruleset {
	set := func(kind SetKind) string { return kind.Name(v6) }
	loopback, icmpUnreach := "127.0.0.0/8", "icmp-port-unreachable"
	if v6 {
		loopback, icmpUnreach = "::1/128", "icmp6-port-unreachable"
	}
	masq := c.mark()
	mark := masq + "/" + masq

	services := []string{
		// Connections from localhost are not ours to mark (kube-proxy
		// dismisses them early too).
		"-s " + loopback + " -j RETURN",
		// The node's own connections to a ClusterIP leave from the VIP.
		"-m set --match-set " + set(ClusterIP) + " src,dst -j " + ChainMarkMasq,
	}
	if c.MasqueradeAll {
		services = append(services, "-m set --match-set "+set(ClusterIP)+" dst,dst -j "+ChainMarkMasq)
	} else if notPod := c.ifNotPod(v6); notPod != "" {
		// Connections to a ClusterIP from outside the pods (another host
		// routing the service range to this node) are masqueraded, so
		// their replies come back through here (kube-proxy's IfNotLocal).
		services = append(services, notPod+" -m set --match-set "+set(ClusterIP)+" dst,dst -j "+ChainMarkMasq)
	}
	services = append(services, "-m set --match-set "+set(External)+" dst,dst -j "+ChainMarkMasq)

	// A pod's or the node's connection to a Local-policy frontend gets its
	// virtual server's firewall mark, which IPVS looks up before the
	// address: such "internal traffic to an external destination" goes to
	// every endpoint of the cluster, as kube-proxy's iptables and nftables
	// modes send it (their "short-circuit pod traffic" and "short-circuit
	// local traffic" rules); anyone else's gets this node's endpoints.
	// IPVS matches the whole mark, so the set's mark replaces the packet's.
	// Every packet passes the mangle rules: each tests the cheapest match
	// first (an address, then a hash lookup in the set) and looks up the
	// source's address type only for packets to a Local frontend.
	localSources := "-m set --match-set " + set(LocalSources) + " dst,dst"
	fromLocal := []string{localSources + " -m addrtype --src-type LOCAL"}
	if pod := c.ifPod(v6); pod != "" {
		fromLocal = append([]string{pod + " " + localSources}, fromLocal...)
	}
	var marks, passLocal []string
	for _, from := range fromLocal {
		marks = append(marks, from+" -j SET --map-set "+set(LocalSources)+" dst,dst --map-mark")
		// Such a connection goes on to IPVS even when this node has no
		// endpoint of the frontend: its firewall-mark virtual server has.
		passLocal = append(passLocal, from+" -j RETURN")
	}

	postrouting := []string{
		"-m set --match-set " + set(LoopBack) + " dst,dst,src -j MASQUERADE",
		// The node's own connections to a VIP leave from the VIP, which
		// every node binds: their replies come back here only masqueraded
		// (kube-proxy's "masquerade local traffic").
		"-m set --match-set " + set(VIPs) + " src -j MASQUERADE",
		"-m mark ! --mark " + mark + " -j RETURN",
		// Clear the mark so a packet that loops through the stack again
		// is not masqueraded twice (--xor-mark, as iptables-save prints it).
		"-j MARK --set-xmark " + masq + "/0x0",
		"-j MASQUERADE",
	}
	firewall := []string{
		"-m set --match-set " + set(Firewall) + " dst,dst -j " + ChainSourceRanges,
	}
	firewall = append(firewall, passLocal...)
	firewall = append(firewall, []string{
		// NEW only: a draining real server's open connections go on.
		"-p tcp -m conntrack --ctstate NEW -m set --match-set " + set(NoEndpoints) + " dst,dst -j REJECT --reject-with tcp-reset",
		"-m conntrack --ctstate NEW -m set --match-set " + set(NoEndpoints) + " dst,dst -j REJECT --reject-with " + icmpUnreach,
		// A VIP is bound locally, so without these any host socket would
		// answer on it: only its frontends' ports go on (to IPVS, which
		// takes them after filter INPUT); new connections to its other
		// ports are refused, as kube-proxy's KUBE-IPVS-FILTER does. Node
		// addresses (NodePorts, health-check ports) are not VIPs.
		"-m set --match-set " + set(Frontends) + " dst,dst -j RETURN",
		"-m conntrack --ctstate NEW -m set --match-set " + set(VIPs) + " dst -j REJECT --reject-with " + icmpUnreach,
	}...)
	return Ruleset{
		IPv6: v6,
		Tables: []Table{
			{Name: "nat", Chains: []Chain{
				{ChainServices, services},
				{ChainPostrouting, postrouting},
				{ChainMarkMasq, []string{"-j MARK --set-xmark " + mark}},
			}},
			{Name: "filter", Chains: []Chain{
				{ChainFirewall, firewall},
				{ChainSourceRanges, []string{
					"-m set --match-set " + set(SourceRanges) + " dst,dst,src -j RETURN",
					"-j DROP",
				}},
				// Forward what we marked and its replies even when the
				// FORWARD policy drops (kube-proxy's KUBE-FORWARD).
				{ChainForward, []string{
					"-m mark --mark " + mark + " -j ACCEPT",
					"-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
				}},
			}},
			// Written last: the firewall lets marked connections through
			// before any is marked.
			{Name: "mangle", Chains: []Chain{{ChainLocalSources, marks}}},
		},
		Jumps: jumps,
	}
}

// Restore renders iptables-restore --noflush input that replaces our
// chains whole (declaring a chain flushes it) and inserts the missing
// jumps, one table per transaction.
func (r Ruleset) Restore(missing []Jump) string {
	var b strings.Builder
	for _, t := range r.Tables {
		b.WriteString("*" + t.Name + "\n")
		for _, c := range t.Chains {
			b.WriteString(":" + c.Name + " - [0:0]\n")
		}
		for _, c := range t.Chains {
			for _, rule := range c.Rules {
				b.WriteString("-A " + c.Name + " " + rule + "\n")
			}
		}
		for _, j := range missing {
			if j.Table == t.Name {
				b.WriteString("-I " + j.From + " -j " + j.To + "\n")
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}
