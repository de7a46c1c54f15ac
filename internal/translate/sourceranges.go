package translate

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// annotationSourceRanges is the older way to give loadBalancerSourceRanges.
// kube-proxy itself reads only the field; cloud providers' load balancers
// honour the annotation when the field is empty (the API server validates
// both), so a node filtering by it only repeats what the load balancer was
// told to do.
const annotationSourceRanges = "service.beta.kubernetes.io/load-balancer-source-ranges"

// sourceFilter is what a Service's source ranges ask of its load-balancer
// frontends.
type sourceFilter struct {
	// denyAll is set when a range could not be read: the frontends of both
	// families are filtered and no client is allowed. Failing open would let
	// in clients the owner meant to keep out; failing closed is loud (a
	// Warning Event) and fixed by correcting the range.
	denyAll bool
	// ranges are the allowed client ranges by family (index 1: IPv6).
	ranges [2][]netip.Prefix
}

// forFamily tells whether the frontends of a family are filtered and which
// client ranges they allow. A family without ranges is not filtered, and a
// zero-length prefix in a family's list allows every client of the family,
// so that family is not filtered either (as kube-proxy's IsZeroCIDR): the
// kernel's hash:ip,port,net set cannot hold a /0 member, and asking it to
// would block everyone instead of no one.
func (f sourceFilter) forFamily(v6 bool) (filtered bool, allowed []netip.Prefix) {
	if f.denyAll {
		return true, nil
	}
	ranges := f.ranges[familyIndex(v6)]
	for _, p := range ranges {
		if p.Bits() == 0 {
			return false, nil
		}
	}
	return len(ranges) > 0, ranges
}

func familyIndex(v6 bool) int {
	if v6 {
		return 1
	}
	return 0
}

// sourceRanges reads spec.loadBalancerSourceRanges, else the annotation.
// Ranges are trimmed of spaces (the API server has let padding through);
// one that does not parse strictly (a typo, an empty item, the leading-zero
// IPv4 form the API server once allowed) makes the filter deny all, and the
// error says which range and where it came from. Only a LoadBalancer
// Service has frontends they filter.
func sourceRanges(svc *corev1.Service) (sourceFilter, error) {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return sourceFilter{}, nil
	}
	list, field := svc.Spec.LoadBalancerSourceRanges, "spec.loadBalancerSourceRanges[%d]"
	if len(list) == 0 {
		a := strings.TrimSpace(svc.Annotations[annotationSourceRanges])
		if a == "" {
			return sourceFilter{}, nil
		}
		list, field = strings.Split(a, ","), "annotation "+annotationSourceRanges+" item %d"
	}
	var f sourceFilter
	for i, s := range list {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return sourceFilter{denyAll: true}, fmt.Errorf("source range %s %s does not parse, so the load balancer allows no client until it is fixed: %w",
				fmt.Sprintf(field, i), quote(s), bounded(err, s, "a CIDR"))
		}
		i := familyIndex(p.Addr().Is6())
		f.ranges[i] = append(f.ranges[i], p.Masked())
	}
	return f, nil
}
