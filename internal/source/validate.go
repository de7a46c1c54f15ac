package source

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The API server defaults and validates objects before informers see them;
// a manifest folder has no API server, so this file does the part of that
// work the translator relies on. Only what matters to a load balancer is
// checked: a mistake elsewhere (a bad selector) cannot hurt us.

// fieldErrors collects "path: reason" lines and reports them as one error.
type fieldErrors []string

func (e *fieldErrors) add(path, format string, args ...any) {
	*e = append(*e, path+": "+fmt.Sprintf(format, args...))
}

func (e fieldErrors) err() error {
	if len(e) == 0 {
		return nil
	}
	return errors.New(strings.Join(e, "; "))
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
	if sp.ExternalTrafficPolicy == "" && (sp.Type == corev1.ServiceTypeNodePort || sp.Type == corev1.ServiceTypeLoadBalancer) {
		sp.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
}

func familyOf(a netip.Addr) corev1.IPFamily {
	if a.Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

func validateService(s *corev1.Service) error {
	var errs fieldErrors
	if s.Name == "" {
		errs.add("metadata.name", "required")
	}
	sp := &s.Spec
	switch sp.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeExternalName:
	default:
		errs.add("spec.type", "unknown type %q", sp.Type)
	}
	validateClusterIPs(sp, &errs)
	for i, ip := range sp.ExternalIPs {
		if _, err := netip.ParseAddr(ip); err != nil {
			errs.add(fmt.Sprintf("spec.externalIPs[%d]", i), "not an IP address: %q", ip)
		}
	}
	for i, r := range sp.LoadBalancerSourceRanges {
		if _, err := netip.ParsePrefix(strings.TrimSpace(r)); err != nil {
			errs.add(fmt.Sprintf("spec.loadBalancerSourceRanges[%d]", i), "not a CIDR: %q", r)
		}
	}
	for i, in := range s.Status.LoadBalancer.Ingress {
		if _, err := netip.ParseAddr(in.IP); in.IP != "" && err != nil {
			errs.add(fmt.Sprintf("status.loadBalancer.ingress[%d].ip", i), "not an IP address: %q", in.IP)
		}
	}
	validateServicePorts(sp.Ports, &errs)
	switch sp.SessionAffinity {
	case corev1.ServiceAffinityNone:
	case corev1.ServiceAffinityClientIP:
		if t := *sp.SessionAffinityConfig.ClientIP.TimeoutSeconds; t < 1 || t > 86400 {
			errs.add("spec.sessionAffinityConfig.clientIP.timeoutSeconds", "must be 1-86400, got %d", t)
		}
	default:
		errs.add("spec.sessionAffinity", "must be None or ClientIP, got %q", sp.SessionAffinity)
	}
	switch sp.ExternalTrafficPolicy {
	case "", corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal:
	default:
		errs.add("spec.externalTrafficPolicy", "must be Cluster or Local, got %q", sp.ExternalTrafficPolicy)
	}
	switch *sp.InternalTrafficPolicy {
	case corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal:
	default:
		errs.add("spec.internalTrafficPolicy", "must be Cluster or Local, got %q", *sp.InternalTrafficPolicy)
	}
	return errs.err()
}

func validateClusterIPs(sp *corev1.ServiceSpec, errs *fieldErrors) {
	if len(sp.ClusterIPs) > 0 && sp.ClusterIP != sp.ClusterIPs[0] {
		errs.add("spec.clusterIP", "must equal spec.clusterIPs[0] (%q), got %q", sp.ClusterIPs[0], sp.ClusterIP)
	}
	if len(sp.ClusterIPs) > 2 {
		errs.add("spec.clusterIPs", "at most one address per family, got %d", len(sp.ClusterIPs))
	}
	var families []corev1.IPFamily
	for i, ip := range sp.ClusterIPs {
		if ip == corev1.ClusterIPNone {
			if len(sp.ClusterIPs) > 1 {
				errs.add(fmt.Sprintf("spec.clusterIPs[%d]", i), "None must be the only entry")
			}
			continue
		}
		a, err := netip.ParseAddr(ip)
		if err != nil {
			errs.add(fmt.Sprintf("spec.clusterIPs[%d]", i), "not an IP address or None: %q", ip)
			continue
		}
		for _, f := range families {
			if f == familyOf(a) {
				errs.add(fmt.Sprintf("spec.clusterIPs[%d]", i), "a second %s address", f)
			}
		}
		families = append(families, familyOf(a))
	}
}

func validateServicePorts(ports []corev1.ServicePort, errs *fieldErrors) {
	names := map[string]bool{}
	for i, p := range ports {
		path := fmt.Sprintf("spec.ports[%d]", i)
		if len(ports) > 1 && p.Name == "" {
			errs.add(path+".name", "required when there is more than one port")
		}
		if names[p.Name] && p.Name != "" {
			errs.add(path+".name", "duplicate %q", p.Name)
		}
		names[p.Name] = true
		checkProtocol(path+".protocol", p.Protocol, errs)
		if p.Port < 1 || p.Port > 65535 {
			errs.add(path+".port", "must be 1-65535, got %d", p.Port)
		}
		if p.NodePort < 0 || p.NodePort > 65535 {
			errs.add(path+".nodePort", "must be 0-65535, got %d", p.NodePort)
		}
		switch {
		case p.TargetPort.Type == intstr.String && p.TargetPort.StrVal == "":
			errs.add(path+".targetPort", "empty name")
		case p.TargetPort.Type == intstr.Int && (p.TargetPort.IntVal < 1 || p.TargetPort.IntVal > 65535):
			errs.add(path+".targetPort", "must be 1-65535, got %d", p.TargetPort.IntVal)
		}
	}
}

func checkProtocol(path string, p corev1.Protocol, errs *fieldErrors) {
	switch p {
	case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
	default:
		errs.add(path, "must be TCP, UDP or SCTP, got %q", p)
	}
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

func validateSlice(s *discoveryv1.EndpointSlice) error {
	var errs fieldErrors
	if s.Name == "" {
		errs.add("metadata.name", "required")
	}
	if s.Labels[discoveryv1.LabelServiceName] == "" {
		errs.add("metadata.labels", "%s is required: it names the Service", discoveryv1.LabelServiceName)
	}
	switch s.AddressType {
	case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN:
	default:
		errs.add("addressType", "must be IPv4, IPv6 or FQDN, got %q", s.AddressType)
	}
	for i, ep := range s.Endpoints {
		path := fmt.Sprintf("endpoints[%d].addresses", i)
		if len(ep.Addresses) == 0 {
			errs.add(path, "at least one address is required")
		}
		for j, addr := range ep.Addresses {
			if err := checkAddress(s.AddressType, addr); err != nil {
				errs.add(fmt.Sprintf("%s[%d]", path, j), "%v", err)
			}
		}
	}
	names := map[string]bool{}
	for i, p := range s.Ports {
		path := fmt.Sprintf("ports[%d]", i)
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		if names[name] {
			errs.add(path+".name", "duplicate %q", name)
		}
		names[name] = true
		checkProtocol(path+".protocol", *p.Protocol, &errs)
		// A nil port means "all ports"; a set one must be real.
		if p.Port != nil && (*p.Port < 1 || *p.Port > 65535) {
			errs.add(path+".port", "must be 1-65535, got %d", *p.Port)
		}
	}
	return errs.err()
}

func checkAddress(t discoveryv1.AddressType, addr string) error {
	if t == discoveryv1.AddressTypeFQDN {
		if addr == "" {
			return errors.New("empty name")
		}
		return nil
	}
	a, err := netip.ParseAddr(addr)
	if err != nil || a.Zone() != "" {
		return fmt.Errorf("not an IP address: %q", addr)
	}
	if (t == discoveryv1.AddressTypeIPv4) != a.Is4() {
		return fmt.Errorf("%q is not an %s address", addr, t)
	}
	return nil
}

func validateNode(n *corev1.Node) error {
	var errs fieldErrors
	if n.Name == "" {
		errs.add("metadata.name", "required")
	}
	for i, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if _, err := netip.ParseAddr(a.Address); err != nil {
			errs.add(fmt.Sprintf("status.addresses[%d].address", i), "not an IP address: %q", a.Address)
		}
	}
	return errs.err()
}
