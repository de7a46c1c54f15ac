package metrics

import "github.com/prometheus/client_golang/prometheus"

// kube-proxy's change counters: the same names and meaning (each add,
// update or delete of a Service or EndpointSlice the agent took in), so
// dashboards that plot them carry over.
const (
	ServiceChanges  = "kubeproxy_sync_proxy_rules_service_changes_total"
	EndpointChanges = "kubeproxy_sync_proxy_rules_endpoint_changes_total"
)

// ChangesCollector reports cumulative change counts read at scrape time
// from wherever the changes are taken in (the snapshot store).
type ChangesCollector struct {
	read               func() (services, endpoints uint64)
	services, endpoint *prometheus.Desc
}

// NewChanges returns a collector calling read on every scrape.
func NewChanges(read func() (services, endpoints uint64)) *ChangesCollector {
	return &ChangesCollector{
		read:     read,
		services: prometheus.NewDesc(ServiceChanges, "Cumulative Service changes (adds, updates, deletes) taken in.", nil, nil),
		endpoint: prometheus.NewDesc(EndpointChanges, "Cumulative EndpointSlice changes (adds, updates, deletes) taken in.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *ChangesCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.services
	ch <- c.endpoint
}

// Collect implements prometheus.Collector.
func (c *ChangesCollector) Collect(ch chan<- prometheus.Metric) {
	svcs, eps := c.read()
	ch <- prometheus.MustNewConstMetric(c.services, prometheus.CounterValue, float64(svcs))
	ch <- prometheus.MustNewConstMetric(c.endpoint, prometheus.CounterValue, float64(eps))
}
