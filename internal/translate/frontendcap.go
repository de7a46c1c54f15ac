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
// Otherwise it returns, for each of ports, the frontends served, and a
// warning. The frontends are taken in kindRank order, within a kind
// address by address in the order the Service (or the node, for
// NodePorts) lists them, each address on the Service's ports in their
// order, until limit distinct ones are kept. The order depends on the
// objects alone, so every node and every translation keeps the same
// ones. The work is the addresses' and the kept frontends', not all the
// Service asks for: a Service of a million frontends costs about what
// one at the cap does.
func cappedFrontends(svc *corev1.Service, ports []servicePort, nodeAddrs []netip.Addr, cfg Config) ([][]frontend, error) {
	limit := cfg.maxFrontends()
	if countFrontends(svc, ports, nodeAddrs) <= limit {
		return nil, nil
	}
	// One pass of frontends lists each kind's addresses once, filtered
	// as for every port, in its order (which decides the kind of a key
	// two kinds share).
	listed := frontends(svc, servicePort{port: 1, nodePort: 1}, nodeAddrs, cfg)
	byRank := [4][]int{}
	for i, fe := range listed {
		byRank[kindRank(fe.kind)] = append(byRank[kindRank(fe.kind)], i)
	}
	type placed struct {
		fe frontend
		at int // its place in listed
	}
	kept := make([][]placed, len(ports))
	seen := make(map[model.VSKey]struct{}, limit)
	asked := 0
	for rank, idx := range byRank {
		asked += len(idx) * portsOf(rank, ports)
	}
	if asked <= limit {
		return nil, nil
	}
take:
	for rank, idx := range byRank {
		for _, i := range idx {
			for pi, p := range ports {
				port := p.port
				if rank == kindRank(KindNodePort) {
					if port = p.nodePort; port == 0 {
						continue
					}
				}
				key := model.NewVSKey(p.proto, listed[i].addr, port)
				if _, dup := seen[key]; !dup {
					if len(seen) == limit {
						break take
					}
					seen[key] = struct{}{}
				}
				kept[pi] = append(kept[pi], placed{frontend{kind: listed[i].kind, addr: listed[i].addr, port: port}, i})
			}
		}
	}
	// Each port's frontends go back in frontends' order: addPort gives a
	// key two kinds share to the first, as it does under the cap.
	out := make([][]frontend, len(ports))
	for pi, ps := range kept {
		slices.SortStableFunc(ps, func(a, b placed) int { return cmp.Compare(a.at, b.at) })
		out[pi] = make([]frontend, len(ps))
		for j, p := range ps {
			out[pi][j] = p.fe
		}
	}
	return out, fmt.Errorf("%w: %d of its %d frontends are served, the cap (--max-frontends-per-service); ClusterIPs first, then load-balancer IPs, NodePorts and external IPs",
		ErrTooManyFrontends, len(seen), asked)
}

// portsOf is how many of the ports a frontend of the kind of this rank is
// made on: every one, but for NodePorts those with a node port.
func portsOf(rank int, ports []servicePort) int {
	if rank != kindRank(KindNodePort) {
		return len(ports)
	}
	n := 0
	for _, p := range ports {
		if p.nodePort != 0 {
			n++
		}
	}
	return n
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
