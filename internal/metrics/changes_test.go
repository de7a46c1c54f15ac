package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestChangesAreReadAtScrape(t *testing.T) {
	svcs, eps := uint64(0), uint64(0)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewChanges(func() (uint64, uint64) { return svcs, eps }))
	svcs, eps = 3, 7
	want := `
# HELP kubeproxy_sync_proxy_rules_endpoint_changes_total Cumulative EndpointSlice changes (adds, updates, deletes) taken in.
# TYPE kubeproxy_sync_proxy_rules_endpoint_changes_total counter
kubeproxy_sync_proxy_rules_endpoint_changes_total 7
# HELP kubeproxy_sync_proxy_rules_service_changes_total Cumulative Service changes (adds, updates, deletes) taken in.
# TYPE kubeproxy_sync_proxy_rules_service_changes_total counter
kubeproxy_sync_proxy_rules_service_changes_total 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), ServiceChanges, EndpointChanges); err != nil {
		t.Fatal(err)
	}
}
