package reconciler

import (
	"maps"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/health"
	"github.com/kube-ipvs/kube-ipvs/internal/metrics"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/plan"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// View is what the reconciler knew when its last sync ended, published
// whole so that the views (/healthz, /metrics, status, diff, the
// health-check ports) read it from any goroutine without a lock: a sync
// stuck in the kernel never stalls them, they just see the sync before.
// A View is immutable; what it returns is shared and must not be changed.
type View struct {
	// Last is the outcome of the last sync (zero before the first).
	Last Status
	// Node is what the last sync knew of this node's Node object.
	Node NodeStatus
	// nodePortAddrs are the node addresses the last sync served NodePorts
	// on, from the one read of the Node it made.
	nodePortAddrs []netip.Addr

	servers shardedMap[model.VSKey, *Server] // wanted or in the kernel
	vips    shardedMap[netip.Addr, struct{}] // bound on the link
	// results are the translations in force, whose sum is the desired
	// state (see desiredSet); they are shared with the reconciler.
	results      shardedMap[model.ServiceName, *translate.Result]
	drains       map[dataplane.RealRef]time.Time // since when each drains
	invalid      int                             // Services that failed to translate
	failing      int                             // Services whose operations failed
	refused      int                             // frontends refused (foreign, excluded)
	healthChecks []translate.HealthCheck
}

// NodeStatus is what a sync knew of this node's Node object.
type NodeStatus struct {
	Seen bool // the store held it
	// Eligible tells whether it may take load-balancer traffic (not being
	// deleted, nor tainted for deletion: health.NodeEligible), for
	// kube-proxy's /healthz.
	Eligible bool
}

// nodeStatus judges a Node (nil: none known).
func nodeStatus(n *corev1.Node) NodeStatus {
	return NodeStatus{Seen: n != nil, Eligible: health.NodeEligible(n)}
}

// Server is one virtual server as the last sync left it.
type Server struct {
	Desired  *model.Service // nil: not wanted (a foreign one)
	Observed *model.Service // nil: not in the kernel, as far as the agent knows
	// Meta says where a wanted virtual server comes from, with the
	// endpoints behind its real servers.
	Meta translate.VSMeta
}

// Keys lists the virtual servers wanted or in the kernel, in listing order.
func (v *View) Keys() []model.VSKey { return slices.SortedFunc(v.servers.keys(), model.VSKey.Compare) }

// Server returns one virtual server.
func (v *View) Server(k model.VSKey) (*Server, bool) { return v.servers.get(k) }

// VIPs lists the addresses bound on the link, in order.
func (v *View) VIPs() []netip.Addr { return slices.SortedFunc(v.vips.keys(), netip.Addr.Compare) }

// DrainingSince tells since when a real server that left its Service is
// kept at weight 0 for its connections.
func (v *View) DrainingSince(ref dataplane.RealRef) (time.Time, bool) {
	t, ok := v.drains[ref]
	return t, ok
}

// NodePortAddrs are the node addresses NodePorts were served on by the
// last sync that translated.
func (v *View) NodePortAddrs() []netip.Addr { return v.nodePortAddrs }

// HealthChecks lists the health-check node ports of the Services held, by
// port, with their local endpoint counts.
func (v *View) HealthChecks() []translate.HealthCheck { return v.healthChecks }

// Desired assembles the whole desired state from the translations in
// force, as desiredSet sums them. Its maps are new; its services are shared
// and must not be changed (drain clones the ones it changes).
func (v *View) Desired() model.State {
	s := model.NewState()
	for _, res := range v.results.all() {
		for _, svc := range res.Services {
			s.Services[svc.Key] = svc
		}
		for _, a := range res.Addrs {
			s.Addrs[a] = struct{}{}
		}
		for _, e := range res.SetEntries {
			s.Sets[e] = struct{}{}
		}
	}
	return s
}

// drainTimeout is Reconciler.drainTimeout as of this view.
func (v *View) drainTimeout(def time.Duration) func(model.VSKey) time.Duration {
	return func(k model.VSKey) time.Duration {
		if s, ok := v.servers.get(k); ok && s.Desired != nil {
			return s.Meta.DrainTimeout
		}
		return def
	}
}

// Table counts what the agent holds in the kernel, for a metrics scrape.
// Counting walks every virtual server, which is why a scrape does it on
// the view rather than each sync.
func (v *View) Table() metrics.Table {
	t := metrics.Table{BoundVIPs: v.vips.len(), Draining: len(v.drains), Invalid: v.invalid, Failing: v.failing, Refused: v.refused}
	for _, s := range v.servers.all() {
		if s.Desired != nil && s.Observed != nil {
			t.VirtualServers++
			t.RealServers += s.Observed.Reals.Len()
		}
	}
	return t
}

// View returns what the last sync published. Safe from any goroutine.
func (r *Reconciler) View() *View { return r.pub.view.Load() }

// publisher is the reconciler's side of the views: the maps it keeps in
// step with its own state, copy on write, and the last View it published.
type publisher struct {
	servers cowMap[model.VSKey, *Server]
	vips    cowMap[netip.Addr, struct{}]
	results cowMap[model.ServiceName, *translate.Result]
	checks  []translate.HealthCheck
	view    atomic.Pointer[View]
}

func (p *publisher) reset() {
	p.servers = newCowMap[model.VSKey, *Server]()
	p.vips = newCowMap[netip.Addr, struct{}]()
	p.results = newCowMap[model.ServiceName, *translate.Result]()
}

// publish makes what the sync that ends with st left visible to views. It
// refreshes what the sync's scope may have changed, so it costs what the
// sync changed; a full sync (which re-read the kernel) rebuilds everything.
func (r *Reconciler) publish(st Status) {
	p, scope, changed := &r.pub, r.touched, maps.Keys(r.desired.changed)
	r.touched, r.desired.changed = plan.Scope{}, map[model.ServiceName]struct{}{}
	if st.Full {
		p.reset()
		scope, changed = r.everything(), maps.Keys(r.desired.results)
	}
	for k := range scope.Keys {
		r.obs.Share(k, r.desired.state.Services[k])
		if s := r.server(k); s != nil {
			p.servers.set(k, s)
		} else {
			p.servers.delete(k)
		}
	}
	bound := r.obs.State().Addrs
	for a := range scope.Addrs {
		mark(&p.vips, a, bound)
	}
	for name := range changed {
		if res, ok := r.desired.results[name]; ok {
			p.results.set(name, &res)
		} else {
			p.results.delete(name)
		}
	}
	if r.desired.checksChanged || p.checks == nil {
		p.checks = r.desired.healthChecks()
		r.desired.checksChanged = false
	}
	p.store(st, r.node, r.nodePortAddrs, maps.Clone(r.drains), counts{invalid: len(r.metrics.invalid), failing: len(r.failing), refused: len(r.refused)})
}

// counts are the problem counts a View carries for metrics.
type counts struct{ invalid, failing, refused int }

// store publishes a View of the maps as they are now.
func (p *publisher) store(st Status, node NodeStatus, nodePortAddrs []netip.Addr, drains map[dataplane.RealRef]time.Time, n counts) {
	v := &View{
		Last:         st,
		Node:         node,
		servers:      p.servers.publish(),
		vips:         p.vips.publish(),
		results:      p.results.publish(),
		drains:       drains,
		invalid:      n.invalid,
		failing:      n.failing,
		refused:      n.refused,
		healthChecks: p.checks,
	}
	v.nodePortAddrs = nodePortAddrs
	p.view.Store(v)
}

// server is one virtual server as it stands now, nil when it is neither
// wanted nor in the kernel. Both sides are shared, not copied: the
// desired state is immutable, and the observed cache never changes a
// service it handed out; where the kernel holds what is wanted the two
// sides are one value (observed.Cache.Share).
func (r *Reconciler) server(k model.VSKey) *Server {
	want, wanted := r.desired.state.Services[k]
	have, inKernel := r.obs.Service(k)
	if !wanted && !inKernel {
		return nil
	}
	s := &Server{Desired: want}
	if inKernel {
		s.Observed = have
	}
	if m, ok := r.desired.meta(k); ok && wanted {
		s.Meta = m
	}
	return s
}

// mark sets or clears k in a published set to match the reconciler's,
// copying nothing when it already does.
func mark[K comparable](c *cowMap[K, struct{}], k K, now map[K]struct{}) {
	_, want := now[k]
	if _, have := c.get(k); want && !have {
		c.set(k, struct{}{})
	} else if have && !want {
		c.delete(k)
	}
}
