// Package status builds the annotated view of a node that `kube-ipvs
// status` prints: each virtual server with the Service it serves and why it
// has its scheduler, each real server with the endpoint behind it, the VIPs
// bound and the last sync's outcome. Pure: values in, values out.
package status

import (
	"maps"
	"net/netip"
	"slices"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/reconciler"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// Report is the node's status; it is also the JSON of `status -o json`.
type Report struct {
	Node           string          `json:"node"`
	LastSync       Sync            `json:"lastSync"`
	VIPs           []netip.Addr    `json:"vips"`
	VirtualServers []VirtualServer `json:"virtualServers"`
}

// Sync is the outcome of the last sync.
type Sync struct {
	Time     time.Time `json:"time"`
	Full     bool      `json:"full"`
	Ops      int       `json:"ops"`
	Failed   int       `json:"failed"`
	Draining int       `json:"draining"`
	Seconds  float64   `json:"seconds"`
	Error    string    `json:"error,omitempty"`
}

// VirtualServer is one virtual server, wanted or found.
type VirtualServer struct {
	Key           string `json:"key"` // ipvsadm's "-t 10.96.0.10:80"
	Service       string `json:"service,omitempty"`
	Port          string `json:"port,omitempty"`
	Kind          string `json:"kind,omitempty"`
	Scheduler     string `json:"scheduler"`
	SchedulerFrom string `json:"schedulerFrom,omitempty"`
	Persistent    uint32 `json:"persistentSeconds,omitempty"`
	// InKernel is false for a wanted server not (yet) programmed; Wanted is
	// false for one the kernel holds that the agent does not want (foreign).
	InKernel bool   `json:"inKernel"`
	Wanted   bool   `json:"wanted"`
	Reals    []Real `json:"reals"`
}

// Real is one real server and the endpoint behind it.
type Real struct {
	Addr   netip.AddrPort `json:"addr"`
	Weight int            `json:"weight"` // in the kernel (-1: not there)
	Pod    string         `json:"pod,omitempty"`
	Node   string         `json:"node,omitempty"`
	// State is ready, serving-terminating, terminating, draining (left its
	// slice, kept at weight 0 for its connections) or unknown.
	State         string     `json:"state"`
	DrainingSince *time.Time `json:"drainingSince,omitempty"`
}

// Slices returns a Service's EndpointSlices (from the agent's store).
type Slices func(model.ServiceName) []*discoveryv1.EndpointSlice

// Build annotates an inspection of the reconciler.
func Build(node string, in reconciler.Inspection, endpoints Slices) Report {
	rep := Report{Node: node, LastSync: syncOf(in.Last), VIPs: in.Observed.SortedAddrs()}
	keys := slices.Collect(maps.Keys(in.Desired.Services))
	for k := range in.Observed.Services {
		if _, ok := in.Desired.Services[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, model.VSKey.Compare)
	for _, k := range keys {
		rep.VirtualServers = append(rep.VirtualServers, virtualServer(k, in, endpoints))
	}
	return rep
}

func syncOf(s reconciler.Status) Sync {
	out := Sync{Time: s.Time, Full: s.Full, Ops: s.Ops, Failed: s.Failed, Draining: s.Draining, Seconds: s.Duration.Seconds()}
	if s.Err != nil {
		out.Error = s.Err.Error()
	}
	return out
}

func virtualServer(k model.VSKey, in reconciler.Inspection, endpoints Slices) VirtualServer {
	want, wanted := in.Desired.Services[k]
	have, inKernel := in.Observed.Services[k]
	src := want
	if !wanted {
		src = have
	}
	vs := VirtualServer{Key: k.String(), Scheduler: string(src.Scheduler), InKernel: inKernel, Wanted: wanted}
	if src.Flags&model.FlagPersistent != 0 {
		vs.Persistent = src.Timeout
	}
	var eps map[netip.Addr]discoveryv1.Endpoint
	if m, ok := in.Meta[k]; ok {
		vs.Service, vs.Port, vs.Kind, vs.SchedulerFrom = m.Service.String(), m.PortName, string(m.Kind), m.SchedulerFrom
		eps = endpointsByAddr(endpoints(m.Service))
	}
	for _, r := range reals(want, have) {
		vs.Reals = append(vs.Reals, real(k, r, want, have, eps, in.Draining))
	}
	return vs
}

// reals lists the real servers of either side, sorted.
func reals(want, have *model.Service) []netip.AddrPort {
	addrs := map[netip.AddrPort]struct{}{}
	for _, side := range []*model.Service{want, have} {
		if side != nil {
			for a := range side.Reals {
				addrs[a] = struct{}{}
			}
		}
	}
	return slices.SortedFunc(maps.Keys(addrs), netip.AddrPort.Compare)
}

func real(k model.VSKey, addr netip.AddrPort, want, have *model.Service, eps map[netip.Addr]discoveryv1.Endpoint, draining map[dataplane.RealRef]time.Time) Real {
	r := Real{Addr: addr, Weight: -1, State: "unknown"}
	if have != nil {
		if rs, ok := have.Reals[addr]; ok {
			r.Weight = rs.Weight
		}
	}
	if since, ok := draining[dataplane.RealRef{VS: k, RS: addr}]; ok {
		r.State, r.DrainingSince = "draining", &since
	}
	ep, ok := eps[addr.Addr()]
	if !ok {
		return r
	}
	if ep.TargetRef != nil {
		r.Pod = ep.TargetRef.Name
	}
	if ep.NodeName != nil {
		r.Node = *ep.NodeName
	}
	if r.DrainingSince == nil {
		r.State = conditions(ep.Conditions)
	}
	return r
}

// conditions names an endpoint's state as KEP-1669 reads its conditions.
func conditions(c discoveryv1.EndpointConditions) string {
	ready, serving, terminating := translate.Conditions(c)
	switch {
	case ready && !terminating:
		return "ready"
	case serving && terminating:
		return "serving-terminating"
	case terminating:
		return "terminating"
	}
	return "not-ready"
}

func endpointsByAddr(eps []*discoveryv1.EndpointSlice) map[netip.Addr]discoveryv1.Endpoint {
	out := map[netip.Addr]discoveryv1.Endpoint{}
	for _, s := range eps {
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					out[ip] = ep
				}
			}
		}
	}
	return out
}
