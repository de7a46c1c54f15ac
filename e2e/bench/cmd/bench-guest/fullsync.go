package main

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/protocol"
	"github.com/kube-ipvs/kube-ipvs/e2e/bench/result"
)

// fullSyncMetric is kube-proxy's histogram of its full syncs, a label set
// per IP family (its proxier for each observes its own).
const fullSyncMetric = "kubeproxy_sync_full_proxy_rules_duration_seconds"

const (
	fullSyncZone  = "bench-full-sync" // the node's zone label while measured
	fullSyncLimit = 15 * time.Minute  // the wait for the sync after the label's change
	// fullSyncPoll is how often /metrics is read meanwhile: each read costs
	// kube-proxy a little CPU, counted as the sync's, so seldom; the wall
	// time is late by up to one poll (its own duration is exact).
	fullSyncPoll = time.Second
)

// fullSync measures one full sync of kube-proxy's nftables mode at rest.
// Left alone, it does one when an hour has passed since the last; a change
// of its own Node's topology labels (topology.kubernetes.io/zone, the one
// it reads) makes it do one at once, as when the hour is up. The CPU and
// wall time run from the label's change until the full syncs' count has
// grown in every IP family that had one (each family's proxier syncs in
// full on the change, as each does hourly). Not seen within the limit: not
// measured, said on the console.
func fullSync(t *result.Tool, s settings, pid int, name string) error {
	if _, _, ok, err := quiet(pid, s.settleLimit); err != nil {
		return err
	} else if !ok {
		fmt.Printf("bench-guest: %s: still busy %s after the burst; full sync measured anyway\n", name, s.settleLimit)
	}
	before := scrape()
	if len(familyCounts(before, fullSyncMetric)) == 0 {
		fmt.Printf("bench-guest: %s: its /metrics shows no %s: full sync not measured\n", name, fullSyncMetric)
		return nil
	}
	c0, err := cpuSeconds(pid)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := setZone(s, fullSyncZone); err != nil {
		return err
	}
	after, ok := awaitFullSync(before, start.Add(fullSyncLimit))
	wall := time.Since(start)
	if !ok {
		fmt.Printf("bench-guest: %s: no full sync within %s of its node's zone label changing (%s_count did not grow in every IP family): full sync not measured\n",
			name, fullSyncLimit, fullSyncMetric)
		return nil
	}
	c1, err := cpuSeconds(pid)
	if err != nil {
		return err
	}
	h := histDelta(before, after, fullSyncMetric)
	t.FullSyncCPU, t.FullSyncSeconds, t.FullSyncOwn, t.FullSyncs = c1-c0, wall.Seconds(), h.Sum, int(h.Count)
	return nil
}

// awaitFullSync reads /metrics until every IP family's full syncs in
// before have grown, or until; it returns the read that showed it.
func awaitFullSync(before string, until time.Time) (string, bool) {
	want := familyCounts(before, fullSyncMetric)
	for time.Now().Before(until) {
		time.Sleep(fullSyncPoll)
		after := scrape()
		if grewAll(want, familyCounts(after, fullSyncMetric)) {
			return after, true
		}
	}
	return "", false
}

// setZone asks the host to set the node's zone label ("": remove it).
func setZone(s settings, zone string) error {
	return call("POST", s.ctl+protocol.PathZone+"?"+protocol.ZoneParam+"="+url.QueryEscape(zone), nil, nil)
}

// familyCounts is histogram name's count per label set (for kube-proxy,
// one per IP family), keyed by the label set as written.
func familyCounts(text, name string) map[string]float64 {
	out := map[string]float64{}
	for _, l := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(l, name+"_count")
		if !ok || rest == "" || rest[0] != '{' && rest[0] != ' ' {
			continue
		}
		i := strings.LastIndexByte(rest, ' ')
		v, err := strconv.ParseFloat(rest[i+1:], 64)
		if err != nil {
			continue
		}
		out[strings.TrimSpace(rest[:i])] = v
	}
	return out
}

// grewAll: every count in before is higher in after (and there was one).
func grewAll(before, after map[string]float64) bool {
	for k, v := range before {
		if after[k] <= v {
			return false
		}
	}
	return len(before) > 0
}
