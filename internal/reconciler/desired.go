package reconciler

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// desiredSet is the whole desired state kept as the sum of each Service's
// last good translation, so that replacing one Service touches only its own
// keys and addresses.
//
// Two Services may claim one frontend (a VIP:port; the API server does not
// prevent it for external and load-balancer IPs). The one whose kind of
// frontend owns the address wins: a ClusterIP (the allocator's; a NodePort
// too) before a load-balancer ingress IP (its controller's) before an
// external IP (anyone's claim); then the older Service (creationTimestamp,
// then namespace/name), whatever order the agent learns of them in, so a
// restart keeps the winner. An external or load-balancer IP that is any
// Service's ClusterIP loses all its frontends there: a Service that listed
// a Service CIDR address before the allocator handed it out would
// otherwise serve ports on another Service's ClusterIP. The loser gets
// nothing of that frontend in the kernel: no virtual server, no real
// servers, no set member (its no-endpoints member would reject the
// winner's traffic), no reference to the VIP. It waits on the frontend and
// takes it over as soon as the winner lets go of it (deleted, or changed to
// another frontend).
type desiredSet struct {
	state model.State
	// results are the translations in force: each Service's last good
	// translation without the frontends it lost.
	results map[model.ServiceName]translate.Result
	owner   map[model.VSKey]model.ServiceName
	// addrRefs and setRefs count the Services that need each VIP and set
	// member in state (two Services may share an external IP, or an
	// endpoint, hence a hairpin member).
	addrRefs refs[netip.Addr]
	setRefs  refs[model.SetEntry]
	// checks are the health checks of the Services that have one, so that
	// listing them does not walk every Service; checksChanged tells the
	// publisher to list them again.
	checks        map[model.ServiceName]translate.HealthCheck
	checksChanged bool
	// changed are the Services replaced or removed since the publisher
	// last looked.
	changed map[model.ServiceName]struct{}

	// whole are the last good translations, lost frontends included, and
	// rank how old each Service is; lost are the frontends each Service
	// lost, and waiting the Services that lost each frontend.
	whole   map[model.ServiceName]translate.Result
	rank    map[model.ServiceName]claimRank
	lost    map[model.ServiceName][]model.VSKey
	waiting map[model.VSKey]map[model.ServiceName]struct{}
	// clusterIPs are the Services whose last good translation has a
	// ClusterIP frontend on each address (clusterIPsMoved: an address
	// gained its first or lost its last since the reconciler last looked);
	// claimed the Services whose last good translation has an external or
	// load-balancer frontend on each, lbIngress a load-balancer one.
	clusterIPs      byAddr
	clusterIPsMoved bool
	claimed         byAddr
	lbIngress       byAddr
	// nodePorts are the protocols and ports the last good translations
	// name as nodePorts (nodePortRefs: by how many frontends beyond the
	// first; nodePortsMoved: one came or went since the reconciler last
	// looked).
	nodePorts      map[plan.NodePort]struct{}
	nodePortRefs   refs[plan.NodePort]
	nodePortsMoved bool
	// woken are the Services that took over a frontend since the
	// reconciler last looked (takeWoken).
	woken map[model.ServiceName]struct{}
}

// claimRank orders the Services claiming one frontend: by kind, then the
// older first.
type claimRank struct {
	kind    int
	created time.Time
	name    model.ServiceName
}

func (a claimRank) before(b claimRank) bool {
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	if !a.created.Equal(b.created) {
		return a.created.Before(b.created)
	}
	return a.name.Compare(b.name) < 0
}

// kindRank orders the kinds of frontend by who owns the address first: a
// ClusterIP is the allocator's (and a NodePort's port the allocator's too),
// a load-balancer ingress IP its controller's, an external IP anyone's.
func kindRank(k translate.FrontendKind) int {
	switch k {
	case translate.KindClusterIP, translate.KindNodePort:
		return 0
	case translate.KindLoadBalancer:
		return 1
	}
	return 2
}

// rankOf is how a Service ranks in the claims on frontend k.
func (d *desiredSet) rankOf(name model.ServiceName, k model.VSKey) claimRank {
	r := d.rank[name]
	m, _ := d.whole[name].MetaOf(k)
	r.kind = kindRank(m.Kind)
	return r
}

// conflict is a frontend a Service lost to another: one that ranks before
// it on that frontend, or (onClusterIP) whose ClusterIP its address is.
type conflict struct {
	loser, winner model.ServiceName
	key           model.VSKey
	onClusterIP   bool
}

func (c conflict) Error() string {
	if c.onClusterIP {
		return fmt.Sprintf("service %s: frontend %s is on the ClusterIP of %s: not served while that Service has it", c.loser, c.key, c.winner)
	}
	return fmt.Sprintf("service %s: virtual server %s is already served for %s, which ranks first (a ClusterIP, then a load-balancer IP, then an external IP; then the older Service); it is taken over when that one lets go of it", c.loser, c.key, c.winner)
}

// reason is the Event reason of a conflict.
func (c conflict) reason() string {
	if c.onClusterIP {
		return "ClusterIPClaimed"
	}
	return "DuplicateVirtualServer"
}

// byAddr lists, per address, the Services with some frontend there.
type byAddr map[netip.Addr]map[model.ServiceName]struct{}

// add notes name at a and tells whether a had none before.
func (b byAddr) add(a netip.Addr, name model.ServiceName) bool {
	first := b[a] == nil
	if first {
		b[a] = map[model.ServiceName]struct{}{}
	}
	b[a][name] = struct{}{}
	return first
}

// drop removes name from a and tells whether a is left with none.
func (b byAddr) drop(a netip.Addr, name model.ServiceName) bool {
	delete(b[a], name)
	if len(b[a]) == 0 {
		delete(b, a)
		return true
	}
	return false
}

// first is the first Service by name at a.
func (b byAddr) first(a netip.Addr) model.ServiceName {
	var out model.ServiceName
	for n := range b[a] {
		if out == (model.ServiceName{}) || n.Compare(out) < 0 {
			out = n
		}
	}
	return out
}

// claimsAddr tells whether a frontend kind's claim on an address is
// anyone's (external) or a controller's (load balancer): one that must
// yield to a ClusterIP there.
func claimsAddr(k translate.FrontendKind) bool {
	return k == translate.KindExternalIP || k == translate.KindLoadBalancer
}

func newDesiredSet() desiredSet {
	return desiredSet{
		state:    model.NewState(),
		results:  map[model.ServiceName]translate.Result{},
		owner:    map[model.VSKey]model.ServiceName{},
		addrRefs: refs[netip.Addr]{},
		setRefs:  refs[model.SetEntry]{},
		checks:   map[model.ServiceName]translate.HealthCheck{},
		changed:  map[model.ServiceName]struct{}{},
		whole:    map[model.ServiceName]translate.Result{},
		rank:     map[model.ServiceName]claimRank{},
		lost:     map[model.ServiceName][]model.VSKey{},
		waiting:  map[model.VSKey]map[model.ServiceName]struct{}{},

		clusterIPs:   byAddr{},
		claimed:      byAddr{},
		lbIngress:    byAddr{},
		nodePorts:    map[plan.NodePort]struct{}{},
		nodePortRefs: refs[plan.NodePort]{},
		woken:        map[model.ServiceName]struct{}{},
	}
}

// reserve sizes the desired state's maps for the translations about to be
// added when they are many more than it holds (a start; model.SizedState):
// empty, or holding only what was served first.
func (d *desiredSet) reserve(ts []translation) {
	if len(ts) < 2*(len(d.whole)+1) {
		return
	}
	var svcs, addrs, members int
	for _, t := range ts {
		svcs += len(t.res.Services)
		addrs += len(t.res.Addrs)
		members += len(t.res.SetEntries)
	}
	sized := model.SizedState(svcs, addrs, members)
	maps.Copy(sized.Services, d.state.Services)
	maps.Copy(sized.Addrs, d.state.Addrs)
	maps.Copy(sized.Sets, d.state.Sets)
	d.state = sized
	owner := make(map[model.VSKey]model.ServiceName, svcs)
	maps.Copy(owner, d.owner)
	d.owner = owner
}

// replace swaps one Service's translation for a new one (an empty Result
// removes it; created is its creationTimestamp), adds every key and address
// either version touches to scope, and returns the frontends the change
// took from a Service: the ones it lost to Services ranking first, and the
// ones Services ranking after it lost to it. Services waiting on a
// frontend the change freed take it over.
func (d *desiredSet) replace(name model.ServiceName, res translate.Result, created time.Time, scope plan.Scope) []conflict {
	freed := d.remove(name, scope)
	gone := d.forget(name)
	var lost []conflict
	if !empty(res) {
		d.whole[name] = res
		d.rank[name] = claimRank{created: created, name: name}
		d.index(name)
		var more []model.VSKey
		lost, more = d.claim(name, scope)
		freed = append(freed, more...)
	}
	freed = append(freed, d.waitingOn(gone)...)
	d.wake(freed, scope)
	return lost
}

// waitingOn lists the frontends waited on at those of addrs that are no
// Service's ClusterIP now.
func (d *desiredSet) waitingOn(addrs []netip.Addr) []model.VSKey {
	addrs = slices.DeleteFunc(addrs, func(a netip.Addr) bool { _, ok := d.clusterIPs[a]; return ok })
	var out []model.VSKey
	if len(addrs) == 0 {
		return out
	}
	for k := range d.waiting {
		if slices.Contains(addrs, k.Addr) {
			out = append(out, k)
		}
	}
	return out
}

// index notes where a Service's last good translation has ClusterIPs and
// external or load-balancer frontends.
func (d *desiredSet) index(name model.ServiceName) {
	res := d.whole[name]
	for i, svc := range res.Services {
		switch k := res.Meta[i].Kind; {
		case k == translate.KindClusterIP:
			d.clusterIPsMoved = d.clusterIPs.add(svc.Key.Addr, name) || d.clusterIPsMoved
		case k == translate.KindNodePort:
			np := nodePortOf(svc.Key)
			_, had := d.nodePorts[np]
			d.nodePortRefs.add(d.nodePorts, np)
			d.nodePortsMoved = d.nodePortsMoved || !had
		case claimsAddr(k):
			d.claimed.add(svc.Key.Addr, name)
			if k == translate.KindLoadBalancer {
				d.lbIngress.add(svc.Key.Addr, name)
			}
		}
	}
}

func nodePortOf(k model.VSKey) plan.NodePort {
	return plan.NodePort{Proto: k.Proto, Port: k.Port}
}

// forget drops a Service's last good translation and its rank, and
// returns the ClusterIPs no Service has any more.
func (d *desiredSet) forget(name model.ServiceName) []netip.Addr {
	res, ok := d.whole[name]
	if !ok {
		return nil
	}
	delete(d.whole, name)
	delete(d.rank, name)
	var gone []netip.Addr
	for i, svc := range res.Services {
		switch k := res.Meta[i].Kind; {
		case k == translate.KindClusterIP:
			if d.clusterIPs.drop(svc.Key.Addr, name) {
				gone = append(gone, svc.Key.Addr)
				d.clusterIPsMoved = true
			}
		case k == translate.KindNodePort:
			np := nodePortOf(svc.Key)
			d.nodePortRefs.drop(d.nodePorts, np)
			_, has := d.nodePorts[np]
			d.nodePortsMoved = d.nodePortsMoved || !has
		case claimsAddr(k):
			d.claimed.drop(svc.Key.Addr, name)
			if k == translate.KindLoadBalancer {
				d.lbIngress.drop(svc.Key.Addr, name)
			}
		}
	}
	return gone
}

// claim puts a Service's whole translation in force: it evicts the
// holders of its frontends that rank after it, and those of external or
// load-balancer frontends on its ClusterIPs, puts itself in, and puts them
// back without what they lost. It returns the frontends lost, and those
// freed that others may wait on.
func (d *desiredSet) claim(name model.ServiceName, scope plan.Scope) ([]conflict, []model.VSKey) {
	var evicted []model.ServiceName
	evict := func(h model.ServiceName) {
		if h != name && !slices.Contains(evicted, h) {
			evicted = append(evicted, h)
		}
	}
	res := d.whole[name]
	for i, svc := range res.Services {
		if h, taken := d.owner[svc.Key]; taken && d.rankOf(name, svc.Key).before(d.rankOf(h, svc.Key)) {
			evict(h)
		}
		if res.Meta[i].Kind == translate.KindClusterIP {
			for h := range d.claimed[svc.Key.Addr] {
				if d.holdsOn(h, svc.Key.Addr) {
					evict(h)
				}
			}
		}
	}
	slices.SortFunc(evicted, model.ServiceName.Compare)
	var freed []model.VSKey
	for _, h := range evicted {
		freed = append(freed, d.remove(h, scope)...)
	}
	lost := d.add(name, scope, evicted)
	for _, h := range evicted {
		lost = append(lost, d.add(h, scope, nil)...)
	}
	return lost, freed
}

// firstPending is a pending Service that ranks before name on k.
func (d *desiredSet) firstPending(name model.ServiceName, k model.VSKey, pending []model.ServiceName) (model.ServiceName, bool) {
	for _, p := range pending {
		if _, ok := d.whole[p].MetaOf(k); ok && d.rankOf(p, k).before(d.rankOf(name, k)) {
			return p, true
		}
	}
	return model.ServiceName{}, false
}

// holdsOn tells whether a Service holds an external or load-balancer
// frontend on a.
func (d *desiredSet) holdsOn(name model.ServiceName, a netip.Addr) bool {
	res := d.results[name]
	for i, svc := range res.Services {
		if svc.Key.Addr == a && claimsAddr(res.Meta[i].Kind) {
			return true
		}
	}
	return false
}

// note records k in one of a scope's maps. A full sync's scope holds none
// (nil maps): it plans everything, and recording every key, VIP and member
// of a cold start (150,000 map entries at 10,000 Services) was work and
// memory for a scope thrown away.
func note[K comparable](m map[K]struct{}, k K) {
	if m != nil {
		m[k] = struct{}{}
	}
}

// empty tells whether a translation asks for nothing (a deleted or
// skipped Service).
func empty(res translate.Result) bool {
	return len(res.Services) == 0 && len(res.Addrs) == 0 && len(res.SetEntries) == 0 && res.HealthCheck == nil
}

// add puts a Service's whole translation in force, without the frontends
// other Services hold, or that a Service about to be put back (pending)
// ranks first on, or that are external or load-balancer IPs on a
// ClusterIP; it waits on those, and returns them.
func (d *desiredSet) add(name model.ServiceName, scope plan.Scope, pending []model.ServiceName) []conflict {
	res := d.whole[name]
	d.changed[name] = struct{}{}
	var lost []conflict
	gone := map[model.VSKey]bool{}
	for i, svc := range res.Services {
		c := conflict{loser: name, key: svc.Key}
		if h, taken := d.owner[svc.Key]; taken {
			c.winner = h
		} else if p, ok := d.firstPending(name, svc.Key, pending); ok {
			c.winner = p
		} else if _, ok := d.clusterIPs[svc.Key.Addr]; ok && claimsAddr(res.Meta[i].Kind) {
			c.winner, c.onClusterIP = d.clusterIPs.first(svc.Key.Addr), true
		} else {
			continue
		}
		lost = append(lost, c)
		gone[svc.Key] = true
		d.wait(name, svc.Key)
	}
	kept := withoutFrontends(res, gone)
	for _, svc := range kept.Services {
		d.owner[svc.Key] = name
		d.state.Services[svc.Key] = svc
		note(scope.Keys, svc.Key)
	}
	for _, a := range kept.Addrs {
		d.addrRefs.add(d.state.Addrs, a)
		note(scope.Addrs, a)
	}
	for _, e := range kept.SetEntries {
		d.setRefs.add(d.state.Sets, e)
		note(scope.Sets, e)
	}
	if !empty(kept) {
		d.results[name] = kept
	}
	if kept.HealthCheck != nil {
		d.checks[name] = *kept.HealthCheck
		d.checksChanged = true
	}
	return lost
}

// wait records that name waits on frontend k.
func (d *desiredSet) wait(name model.ServiceName, k model.VSKey) {
	if d.waiting[k] == nil {
		d.waiting[k] = map[model.ServiceName]struct{}{}
	}
	d.waiting[k][name] = struct{}{}
	d.lost[name] = append(d.lost[name], k)
}

// wake lets the Services waiting on frontends that are free now claim them
// again from their last good translation, the oldest first. They were told
// when they lost; taking over needs no word. A claim that evicts a Service
// ranking after it frees what that one loses, for others to take.
func (d *desiredSet) wake(freed []model.VSKey, scope plan.Scope) {
	for len(freed) > 0 {
		var woken []model.ServiceName
		for _, k := range freed {
			if _, taken := d.owner[k]; taken {
				continue
			}
			for w := range d.waiting[k] {
				if !slices.Contains(woken, w) {
					woken = append(woken, w)
				}
			}
		}
		slices.SortFunc(woken, func(a, b model.ServiceName) int {
			if d.rank[a].before(d.rank[b]) {
				return -1
			}
			return 1
		})
		freed = nil
		for _, w := range woken {
			d.woken[w] = struct{}{}
			d.remove(w, scope)
			_, more := d.claim(w, scope)
			freed = append(freed, more...)
		}
	}
}

// lbFrontendsOn lists the load-balancer frontends of the last good
// translations on a.
func (d *desiredSet) lbFrontendsOn(a netip.Addr) []model.VSKey {
	var out []model.VSKey
	for name := range d.lbIngress[a] {
		res := d.whole[name]
		for i, svc := range res.Services {
			if svc.Key.Addr == a && res.Meta[i].Kind == translate.KindLoadBalancer {
				out = append(out, svc.Key)
			}
		}
	}
	return out
}

// takeWoken returns the Services that took over a frontend since the last
// call, and forgets them.
func (d *desiredSet) takeWoken() map[model.ServiceName]struct{} {
	out := d.woken
	d.woken = map[model.ServiceName]struct{}{}
	return out
}

// withoutFrontends is res without the virtual servers in gone, their set
// members and meta, and the addresses only they carried.
func withoutFrontends(res translate.Result, gone map[model.VSKey]bool) translate.Result {
	if len(gone) == 0 {
		return res
	}
	kept := res
	kept.Services, kept.Addrs, kept.SetEntries = nil, nil, nil
	carried := map[netip.Addr]bool{}
	for i, svc := range res.Services {
		if !gone[svc.Key] {
			kept.Services = append(kept.Services, svc)
			kept.Meta = append(kept.Meta, res.Meta[i])
			carried[svc.Key.Addr] = true
		}
	}
	for _, a := range res.Addrs {
		if carried[a] {
			kept.Addrs = append(kept.Addrs, a)
		}
	}
	for _, e := range res.SetEntries {
		if mk, ok := plan.MarkedFor(e); ok && gone[mk] {
			continue // it would steer connections into another's virtual server
		}
		k, frontend := plan.FrontendOf(e)
		// Hairpin members serve the Service's endpoints through any
		// frontend it keeps; with none kept they serve nothing.
		if (frontend && !gone[k]) || (!frontend && len(kept.Services) > 0) {
			kept.SetEntries = append(kept.SetEntries, e)
		}
	}
	return kept
}

// remove drops a Service's translation in force and returns the
// frontends it held; it stops waiting on the ones it lost.
func (d *desiredSet) remove(name model.ServiceName, scope plan.Scope) []model.VSKey {
	for _, k := range d.lost[name] {
		delete(d.waiting[k], name)
		if len(d.waiting[k]) == 0 {
			delete(d.waiting, k)
		}
	}
	delete(d.lost, name)
	old, ok := d.results[name]
	if !ok {
		return nil
	}
	delete(d.results, name)
	d.changed[name] = struct{}{}
	if _, ok := d.checks[name]; ok {
		delete(d.checks, name)
		d.checksChanged = true
	}
	freed := make([]model.VSKey, 0, len(old.Services))
	for _, svc := range old.Services {
		delete(d.owner, svc.Key)
		delete(d.state.Services, svc.Key)
		note(scope.Keys, svc.Key)
		freed = append(freed, svc.Key)
	}
	for _, a := range old.Addrs {
		note(scope.Addrs, a)
		d.addrRefs.drop(d.state.Addrs, a)
	}
	for _, e := range old.SetEntries {
		note(scope.Sets, e)
		d.setRefs.drop(d.state.Sets, e)
	}
	return freed
}

// refs counts the Services that need each member of a set, beyond the
// first: nearly every VIP and set member is needed by one Service only, so
// a count for each would be a second copy of the set, as large as the set.
// A member is in the set while any Service needs it.
type refs[K comparable] map[K]int

// add notes one more Service needing k, putting it in set.
func (r refs[K]) add(set map[K]struct{}, k K) {
	if _, ok := set[k]; ok {
		r[k]++
		return
	}
	set[k] = struct{}{}
}

// drop notes one Service fewer needing k; with the last, k leaves set.
func (r refs[K]) drop(set map[K]struct{}, k K) {
	switch n := r[k]; {
	case n > 1:
		r[k] = n - 1
	case n == 1:
		delete(r, k)
	default:
		delete(set, k)
	}
}

// healthChecks lists the held Services' health checks by port. Two
// Services claiming one port (the API server prevents it) keep the first
// by name.
func (d *desiredSet) healthChecks() []translate.HealthCheck {
	byPort := map[uint16]translate.HealthCheck{}
	for _, hc := range d.checks {
		if old, ok := byPort[hc.Port]; ok && old.Service.Compare(hc.Service) < 0 {
			continue
		}
		byPort[hc.Port] = hc
	}
	out := make([]translate.HealthCheck, 0, len(byPort))
	for _, hc := range byPort {
		out = append(out, hc)
	}
	slices.SortFunc(out, func(a, b translate.HealthCheck) int { return cmp.Compare(a.Port, b.Port) })
	return out
}

// meta returns what is known about a desired virtual server.
func (d *desiredSet) meta(k model.VSKey) (translate.VSMeta, bool) {
	name, ok := d.owner[k]
	if !ok {
		return translate.VSMeta{}, false
	}
	return d.results[name].MetaOf(k)
}

// names lists the Services with a translation held.
func (d *desiredSet) names() []model.ServiceName {
	out := make([]model.ServiceName, 0, len(d.results))
	for n := range d.results {
		out = append(out, n)
	}
	return out
}
