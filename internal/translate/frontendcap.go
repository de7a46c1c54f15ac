package translate

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// DefaultMaxFrontends is how many virtual servers one Service may have
// when Config does not say (--max-frontends-per-service). Every frontend
// of every Service is a member of the shim's shared sets, which hold
// 2^20 (shim.MaxSetMembers): one Service listing a thousand external IPs
// on a thousand ports would fill them, and then no frontend of any
// Service could be made. At 8,192, 128 Services at the cap are needed to
// fill the sets, which a ResourceQuota on services bounds.
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

// cappedFrontends returns nil when the Service's frontends fit the cap.
// Otherwise it returns, for each of ports, the frontends served, and a
// warning. The cap is filled from what the object names, in its order:
// its ClusterIPs, load-balancer ingress IPs and external IPs, address by
// address, each on the first of its ports the room allows; every node
// makes the same choice, since it counts each address the object names
// whether or not this node's flags (a family switched off,
// --external-ip-cidrs) then leave it out. What room is left goes to
// NodePorts, port by port on this node's NodePort addresses: how many
// NodePorts a node serves is all that differs between nodes. The work is
// the addresses' and the kept frontends', not all the Service asks for.
func cappedFrontends(svc *corev1.Service, ports []servicePort, nodeAddrs []netip.Addr, cfg Config) ([][]frontend, error) {
	limit := cfg.maxFrontends()
	if countFrontends(svc, ports, nodeAddrs) <= limit {
		return nil, nil
	}
	asked := askedAddrs(svc)
	nodeAsked := 0
	if hasNodePort(svc) {
		nodeAsked = len(nodeAddrs) * withNodePort(ports)
	}
	total := len(asked)*len(ports) + nodeAsked
	if total <= limit {
		return nil, nil
	}
	c := planCap(asked, len(ports), limit)
	served := c.served(frontends(svc, servicePort{port: 1}, nil, cfg))
	out := make([][]frontend, len(ports))
	np := 0 // the place of p among the ports with a node port
	for pi, p := range ports {
		out[pi] = c.objectFrontends(served, pi, p)
		if hasNodePort(svc) && p.nodePort != 0 {
			out[pi] = append(out[pi], c.nodePortFrontends(nodeAddrs, np, p)...)
			np++
		}
	}
	return out, fmt.Errorf("%w: it asks for %d frontends on this node, at most %d are made (--max-frontends-per-service): ClusterIPs, load-balancer IPs and external IPs first, in the object's order, NodePorts last",
		ErrTooManyFrontends, total, limit)
}

// askedAddrs lists the addresses the Service object names, in the cap's
// order: ClusterIPs (allocated by the API server), load-balancer ingress
// IPs (a controller's), external IPs (anyone's claim, the list any user
// can grow), each kind in the object's order, an address named twice
// once. Addresses no node can serve (unparseable, unservable) are left
// out; those only some nodes' flags leave out are not.
func askedAddrs(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	seen := map[netip.Addr]struct{}{}
	add := func(addrs []string) {
		for _, s := range addrs {
			a, err := netip.ParseAddr(s)
			if err != nil || unservable(a) != "" {
				continue
			}
			a = a.Unmap()
			if _, dup := seen[a]; !dup {
				seen[a] = struct{}{}
				out = append(out, a)
			}
		}
	}
	add(clusterIPs(svc))
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		add(ingressIPs(svc))
	}
	add(svc.Spec.ExternalIPs)
	return out
}

// capPlan is what the cap keeps of a Service.
type capPlan struct {
	// ports is, for each address the object names that is kept, on how
	// many of the Service's ports (the first ones) it is served.
	ports map[netip.Addr]int
	// nodeRoom is how many NodePort frontends fit after them.
	nodeRoom int
}

// planCap fills limit with the asked addresses, each on as many of the
// nPorts ports as there is room for.
func planCap(asked []netip.Addr, nPorts, limit int) capPlan {
	c := capPlan{ports: make(map[netip.Addr]int, min(len(asked), limit))}
	for _, a := range asked {
		n := min(nPorts, limit)
		if n == 0 {
			break
		}
		c.ports[a] = n
		limit -= n
	}
	c.nodeRoom = limit
	return c
}

// served is listed, the object's frontends this node serves in
// frontends' order, less those the cap drops, sorted by how many ports
// each is kept on, most first. The sort is stable: two kinds naming one
// address keep frontends' order, which gives their key to the first.
func (c capPlan) served(listed []frontend) []frontend {
	out := slices.DeleteFunc(listed, func(fe frontend) bool { return c.ports[fe.addr] == 0 })
	slices.SortStableFunc(out, func(a, b frontend) int { return c.ports[b.addr] - c.ports[a.addr] })
	return out
}

// objectFrontends is the served frontends kept on the port at place pi.
func (c capPlan) objectFrontends(served []frontend, pi int, p servicePort) []frontend {
	n, _ := slices.BinarySearchFunc(served, pi, func(fe frontend, pi int) int {
		if c.ports[fe.addr] > pi {
			return -1
		}
		return 1
	})
	out := make([]frontend, n)
	for i, fe := range served[:n] {
		out[i] = frontend{kind: fe.kind, addr: fe.addr, port: p.port}
	}
	return out
}

// nodePortFrontends is the NodePort frontends kept of the np-th port with
// a node port: the room is taken port by port, each on every address.
func (c capPlan) nodePortFrontends(nodeAddrs []netip.Addr, np int, p servicePort) []frontend {
	n := min(len(nodeAddrs), max(0, c.nodeRoom-np*len(nodeAddrs)))
	out := make([]frontend, n)
	for i, a := range nodeAddrs[:n] {
		out[i] = frontend{kind: KindNodePort, addr: a, port: p.nodePort}
	}
	return out
}

// withNodePort is how many of the ports have a node port.
func withNodePort(ports []servicePort) int {
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
		n += len(nodeAddrs) * withNodePort(ports)
	}
	return n
}
