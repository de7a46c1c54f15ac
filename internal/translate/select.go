package translate

import (
	"slices"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// topology is how the endpoints' hints narrow them for this node, decided
// by topologyFor.
type topology uint8

const (
	topologyNone     topology = iota // every endpoint
	topologySameZone                 // PreferSameZone: those hinted for this node's zone
	topologySameNode                 // PreferSameNode: those hinted for this node
)

// admits tells whether an endpoint serves this node under the topology.
func (t topology) admits(ep endpoint, nodeName, zone string) bool {
	switch t {
	case topologySameNode:
		return slices.Contains(ep.nodeHints, nodeName)
	case topologySameZone:
		return slices.Contains(ep.zoneHints, zone)
	}
	return true
}

// selectReals picks a frontend's real servers and their weights (KEP-1669):
//   - the candidates are every endpoint (Cluster policy) or this node's
//     (Local policy); Cluster policy narrows ready endpoints by topology;
//   - ready candidates get weight 1, and terminating candidates that still
//     serve get weight 0: no new connections, existing ones go on;
//   - with no ready candidate, serving terminating candidates get weight 1;
//   - anything else is left out (the planner drains what it removes).
//
// Local policy with no local endpoint leaves the virtual server empty, as
// kube-proxy does: traffic is dropped rather than sent off the node.
func selectReals(eps []endpoint, local bool, nodeName, zone string) []model.RealServer {
	cands := eps
	mode := topologyNone
	if local {
		cands = slices.DeleteFunc(slices.Clone(eps), func(ep endpoint) bool {
			return !ep.on(nodeName)
		})
	} else {
		mode = topologyFor(eps, nodeName, zone)
	}
	// One pass in the candidates' (address) order, so that the real
	// servers come out sorted: a Service of thousands is not sorted again.
	anyReady := slices.ContainsFunc(cands, func(ep endpoint) bool { return ep.ready && mode.admits(ep, nodeName, zone) })
	out := make([]model.RealServer, 0, len(cands)) // each candidate once at most
	for _, ep := range cands {
		w := -1
		switch {
		case !anyReady:
			// No ready endpoint anywhere in the candidates (topology only
			// ever applies when a ready endpoint matches it): fall back to
			// endpoints that are terminating but still serve.
			if ep.serving && ep.terminating {
				w = 1
			}
		case !mode.admits(ep, nodeName, zone):
		case ep.ready:
			w = 1
		case ep.serving && ep.terminating:
			w = 0
		}
		if w >= 0 {
			out = append(out, model.RealServer{Addr: ep.addr, Weight: w, Forward: model.Masq})
		}
	}
	return out
}

// topologyFor decides, as kube-proxy's topologyModeFromHints does, whether
// hints narrow the endpoints for this node. Hints are set by the
// EndpointSlice controller only when the Service asks for them
// (spec.trafficDistribution PreferSameNode / PreferSameZone / PreferClose,
// or the topology-mode / topology-aware-hints annotation), so kube-proxy
// reads the hints alone and so do we:
//   - every ready endpoint has a node hint and one names this node ->
//     PreferSameNode;
//   - else every ready endpoint has a zone hint and one names this node's
//     zone -> PreferSameZone;
//   - else no topology: all endpoints (hints incomplete, or none for us).
func topologyFor(eps []endpoint, nodeName, zone string) topology {
	anyReady := false
	allNode, forNode := true, false
	allZone, forZone := true, false
	for _, ep := range eps {
		if !ep.ready {
			continue
		}
		anyReady = true
		if len(ep.nodeHints) == 0 {
			allNode = false
		} else if nodeName != "" && slices.Contains(ep.nodeHints, nodeName) {
			forNode = true
		}
		if len(ep.zoneHints) == 0 {
			allZone = false
		} else if zone != "" && slices.Contains(ep.zoneHints, zone) {
			forZone = true
		}
	}
	switch {
	case !anyReady:
		return topologyNone
	case allNode && forNode:
		return topologySameNode
	case allZone && forZone:
		return topologySameZone
	}
	return topologyNone
}

// lacksLocal tells whether endpoints has usable endpoints (ready, or
// serving while terminating) but none on this node: a Local policy then
// leaves the frontend empty although the Service has somewhere to go, the
// case kube-proxy counts (CategorizeEndpoints' hasAnyEndpoints without
// local endpoints).
func lacksLocal(eps []endpoint, nodeName string) bool {
	anywhere := false
	for _, ep := range eps {
		if !ep.ready && !(ep.serving && ep.terminating) {
			continue
		}
		if nodeName != "" && ep.nodeName == nodeName {
			return false
		}
		anywhere = true
	}
	return anywhere
}
