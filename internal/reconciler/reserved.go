package reconciler

import (
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/objects"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
)

// reservedAddrs are the addresses no Service may claim now (see
// plan.Reserved): for every frontend, this Node's and every Node's
// addresses and pod CIDRs as the store knows them and the configured ones
// (the API server's, the cluster CIDRs); for all but the load-balancer
// frontends, served there unbound, this host's other interface addresses.
// An address that is some Service's ClusterIP is never reserved: the
// allocator handed it out (a cluster CIDR may overlap the Service CIDR),
// and a kubeconfig naming the kubernetes Service's ClusterIP reaches the
// API server through this agent, which must serve it. The exemptions are
// looked for again only when the ClusterIPs' addresses or the reserved
// ones changed: a walk of every ClusterIP. Called by the sync only: it
// reads the desired set.
func (r *Reconciler) reservedAddrs(node *corev1.Node) plan.Reserved {
	own := objects.AddrsOf(node)
	all := r.opt.Store.AllNodeAddrs()
	host := r.translateConfig().HostAddrs
	base := plan.NewReserved(
		slices.Concat(r.opt.ReservedAddrs, own.Addrs, all.Addrs),
		slices.Concat(r.opt.ReservedCIDRs, own.PodCIDRs, all.PodCIDRs)).WithHostOnly(host)
	if r.desired.clusterIPsMoved || !base.Equal(r.reservedBase) {
		r.exempt = r.exempt[:0]
		for a := range r.desired.clusterIPs {
			if base.Has(a) {
				r.exempt = append(r.exempt, a)
			}
		}
		r.desired.clusterIPsMoved, r.reservedBase = false, base
	}
	var unbound []model.VSKey
	for _, a := range host {
		unbound = append(unbound, r.desired.lbFrontendsOn(a)...)
	}
	res := base.WithExempt(r.exempt).WithUnbound(unbound)
	r.pubReserved.Store(&res)
	return res
}

// publishedReserved are the reserved addresses of the last sync, for
// views on other goroutines.
func (r *Reconciler) publishedReserved() plan.Reserved {
	if p := r.pubReserved.Load(); p != nil {
		return *p
	}
	return plan.Reserved{}
}

// publishNodePorts hands Drift a copy of the nodePorts the Services name
// when one came or went. Called by the sync only.
func (r *Reconciler) publishNodePorts() {
	if !r.desired.nodePortsMoved && r.pubNodePorts.Load() != nil {
		return
	}
	ports := maps.Clone(r.desired.nodePorts)
	r.pubNodePorts.Store(&ports)
	r.desired.nodePortsMoved = false
}

// publishedNodePorts are the nodePorts the Services named at the last
// sync, for views on other goroutines.
func (r *Reconciler) publishedNodePorts() map[plan.NodePort]struct{} {
	if p := r.pubNodePorts.Load(); p != nil {
		return *p
	}
	return nil
}

// widenToReserved adds to an incremental scope what a change of the
// reserved addresses concerns: every virtual server, VIP and set member,
// wanted or in the kernel, on an address that became reserved (to be
// refused, unbound, its VIP member removed) or stopped being (to be
// served again). Nodes come and go far less often than Services change,
// so this walk is rare.
func (r *Reconciler) widenToReserved(scope plan.Scope, reserved plan.Reserved) {
	if reserved.Equal(r.reserved) {
		return
	}
	moved := func(a netip.Addr) bool { return reserved.Has(a) != r.reserved.Has(a) }
	r.widenOn(scope, moved, func(k model.VSKey) bool {
		return k.FWMark == 0 && (moved(k.Addr) || reserved.Refuses(k) != r.reserved.Refuses(k))
	})
}

// widenOn adds to scope what the desired state and the kernel hold that a
// change concerns: every virtual server keyIn tells, with its address, and
// every VIP and set member on an address addrIn tells.
func (r *Reconciler) widenOn(scope plan.Scope, addrIn func(netip.Addr) bool, keyIn func(model.VSKey) bool) {
	for _, s := range []model.State{r.desired.state, r.obs.State()} {
		for k := range s.Services {
			if keyIn(k) {
				scope.Keys[k] = struct{}{}
				scope.Addrs[k.Addr] = struct{}{}
			}
		}
		for a := range s.Addrs {
			if addrIn(a) {
				scope.Addrs[a] = struct{}{}
			}
		}
		for e := range s.Sets {
			if addrIn(e.Addr()) {
				scope.Sets[e] = struct{}{}
			}
		}
	}
}
