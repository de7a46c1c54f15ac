package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Changes are the Service and EndpointSlice changes the agent took in,
// counted as kube-proxy's change trackers count them.
type Changes struct {
	// Services counts every Service add, update and delete taken in.
	Services uint64
	// Slices counts EndpointSlice adds, updates and deletes, by the slice's
	// address family ([0] IPv4, [1] IPv6; FQDN slices are not counted).
	Slices [2]uint64
	// ServicesPending is how many Services differ from what the last sync
	// took: changed, and not yet handed to a sync.
	ServicesPending int
	// SlicesPending counts the EndpointSlice changes taken in since the last
	// sync took the changes, by address family.
	SlicesPending [2]int
}

// ChangesCollector reports kube-proxy's change counters and pending gauges,
// read at scrape time from wherever the changes are taken in (the objects
// store).
//
// A dual-stack kube-proxy runs one proxier per family and hands each
// Service event to both, and each counts it: its Service change counter
// moves twice per event. Each counts only the EndpointSlices of its own
// family. Both are reproduced here for the families served, so a rate over
// the counters reads the same before and after a node switches over.
type ChangesCollector struct {
	families                                    model.Families
	read                                        func() Changes
	services, endpoints, svcPending, epsPending *prometheus.Desc
}

// NewChanges returns a collector calling read on every scrape; read must be
// safe to call concurrently with syncs.
func NewChanges(families model.Families, read func() Changes) *ChangesCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, "[ALPHA] "+help, nil, nil) }
	return &ChangesCollector{
		families:   families,
		read:       read,
		services:   d(ServiceChanges, "Cumulative proxy rules Service changes"),
		endpoints:  d(EndpointChanges, "Cumulative proxy rules Endpoint changes"),
		svcPending: d(ServiceChangesPending, "Pending proxy rules Service changes"),
		epsPending: d(EndpointChangesPending, "Pending proxy rules Endpoint changes"),
	}
}

// Describe implements prometheus.Collector.
func (c *ChangesCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.services, c.endpoints, c.svcPending, c.epsPending} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *ChangesCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.read()
	var slices, slicesPending float64
	for i, served := range []bool{c.families.IPv4, c.families.IPv6} {
		if served {
			slices += float64(n.Slices[i])
			slicesPending += float64(n.SlicesPending[i])
		}
	}
	perEvent := float64(len(families(c.families)))
	ch <- prometheus.MustNewConstMetric(c.services, prometheus.CounterValue, float64(n.Services)*perEvent)
	ch <- prometheus.MustNewConstMetric(c.endpoints, prometheus.CounterValue, slices)
	ch <- prometheus.MustNewConstMetric(c.svcPending, prometheus.GaugeValue, float64(n.ServicesPending))
	ch <- prometheus.MustNewConstMetric(c.epsPending, prometheus.GaugeValue, slicesPending)
}
