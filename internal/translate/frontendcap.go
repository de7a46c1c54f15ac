package translate

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// DefaultMaxFrontends is how many virtual servers one Service may have
// when Config does not say (--max-frontends-per-service). Every frontend
// of every Service is a member of the shim's shared sets, which hold
// 2^20 (shim.MaxSetMembers): one Service of 1,024 external IPs on 1,024
// ports, a 70 KB object, would fill them, and then no frontend of any
// Service could be made. 8,192 is far above what a Service asks for in
// practice (a 1,000-port dual-stack LoadBalancer Service served on two
// node addresses per family is 8,000), and 128 Services at the cap are
// needed to fill the sets, which a ResourceQuota on services bounds.
const DefaultMaxFrontends = 8192

// ErrTooManyFrontends marks the warning of a Service that has more
// frontends than the cap: only the first ones are served.
var ErrTooManyFrontends = errors.New("too many frontends")

// maxFrontends is the cap cfg sets.
func (cfg Config) maxFrontends() int {
	if cfg.MaxFrontends > 0 {
		return cfg.MaxFrontends
	}
	return DefaultMaxFrontends
}

// kindRank orders frontend kinds for the cap: ClusterIPs first (the
// address every client in the cluster uses, allocated by the API server),
// then load-balancer ingress IPs (a controller's), NodePorts (the node's
// addresses) and external IPs last (anyone's claim, and the list any user
// can grow without bound).
func kindRank(k FrontendKind) int {
	switch k {
	case KindClusterIP:
		return 0
	case KindLoadBalancer:
		return 1
	case KindNodePort:
		return 2
	}
	return 3
}

// cappedFrontends returns nil when the Service's frontends fit the cap.
// Otherwise it returns the keys of those served and a warning: the
// frontends in kindRank order, within a kind address by address in the
// order the Service (or the node, for NodePorts) lists them, each address
// on the Service's ports in their order; the first max distinct keys are
// kept. The order depends on the objects alone, so every node and every
// translation keeps the same ones.
func cappedFrontends(svc *corev1.Service, ports []servicePort, nodeAddrs []netip.Addr, cfg Config) (map[model.VSKey]struct{}, error) {
	limit := cfg.maxFrontends()
	if countFrontends(svc, ports, nodeAddrs) <= limit {
		return nil, nil
	}
	type ranked struct {
		rank, addr, port int
		key              model.VSKey
	}
	var all []ranked
	for pi, p := range ports {
		nth := map[FrontendKind]int{}
		for _, fe := range frontends(svc, p, nodeAddrs, cfg) {
			all = append(all, ranked{rank: kindRank(fe.kind), addr: nth[fe.kind], port: pi, key: model.NewVSKey(p.proto, fe.addr, fe.port)})
			nth[fe.kind]++
		}
	}
	slices.SortStableFunc(all, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.addr, b.addr), cmp.Compare(a.port, b.port))
	})
	keep := make(map[model.VSKey]struct{}, limit)
	dropped := 0
	for _, f := range all {
		if _, dup := keep[f.key]; dup {
			continue
		}
		if len(keep) == limit {
			dropped++
			continue
		}
		keep[f.key] = struct{}{}
	}
	if dropped == 0 {
		return nil, nil
	}
	return keep, fmt.Errorf("%w: %d of its frontends are not served, the cap is %d (--max-frontends-per-service); ClusterIPs are served first, then load-balancer IPs, NodePorts and external IPs",
		ErrTooManyFrontends, dropped, limit)
}

// countFrontends is an upper bound of the Service's frontends (an
// address listed twice is counted twice), without building them: most
// Services are far below the cap, and their translation should not pay
// for it.
func countFrontends(svc *corev1.Service, ports []servicePort, nodeAddrs []netip.Addr) int {
	perPort := len(clusterIPs(svc)) + len(svc.Spec.ExternalIPs)
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		perPort += len(svc.Status.LoadBalancer.Ingress)
	}
	n := perPort * len(ports)
	if hasNodePort(svc) {
		for _, p := range ports {
			if p.nodePort != 0 {
				n += len(nodeAddrs)
			}
		}
	}
	return n
}
