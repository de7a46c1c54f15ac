package source

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// annotationSourceRanges is the older spelling of loadBalancerSourceRanges.
const annotationSourceRanges = corev1.AnnotationLoadBalancerSourceRangesKey

// service validates a defaulted Service.
func (r rules) service(s *corev1.Service) error {
	var errs fieldErrors
	// Service names are DNS-1123 labels (KEP-5311 relaxed them from
	// DNS-1035 labels; GA in Kubernetes 1.37).
	errs.addList(apivalidation.ValidateObjectMeta(&s.ObjectMeta, true, apivalidation.NameIsDNSLabel, field.NewPath("metadata")))
	sp := &s.Spec
	switch sp.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
	case corev1.ServiceTypeExternalName:
		validateExternalName(sp, &errs)
	default:
		errs.add("spec.type", "unknown type %s", short(string(sp.Type)))
	}
	if sp.Type != corev1.ServiceTypeExternalName {
		validateClusterIPs(s, &errs)
	}
	for i, ip := range sp.ExternalIPs {
		if _, err := parseServable(ip); err != nil {
			errs.add(fmt.Sprintf("spec.externalIPs[%d]", i), "%v", err)
		}
	}
	validateSourceRanges(s, &errs)
	validateIngress(s, &errs)
	validateServicePorts(s, &errs)
	r.validateNodePorts(s, &errs)
	validateAffinity(sp, &errs)
	validatePolicies(s, &errs)
	if sp.Selector != nil {
		errs.addList(metavalidation.ValidateLabels(sp.Selector, field.NewPath("spec", "selector")))
	}
	return errs.err()
}

func validateExternalName(sp *corev1.ServiceSpec, errs *fieldErrors) {
	if len(sp.ClusterIPs) > 0 {
		errs.add("spec.clusterIPs", "may not be set for ExternalName services")
	}
	// The name may end in a dot to mark it fully qualified.
	if name := strings.TrimSuffix(sp.ExternalName, "."); name == "" {
		errs.add("spec.externalName", "required for ExternalName services")
	} else {
		errs.addMsgs("spec.externalName", validation.IsDNS1123Subdomain(name))
	}
}

func validateClusterIPs(s *corev1.Service, errs *fieldErrors) {
	sp := &s.Spec
	if len(sp.ClusterIPs) > 0 && sp.ClusterIP != sp.ClusterIPs[0] {
		errs.add("spec.clusterIP", "must equal spec.clusterIPs[0] (%s), got %s", short(sp.ClusterIPs[0]), short(sp.ClusterIP))
	}
	if len(sp.ClusterIPs) > 2 {
		errs.add("spec.clusterIPs", "at most one address per family, got %d", len(sp.ClusterIPs))
	}
	var families []corev1.IPFamily
	for i, ip := range sp.ClusterIPs {
		path := fmt.Sprintf("spec.clusterIPs[%d]", i)
		if ip == corev1.ClusterIPNone {
			if len(sp.ClusterIPs) > 1 {
				errs.add(path, "None must be the only entry")
			}
			if sp.Type == corev1.ServiceTypeNodePort || sp.Type == corev1.ServiceTypeLoadBalancer {
				errs.add(path, "may not be None for %s services", sp.Type)
			}
			continue
		}
		a, err := parseServable(ip)
		if err != nil {
			errs.add(path, "%v", err)
			continue
		}
		f := familyOf(a)
		for _, g := range families {
			if f == g {
				errs.add(path, "a second %s address", f)
			}
		}
		if i < len(sp.IPFamilies) && sp.IPFamilies[i] != f {
			errs.add(fmt.Sprintf("spec.ipFamilies[%d]", i), "must be %s, the family of spec.clusterIPs[%d]", f, i)
		}
		families = append(families, f)
	}
	validateIPFamilies(sp, errs)
}

func validateIPFamilies(sp *corev1.ServiceSpec, errs *fieldErrors) {
	if len(sp.IPFamilies) > 2 {
		errs.add("spec.ipFamilies", "at most two, got %d", len(sp.IPFamilies))
	}
	for i, f := range sp.IPFamilies {
		if f != corev1.IPv4Protocol && f != corev1.IPv6Protocol {
			errs.add(fmt.Sprintf("spec.ipFamilies[%d]", i), "must be IPv4 or IPv6, got %s", short(string(f)))
		}
		if i == 1 && f == sp.IPFamilies[0] {
			errs.add("spec.ipFamilies[1]", "duplicate %s", f)
		}
	}
	if p := sp.IPFamilyPolicy; p != nil {
		switch *p {
		case corev1.IPFamilyPolicySingleStack:
			if len(sp.ClusterIPs) > 1 || len(sp.IPFamilies) > 1 {
				errs.add("spec.ipFamilyPolicy", "SingleStack allows one address and one family")
			}
		case corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack:
		default:
			errs.add("spec.ipFamilyPolicy", "must be SingleStack, PreferDualStack or RequireDualStack, got %s", short(string(*p)))
		}
	}
}

// validateSourceRanges checks loadBalancerSourceRanges, else the older
// annotation, as the API server does: CIDRs (spaces around them allowed),
// only on a LoadBalancer.
func validateSourceRanges(s *corev1.Service, errs *fieldErrors) {
	list, path := s.Spec.LoadBalancerSourceRanges, "spec.loadBalancerSourceRanges"
	if len(list) == 0 {
		a, ok := s.Annotations[annotationSourceRanges]
		if !ok {
			return
		}
		path = "metadata.annotations[" + annotationSourceRanges + "]"
		if a = strings.TrimSpace(a); a != "" {
			list = strings.Split(a, ",")
		}
	}
	if len(list) > 0 && s.Spec.Type != corev1.ServiceTypeLoadBalancer {
		errs.add(path, "may only be used when type is LoadBalancer")
	}
	for i, r := range list {
		if err := checkCIDR(strings.TrimSpace(r)); err != nil {
			errs.add(fmt.Sprintf("%s[%d]", path, i), "%v", err)
		}
	}
}

func validateIngress(s *corev1.Service, errs *fieldErrors) {
	ingress := s.Status.LoadBalancer.Ingress
	if len(ingress) > 0 && s.Spec.Type != corev1.ServiceTypeLoadBalancer {
		errs.add("status.loadBalancer.ingress", "may only be used when spec.type is LoadBalancer")
	}
	for i, in := range ingress {
		path := fmt.Sprintf("status.loadBalancer.ingress[%d]", i)
		if in.IP != "" {
			if _, err := parseServable(in.IP); err != nil {
				errs.add(path+".ip", "%v", err)
			}
		}
		if in.IPMode != nil {
			switch {
			case in.IP == "":
				errs.add(path+".ipMode", "may not be set when ip is not")
			case *in.IPMode != corev1.LoadBalancerIPModeVIP && *in.IPMode != corev1.LoadBalancerIPModeProxy:
				errs.add(path+".ipMode", "must be VIP or Proxy, got %s", short(string(*in.IPMode)))
			}
		}
		if in.Hostname != "" {
			errs.addMsgs(path+".hostname", validation.IsDNS1123Subdomain(in.Hostname))
			if _, err := parseIP(in.Hostname); err == nil {
				errs.add(path+".hostname", "must be a DNS name, not an IP address")
			}
		}
	}
}

// validateServicePorts checks each port and that no two ports share a
// name, a port/protocol pair or a nodePort/protocol pair.
func validateServicePorts(s *corev1.Service, errs *fieldErrors) {
	ports := s.Spec.Ports
	headless := len(s.Spec.ClusterIPs) > 0 && s.Spec.ClusterIPs[0] == corev1.ClusterIPNone
	if len(ports) == 0 && !headless && s.Spec.Type != corev1.ServiceTypeExternalName {
		errs.add("spec.ports", "at least one port is required")
	}
	type pair struct {
		proto corev1.Protocol
		port  int32
	}
	names := map[string]bool{}
	seen, seenNode := map[pair]int{}, map[pair]int{}
	for i, p := range ports {
		path := fmt.Sprintf("spec.ports[%d]", i)
		validateServicePort(path, p, len(ports) > 1, errs)
		if p.Name != "" && names[p.Name] {
			errs.add(path+".name", "duplicate %s", short(p.Name))
		}
		names[p.Name] = true
		if j, dup := seen[pair{p.Protocol, p.Port}]; dup {
			errs.add(path, "duplicate port %d/%s (spec.ports[%d])", p.Port, p.Protocol, j)
		} else {
			seen[pair{p.Protocol, p.Port}] = i
		}
		if p.NodePort == 0 {
			continue
		}
		if s.Spec.Type == corev1.ServiceTypeClusterIP {
			errs.add(path+".nodePort", "may not be used when type is ClusterIP")
		}
		if j, dup := seenNode[pair{p.Protocol, p.NodePort}]; dup {
			errs.add(path+".nodePort", "duplicate nodePort %d/%s (spec.ports[%d])", p.NodePort, p.Protocol, j)
		} else {
			seenNode[pair{p.Protocol, p.NodePort}] = i
		}
	}
}

func validateServicePort(path string, p corev1.ServicePort, requireName bool, errs *fieldErrors) {
	if p.Name == "" && requireName {
		errs.add(path+".name", "required when there is more than one port")
	} else if p.Name != "" {
		errs.addMsgs(path+".name", validation.IsDNS1123Label(p.Name))
	}
	checkProtocol(path+".protocol", p.Protocol, errs)
	checkPortNum(path+".port", p.Port, errs)
	if p.TargetPort.Type == intstr.String {
		errs.addMsgs(path+".targetPort", validation.IsValidPortName(p.TargetPort.StrVal))
	} else {
		checkPortNum(path+".targetPort", p.TargetPort.IntVal, errs)
	}
	if p.AppProtocol != nil {
		errs.addMsgs(path+".appProtocol", validation.IsQualifiedName(*p.AppProtocol))
	}
}

// validateNodePorts checks node ports against the NodePort range, which
// the API server's allocator enforces: a healthCheckNodePort of 22 would
// otherwise put the health checks on the node's SSH port.
func (r rules) validateNodePorts(s *corev1.Service, errs *fieldErrors) {
	check := func(path string, p int32) {
		switch {
		case p < 1 || p > 65535:
			errs.add(path, "must be 1-65535, got %d", p)
		case r.nodePorts != (model.PortRange{}) && !r.nodePorts.Contains(uint16(p)):
			errs.add(path, "%d is outside the NodePort range %s", p, r.nodePorts)
		}
	}
	for i, p := range s.Spec.Ports {
		if p.NodePort != 0 {
			check(fmt.Sprintf("spec.ports[%d].nodePort", i), p.NodePort)
		}
	}
	if hc := s.Spec.HealthCheckNodePort; hc != 0 {
		if !needsHealthCheck(s) {
			errs.add("spec.healthCheckNodePort", "may only be set when type is LoadBalancer and externalTrafficPolicy is Local")
		}
		check("spec.healthCheckNodePort", hc)
		for i, p := range s.Spec.Ports {
			if p.NodePort == hc {
				errs.add("spec.healthCheckNodePort", "%d is also spec.ports[%d].nodePort", hc, i)
			}
		}
	}
}

func needsHealthCheck(s *corev1.Service) bool {
	return s.Spec.Type == corev1.ServiceTypeLoadBalancer && s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}

func validateAffinity(sp *corev1.ServiceSpec, errs *fieldErrors) {
	switch sp.SessionAffinity {
	case corev1.ServiceAffinityNone:
		if sp.SessionAffinityConfig != nil {
			errs.add("spec.sessionAffinityConfig", "must not be set when sessionAffinity is None")
		}
	case corev1.ServiceAffinityClientIP:
		if t := *sp.SessionAffinityConfig.ClientIP.TimeoutSeconds; t < 1 || t > 86400 {
			errs.add("spec.sessionAffinityConfig.clientIP.timeoutSeconds", "must be 1-86400, got %d", t)
		}
	default:
		errs.add("spec.sessionAffinity", "must be None or ClientIP, got %s", short(string(sp.SessionAffinity)))
	}
}

func validatePolicies(s *corev1.Service, errs *fieldErrors) {
	sp := &s.Spec
	switch {
	case sp.ExternalTrafficPolicy != "" && !externallyAccessible(s):
		errs.add("spec.externalTrafficPolicy", "may only be set for externally-accessible services")
	case sp.ExternalTrafficPolicy == "", sp.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyCluster,
		sp.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal:
	default:
		errs.add("spec.externalTrafficPolicy", "must be Cluster or Local, got %s", short(string(sp.ExternalTrafficPolicy)))
	}
	switch *sp.InternalTrafficPolicy {
	case corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal:
	default:
		errs.add("spec.internalTrafficPolicy", "must be Cluster or Local, got %s", short(string(*sp.InternalTrafficPolicy)))
	}
	if d := sp.TrafficDistribution; d != nil {
		switch *d {
		case corev1.ServiceTrafficDistributionPreferClose, corev1.ServiceTrafficDistributionPreferSameZone,
			corev1.ServiceTrafficDistributionPreferSameNode:
		default:
			errs.add("spec.trafficDistribution", "must be PreferClose, PreferSameZone or PreferSameNode, got %s", short(*d))
		}
	}
}
