package main

import "testing"

const fullSyncBefore = `# HELP kubeproxy_sync_full_proxy_rules_duration_seconds [ALPHA] SyncProxyRules latency in seconds for full resyncs
# TYPE kubeproxy_sync_full_proxy_rules_duration_seconds histogram
kubeproxy_sync_full_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="1"} 0
kubeproxy_sync_full_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="+Inf"} 1
kubeproxy_sync_full_proxy_rules_duration_seconds_sum{ip_family="IPv4"} 12.5
kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family="IPv4"} 1
kubeproxy_sync_full_proxy_rules_duration_seconds_bucket{ip_family="IPv6",le="1"} 1
kubeproxy_sync_full_proxy_rules_duration_seconds_bucket{ip_family="IPv6",le="+Inf"} 1
kubeproxy_sync_full_proxy_rules_duration_seconds_sum{ip_family="IPv6"} 0.05
kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family="IPv6"} 1
kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"} 40
`

func TestFamilyCounts(t *testing.T) {
	got := familyCounts(fullSyncBefore, fullSyncMetric)
	if len(got) != 2 || got[`{ip_family="IPv4"}`] != 1 || got[`{ip_family="IPv6"}`] != 1 {
		t.Errorf("got %v", got)
	}
	if got := familyCounts("plain_count 3\nplain_count_other 9\n", "plain"); len(got) != 1 || got[""] != 3 {
		t.Errorf("unlabelled: got %v", got)
	}
}

// The sync counts only once every IP family has done its own: IPv4
// alone, the IPv6 proxier's sync still to come, is not yet the sync.
func TestGrewAll(t *testing.T) {
	before := map[string]float64{"v4": 1, "v6": 1}
	for _, tc := range []struct {
		after map[string]float64
		want  bool
	}{
		{map[string]float64{"v4": 2, "v6": 2}, true},
		{map[string]float64{"v4": 2, "v6": 1}, false},
		{map[string]float64{"v4": 3}, false}, // an unreadable family is not a sync
		{map[string]float64{}, false},        // /metrics unreadable
	} {
		if got := grewAll(before, tc.after); got != tc.want {
			t.Errorf("%v: got %v, want %v", tc.after, got, tc.want)
		}
	}
	if grewAll(map[string]float64{}, map[string]float64{"v4": 1}) {
		t.Error("nothing before: want false")
	}
}

// One full sync's own duration is the histogram's sum over the families.
func TestFullSyncDelta(t *testing.T) {
	after := `kubeproxy_sync_full_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="1"} 0
kubeproxy_sync_full_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="+Inf"} 2
kubeproxy_sync_full_proxy_rules_duration_seconds_sum{ip_family="IPv4"} 16.5
kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family="IPv4"} 2
kubeproxy_sync_full_proxy_rules_duration_seconds_bucket{ip_family="IPv6",le="1"} 2
kubeproxy_sync_full_proxy_rules_duration_seconds_bucket{ip_family="IPv6",le="+Inf"} 2
kubeproxy_sync_full_proxy_rules_duration_seconds_sum{ip_family="IPv6"} 0.15
kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family="IPv6"} 2
`
	if !grewAll(familyCounts(fullSyncBefore, fullSyncMetric), familyCounts(after, fullSyncMetric)) {
		t.Fatal("both families synced: not seen")
	}
	h := histDelta(fullSyncBefore, after, fullSyncMetric)
	if h == nil || h.Count != 2 || h.Sum < 4.0999 || h.Sum > 4.1001 {
		t.Errorf("got %+v, want 2 syncs, 4.1 s", h)
	}
}
