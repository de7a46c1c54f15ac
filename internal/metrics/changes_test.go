package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

func TestChangesAreReadAtScrapeAsKubeProxyCountsThem(t *testing.T) {
	var n Changes
	read := func() Changes { return n }
	single, dual := prometheus.NewRegistry(), prometheus.NewRegistry()
	single.MustRegister(NewChanges(model.Families{IPv4: true}, read))
	dual.MustRegister(NewChanges(model.Families{IPv4: true, IPv6: true}, read))
	n = Changes{Services: 3, Slices: [2]uint64{7, 2}, ServicesPending: 1, SlicesPending: [2]int{2, 1}}
	names := []string{ServiceChanges, EndpointChanges, ServiceChangesPending, EndpointChangesPending}
	head := `
# HELP kubeproxy_sync_proxy_rules_endpoint_changes_pending [ALPHA] Pending proxy rules Endpoint changes
# TYPE kubeproxy_sync_proxy_rules_endpoint_changes_pending gauge
kubeproxy_sync_proxy_rules_endpoint_changes_pending %s
# HELP kubeproxy_sync_proxy_rules_endpoint_changes_total [ALPHA] Cumulative proxy rules Endpoint changes
# TYPE kubeproxy_sync_proxy_rules_endpoint_changes_total counter
kubeproxy_sync_proxy_rules_endpoint_changes_total %s
# HELP kubeproxy_sync_proxy_rules_service_changes_pending [ALPHA] Pending proxy rules Service changes
# TYPE kubeproxy_sync_proxy_rules_service_changes_pending gauge
kubeproxy_sync_proxy_rules_service_changes_pending 1
# HELP kubeproxy_sync_proxy_rules_service_changes_total [ALPHA] Cumulative proxy rules Service changes
# TYPE kubeproxy_sync_proxy_rules_service_changes_total counter
kubeproxy_sync_proxy_rules_service_changes_total %s
`
	// IPv4 only: the IPv6 slices are not this proxy's; each Service event
	// counts once.
	for _, tc := range []struct {
		reg                   *prometheus.Registry
		epsPending, eps, svcs string
	}{
		{single, "2", "7", "3"},
		// Dual-stack: both families' slices; each Service event counted by
		// both proxiers.
		{dual, "3", "9", "6"},
	} {
		text := strings.Replace(head, "%s", tc.epsPending, 1)
		text = strings.Replace(text, "%s", tc.eps, 1)
		text = strings.Replace(text, "%s", tc.svcs, 1)
		if err := testutil.GatherAndCompare(tc.reg, strings.NewReader(text), names...); err != nil {
			t.Error(err)
		}
	}
}
