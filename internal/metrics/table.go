package metrics

import "github.com/prometheus/client_golang/prometheus"

// Table is the size of what the agent holds in the kernel.
type Table struct {
	VirtualServers int // virtual servers the agent wants that the kernel holds
	RealServers    int // their real servers, draining ones included
	BoundVIPs      int // VIPs bound on the agent's link, as addresses or local routes
	Draining       int // real servers kept at weight 0 until their connections end
	Invalid        int // Services skipped because they could not be translated
	Failing        int // Services whose kernel operations failed, retried with backoff
	Refused        int // frontends not programmed: another tool's, or on a reserved address
}

// TableCollector reports a Table read at scrape time. Counting is left to
// the scrape so that a sync's cost keeps following its change: counting
// real servers walks every virtual server, which an incremental sync of one
// Service among thousands must not pay.
type TableCollector struct {
	read  func() Table
	descs [7]*prometheus.Desc
}

// NewTable returns a collector calling read on every scrape; read must be
// safe to call concurrently with syncs, and must not wait for one (the
// agent reads the reconciler's published view).
func NewTable(read func() Table) *TableCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &TableCollector{read: read, descs: [7]*prometheus.Desc{
		d(VirtualServers, "IPVS virtual servers the agent wants and the kernel holds (foreign ones are not counted)."),
		d(RealServers, "Real servers of those virtual servers, draining ones included."),
		d(BoundVIPs, "VIPs bound on the kube-ipvs0 link, as addresses or local routes."),
		d(DrainingReals, "Real servers kept at weight 0 until their connections end or the drain timeout passes."),
		d(InvalidServices, "Services skipped because they could not be translated (their last good state stays in force)."),
		d(ServiceErrors, "Services whose kernel operations failed (a scheduler the kernel lacks, say); they are retried with backoff and do not fail the sync."),
		d(RefusedFrontends, "Frontends not programmed because another tool's virtual server holds them or their address, or they are on a node's, the API server's or the pod network's address."),
	}}
}

// Describe implements prometheus.Collector.
func (c *TableCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *TableCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.read()
	for i, v := range []int{t.VirtualServers, t.RealServers, t.BoundVIPs, t.Draining, t.Invalid, t.Failing, t.Refused} {
		m, err := prometheus.NewConstMetric(c.descs[i], prometheus.GaugeValue, float64(v))
		if err != nil {
			m = prometheus.NewInvalidMetric(c.descs[i], err)
		}
		ch <- m
	}
}
