package source

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The API server's limits on an EndpointSlice (pkg/apis/discovery/validation).
const (
	maxSliceEndpoints = 1000
	maxSliceAddresses = 100 // per endpoint
	maxSlicePorts     = 20000
	maxHints          = 8 // zones, and nodes, per endpoint
)

// slice validates a defaulted EndpointSlice.
func (r rules) slice(s *discoveryv1.EndpointSlice) error {
	var errs fieldErrors
	errs.addList(apivalidation.ValidateObjectMeta(&s.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata")))
	if s.Labels[discoveryv1.LabelServiceName] == "" {
		errs.add("metadata.labels", "%s is required: it names the Service", discoveryv1.LabelServiceName)
	}
	switch s.AddressType {
	case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN:
	default:
		errs.add("addressType", "must be IPv4, IPv6 or FQDN, got %s", short(string(s.AddressType)))
	}
	if len(s.Endpoints) > maxSliceEndpoints {
		errs.add("endpoints", "at most %d, got %d", maxSliceEndpoints, len(s.Endpoints))
	} else {
		for i, ep := range s.Endpoints {
			validateEndpoint(fmt.Sprintf("endpoints[%d]", i), s.AddressType, ep, &errs)
		}
	}
	validateSlicePorts(s.Ports, &errs)
	return errs.err()
}

func validateEndpoint(path string, t discoveryv1.AddressType, ep discoveryv1.Endpoint, errs *fieldErrors) {
	switch n := len(ep.Addresses); {
	case n == 0:
		errs.add(path+".addresses", "at least one address is required")
	case n > maxSliceAddresses:
		errs.add(path+".addresses", "at most %d, got %d", maxSliceAddresses, n)
		return
	}
	for j, addr := range ep.Addresses {
		if err := checkAddress(t, addr); err != nil {
			errs.add(fmt.Sprintf("%s.addresses[%d]", path, j), "%v", err)
		}
	}
	if ep.NodeName != nil {
		errs.addMsgs(path+".nodeName", apivalidation.NameIsDNSSubdomain(*ep.NodeName, false))
	}
	if ep.Hostname != nil {
		errs.addMsgs(path+".hostname", validation.IsDNS1123Label(*ep.Hostname))
	}
	if ep.Zone != nil {
		errs.addMsgs(path+".zone", validation.IsValidLabelValue(*ep.Zone))
	}
	errs.addList(metavalidation.ValidateLabels(ep.DeprecatedTopology, field.NewPath(path+".deprecatedTopology")))
	if ep.Hints != nil {
		validateHints(path+".hints", ep.Hints, errs)
	}
}

// checkAddress checks an endpoint address: one of the slice's family, and
// one traffic can be sent to (not loopback, link-local, multicast or
// unspecified: a real server on 127.0.0.1 would reach the node's own
// services). IPv6 addresses must be in canonical form, as the API server
// asks of them.
func checkAddress(t discoveryv1.AddressType, addr string) error {
	if t == discoveryv1.AddressTypeFQDN {
		if list := validation.IsFullyQualifiedDomainName(field.NewPath("address"), addr); len(list) > 0 {
			return fmt.Errorf("%s: %s", short(addr), list[0].Detail)
		}
		return nil
	}
	a, err := parseServable(addr)
	if err != nil {
		return err
	}
	if (t == discoveryv1.AddressTypeIPv4) != a.Is4() {
		return fmt.Errorf("%s is not an %s address", short(addr), t)
	}
	if a.Is6() && a.String() != addr {
		return fmt.Errorf("%s must be in canonical form (%q)", short(addr), a.String())
	}
	return nil
}

func validateHints(path string, h *discoveryv1.EndpointHints, errs *fieldErrors) {
	if len(h.ForZones) > maxHints {
		errs.add(path+".forZones", "at most %d, got %d", maxHints, len(h.ForZones))
	}
	for i, z := range h.ForZones {
		errs.addMsgs(fmt.Sprintf("%s.forZones[%d].name", path, i), validation.IsValidLabelValue(z.Name))
	}
	if len(h.ForNodes) > maxHints {
		errs.add(path+".forNodes", "at most %d, got %d", maxHints, len(h.ForNodes))
	}
	for i, n := range h.ForNodes {
		errs.addMsgs(fmt.Sprintf("%s.forNodes[%d].name", path, i), apivalidation.NameIsDNSSubdomain(n.Name, false))
	}
}

func validateSlicePorts(ports []discoveryv1.EndpointPort, errs *fieldErrors) {
	if len(ports) > maxSlicePorts {
		errs.add("ports", "at most %d, got %d", maxSlicePorts, len(ports))
		return
	}
	names := map[string]bool{}
	for i, p := range ports {
		path := fmt.Sprintf("ports[%d]", i)
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		if name != "" {
			errs.addMsgs(path+".name", validation.IsDNS1123Label(name))
		}
		if names[name] {
			errs.add(path+".name", "duplicate %s", short(name))
		}
		names[name] = true
		checkProtocol(path+".protocol", *p.Protocol, errs)
		// A nil port means "all ports"; a set one must be real.
		if p.Port != nil {
			checkPortNum(path+".port", *p.Port, errs)
		}
		if p.AppProtocol != nil {
			errs.addMsgs(path+".appProtocol", validation.IsQualifiedName(*p.AppProtocol))
		}
	}
}

// node validates a Node: its name, and the addresses NodePorts listen on.
func (r rules) node(n *corev1.Node) error {
	var errs fieldErrors
	errs.addList(apivalidation.ValidateObjectMeta(&n.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata")))
	for i, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if _, err := parseIP(a.Address); err != nil {
			errs.add(fmt.Sprintf("status.addresses[%d].address", i), "%v", err)
		}
	}
	return errs.err()
}
