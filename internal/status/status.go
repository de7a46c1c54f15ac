// Package status builds the annotated view of a node that `kube-ipvs
// status` prints: each virtual server with the Service it serves and why it
// has its scheduler, each real server with the endpoint behind it, the VIPs
// bound and the last sync's outcome. Pure: it reads the reconciler's
// published view and nothing else.
package status

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

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
	State  RealState      `json:"state"`
	// DrainingSince is set when State is Draining.
	DrainingSince *time.Time `json:"drainingSince,omitempty"`
}

// RealState is what a real server is doing, as status names it.
type RealState string

// The states of a real server: its endpoint's conditions as KEP-1669 reads
// them, Draining when it left its Service and is kept at weight 0 for its
// connections, Unknown when no endpoint stands behind it (a foreign
// virtual server, or a real server the kernel holds but no slice lists).
const (
	Ready              RealState = "ready"
	ServingTerminating RealState = "serving-terminating"
	Terminating        RealState = "terminating"
	NotReady           RealState = "not-ready"
	Draining           RealState = "draining"
	Unknown            RealState = "unknown"
)

// Build annotates the reconciler's published view.
func Build(node string, v *reconciler.View) Report {
	rep := Report{Node: node, LastSync: SyncOf(v.Last), VIPs: v.VIPs()}
	for _, k := range v.Keys() {
		s, _ := v.Server(k)
		rep.VirtualServers = append(rep.VirtualServers, virtualServer(k, s, v))
	}
	return rep
}

// SyncOf reports a sync's outcome.
func SyncOf(s reconciler.Status) Sync {
	out := Sync{Time: s.Time, Full: s.Full, Ops: s.Ops, Failed: s.Failed, Draining: s.Draining, Seconds: s.Duration.Seconds()}
	if s.Err != nil {
		out.Error = s.Err.Error()
	}
	return out
}

func virtualServer(k model.VSKey, s *reconciler.Server, v *reconciler.View) VirtualServer {
	src := s.Desired
	if src == nil {
		src = s.Observed
	}
	vs := VirtualServer{Key: k.String(), Scheduler: string(src.Scheduler), InKernel: s.Observed != nil, Wanted: s.Desired != nil}
	if src.Flags&model.FlagPersistent != 0 {
		vs.Persistent = src.Timeout
	}
	if s.Desired != nil {
		m := s.Meta
		vs.Service, vs.Port, vs.Kind, vs.SchedulerFrom = m.Service.String(), m.PortName, string(m.Kind), m.SchedulerFrom
	}
	for _, addr := range reals(s.Desired, s.Observed) {
		vs.Reals = append(vs.Reals, real(k, addr, s, v))
	}
	return vs
}

// reals lists the real servers of either side, sorted.
func reals(want, have *model.Service) []netip.AddrPort {
	addrs := map[netip.AddrPort]struct{}{}
	for _, side := range []*model.Service{want, have} {
		if side != nil {
			for _, rs := range side.Reals.All() {
				addrs[rs.Addr] = struct{}{}
			}
		}
	}
	return slices.SortedFunc(maps.Keys(addrs), netip.AddrPort.Compare)
}

func real(k model.VSKey, addr netip.AddrPort, s *reconciler.Server, v *reconciler.View) Real {
	r := Real{Addr: addr, Weight: -1, State: Unknown}
	if s.Observed != nil {
		if rs, ok := s.Observed.Reals.Get(addr); ok {
			r.Weight = rs.Weight
		}
	}
	ep, known := s.Meta.Endpoint(addr)
	if known {
		r.Pod, r.Node, r.State = ep.Pod, ep.Node, conditions(ep)
	}
	if since, ok := v.DrainingSince(dataplane.RealRef{VS: k, RS: addr}); ok {
		r.State, r.DrainingSince = Draining, &since
	}
	return r
}

// conditions names an endpoint's state as KEP-1669 reads its conditions.
func conditions(ep translate.Endpoint) RealState {
	switch {
	case ep.Ready && !ep.Terminating:
		return Ready
	case ep.Serving && ep.Terminating:
		return ServingTerminating
	case ep.Terminating:
		return Terminating
	}
	return NotReady
}

// OfServices is the part of the report that serves the named Services
// ("namespace/name"): their virtual servers, and the VIPs those listen on.
// No name: the whole report.
func (r Report) OfServices(names []string) Report {
	if len(names) == 0 {
		return r
	}
	out := Report{Node: r.Node, LastSync: r.LastSync, VIPs: []netip.Addr{}, VirtualServers: []VirtualServer{}}
	addrs := map[netip.Addr]struct{}{}
	for _, vs := range r.VirtualServers {
		if slices.Contains(names, vs.Service) {
			out.VirtualServers = append(out.VirtualServers, vs)
			if ap, err := netip.ParseAddrPort(vs.Key[strings.LastIndexByte(vs.Key, ' ')+1:]); err == nil {
				addrs[ap.Addr()] = struct{}{}
			}
		}
	}
	for _, a := range r.VIPs {
		if _, ok := addrs[a]; ok {
			out.VIPs = append(out.VIPs, a)
		}
	}
	return out
}
