package model

import "cmp"

// ServiceName is a Service's namespace and name.
type ServiceName struct {
	Namespace, Name string
}

func (n ServiceName) String() string { return n.Namespace + "/" + n.Name }

// Compare orders names by namespace then name.
func (n ServiceName) Compare(o ServiceName) int {
	return cmp.Or(cmp.Compare(n.Namespace, o.Namespace), cmp.Compare(n.Name, o.Name))
}

// LabelServiceProxyName hands a Service (or EndpointSlice) to an
// alternative proxy (KEP-2447); kube-proxy ignores every object carrying it.
// Translation skips such objects and the Kubernetes source selects on the
// label too, so the two agree.
const LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"
