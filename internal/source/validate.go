package source

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// The API server defaults and validates objects before informers see them;
// a manifest folder has no API server, so this package does that work
// itself, with the API server's rules (k8s.io/kubernetes pkg/apis/core and
// pkg/apis/discovery validation, and the NodePort allocator's range) for
// every field the agent reads, so that --manifests accepts nothing a
// cluster would refuse: no zoned, loopback or link-local VIP, no duplicate
// port, no health-check port outside the NodePort range, no megabyte name.
// Fields the agent never reads (a selector's semantics, finalizers) get
// the API server's generic metadata checks only.

// rules are the checks that depend on the agent's configuration.
type rules struct {
	// nodePorts is the NodePort range: the API server allocates nodePort
	// and healthCheckNodePort from it and refuses a port outside it. Zero:
	// unknown, any port 1-65535.
	nodePorts model.PortRange
}

// maxFieldErrors caps the reasons one object reports: a slice of 1000 bad
// endpoints is one problem, not a thousand-line log entry.
const maxFieldErrors = 10

// fieldErrors collects "path: reason" lines and reports them as one error.
type fieldErrors []string

func (e *fieldErrors) add(path, format string, args ...any) {
	*e = append(*e, path+": "+fmt.Sprintf(format, args...))
}

// addMsgs adds the messages of an apimachinery IsXxx check.
func (e *fieldErrors) addMsgs(path string, msgs []string) {
	for _, m := range msgs {
		e.add(path, "%s", m)
	}
}

// addList adds an apimachinery field.ErrorList. The bad value is left out:
// it may be a megabyte long, and the path already says where it is.
func (e *fieldErrors) addList(list field.ErrorList) {
	for _, fe := range list {
		if fe.Detail != "" {
			e.add(fe.Field, "%s: %s", fe.Type, fe.Detail)
		} else {
			e.add(fe.Field, "%s", fe.Type)
		}
	}
}

func (e fieldErrors) err() error {
	if len(e) == 0 {
		return nil
	}
	shown := e
	if len(shown) > maxFieldErrors {
		shown = shown[:maxFieldErrors]
	}
	msg := strings.Join(shown, "; ")
	if more := len(e) - len(shown); more > 0 {
		msg += fmt.Sprintf("; and %d more", more)
	}
	return fmt.Errorf("%s", msg)
}

// short quotes a value for a message, cut to a readable length.
func short(s string) string { return fmt.Sprintf("%q", cut(s)) }

// parseIP reads an address as the API server's strict IP validation does:
// no leading zeros (netip refuses them), no zone ("fe80::1%eth0" names an
// interface, not an address the API can hold), no IPv4-mapped IPv6.
func parseIP(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return netip.Addr{}, fmt.Errorf("not an IP address: %s", short(s))
	case a.Zone() != "":
		return netip.Addr{}, fmt.Errorf("%s has a zone: a Service address may not name an interface", short(s))
	case a.Is4In6():
		return netip.Addr{}, fmt.Errorf("%s is an IPv4-mapped IPv6 address: write the IPv4 address", short(s))
	}
	return a, nil
}

// checkCIDR reads a range as the API server's strict CIDR validation does:
// no leading zeros, no IPv4-mapped IPv6, no bits set past the prefix.
func checkCIDR(s string) error {
	p, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		return fmt.Errorf("not a CIDR: %s", short(s))
	case p.Addr().Is4In6():
		return fmt.Errorf("%s has an IPv4-mapped IPv6 address: write the IPv4 range", short(s))
	case p != p.Masked():
		return fmt.Errorf("%s has bits set past the prefix length: write %s", short(s), p.Masked())
	}
	return nil
}

// checkServable refuses an address no Service traffic can use, as a VIP
// or as an endpoint: the API server refuses unspecified, loopback,
// link-local and link-local multicast external IPs and endpoint addresses
// (ValidateEndpointIP). All multicast is refused here, for ClusterIPs and
// load-balancer IPs too: IPVS cannot balance a group address, and binding
// such an address on the node would break the node, not serve a Service.
func checkServable(a netip.Addr) error {
	switch {
	case a.IsUnspecified():
		return fmt.Errorf("%s may not be unspecified", a)
	case a.IsLoopback():
		return fmt.Errorf("%s may not be in the loopback range (127.0.0.0/8, ::1/128)", a)
	case a.IsLinkLocalUnicast():
		return fmt.Errorf("%s may not be in the link-local range (169.254.0.0/16, fe80::/10)", a)
	case a.IsMulticast():
		return fmt.Errorf("%s may not be multicast (224.0.0.0/4, ff00::/8)", a)
	}
	return nil
}

// parseServable is parseIP then checkServable.
func parseServable(s string) (netip.Addr, error) {
	a, err := parseIP(s)
	if err != nil {
		return a, err
	}
	return a, checkServable(a)
}

func checkProtocol(path string, p corev1.Protocol, errs *fieldErrors) {
	switch p {
	case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
	default:
		errs.add(path, "must be TCP, UDP or SCTP, got %s", short(string(p)))
	}
}

func checkPortNum(path string, p int32, errs *fieldErrors) {
	if p < 1 || p > 65535 {
		errs.add(path, "must be 1-65535, got %d", p)
	}
}

func defaultService(s *corev1.Service) {
	if s.Namespace == "" {
		s.Namespace = metav1.NamespaceDefault
	}
	sp := &s.Spec
	if sp.Type == "" {
		sp.Type = corev1.ServiceTypeClusterIP
	}
	if sp.SessionAffinity == "" {
		sp.SessionAffinity = corev1.ServiceAffinityNone
	}
	if sp.SessionAffinity == corev1.ServiceAffinityClientIP {
		if sp.SessionAffinityConfig == nil {
			sp.SessionAffinityConfig = &corev1.SessionAffinityConfig{}
		}
		if sp.SessionAffinityConfig.ClientIP == nil {
			sp.SessionAffinityConfig.ClientIP = &corev1.ClientIPConfig{}
		}
		if sp.SessionAffinityConfig.ClientIP.TimeoutSeconds == nil {
			t := corev1.DefaultClientIPServiceAffinitySeconds
			sp.SessionAffinityConfig.ClientIP.TimeoutSeconds = &t
		}
	}
	// The API keeps clusterIP == clusterIPs[0]; accept either spelling.
	if len(sp.ClusterIPs) == 0 && sp.ClusterIP != "" {
		sp.ClusterIPs = []string{sp.ClusterIP}
	}
	if sp.ClusterIP == "" && len(sp.ClusterIPs) > 0 {
		sp.ClusterIP = sp.ClusterIPs[0]
	}
	if len(sp.IPFamilies) == 0 {
		for _, ip := range sp.ClusterIPs {
			if a, err := netip.ParseAddr(ip); err == nil {
				sp.IPFamilies = append(sp.IPFamilies, familyOf(a))
			}
		}
	}
	for i := range sp.Ports {
		p := &sp.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.TargetPort.Type == intstr.Int && p.TargetPort.IntVal == 0 {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	if sp.InternalTrafficPolicy == nil {
		p := corev1.ServiceInternalTrafficPolicyCluster
		sp.InternalTrafficPolicy = &p
	}
	if sp.ExternalTrafficPolicy == "" && externallyAccessible(s) {
		sp.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
}

// externallyAccessible is the API server's test for a Service that
// externalTrafficPolicy applies to.
func externallyAccessible(s *corev1.Service) bool {
	switch s.Spec.Type {
	case corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		return true
	case corev1.ServiceTypeClusterIP:
		return len(s.Spec.ExternalIPs) > 0
	}
	return false
}

func familyOf(a netip.Addr) corev1.IPFamily {
	if a.Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

func defaultSlice(s *discoveryv1.EndpointSlice) {
	if s.Namespace == "" {
		s.Namespace = metav1.NamespaceDefault
	}
	for i := range s.Ports {
		if s.Ports[i].Protocol == nil {
			tcp := corev1.ProtocolTCP
			s.Ports[i].Protocol = &tcp
		}
	}
}
