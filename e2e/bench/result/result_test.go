package result

import (
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	for _, tc := range []struct{ p, want float64 }{{50, 5}, {99, 10}, {100, 10}, {0, 1}, {10, 1}, {11, 2}} {
		if got := Percentile(xs, tc.p); got != tc.want {
			t.Errorf("p%v: got %v, want %v", tc.p, got, tc.want)
		}
	}
	if xs[0] != 5 {
		t.Error("Percentile sorted its input")
	}
	if !math.IsNaN(Percentile(nil, 50)) || !math.IsNaN(Max(nil)) {
		t.Error("empty: want NaN")
	}
	if Max(xs) != 10 {
		t.Error("Max")
	}
}

func TestCensoredPercentile(t *testing.T) {
	seen := []float64{3, 1, 2}
	for _, tc := range []struct {
		timeouts int
		p, want  float64
		atLeast  bool
	}{
		{0, 99, 3, false},  // nothing censored: the plain percentile
		{1, 50, 2, false},  // rank 2 of 4 falls on a change seen
		{1, 99, 60, true},  // rank 4 of 4 is the change never seen
		{97, 2, 2, false},  // 100 changes, rank 2: seen ones rank first
		{97, 50, 60, true}, // most never seen: the median is a bound
	} {
		v, atLeast := CensoredPercentile(seen, tc.timeouts, 60, tc.p)
		if v != tc.want || atLeast != tc.atLeast {
			t.Errorf("%d timeouts, p%v: got %v (at least: %v), want %v (%v)", tc.timeouts, tc.p, v, atLeast, tc.want, tc.atLeast)
		}
	}
	if v, _ := CensoredPercentile(nil, 4, 0, 99); !math.IsNaN(v) {
		t.Errorf("a bound not recorded: got %v, want NaN", v)
	}
	if v, _ := CensoredPercentile(nil, 0, 60, 99); !math.IsNaN(v) {
		t.Errorf("nothing measured: got %v, want NaN", v)
	}
}

func TestHourPerMinute(t *testing.T) {
	// 0.5 CPU-s over 60 s: 0.5 a minute in the window alone.
	at := func(name string) Tool { return Tool{Name: name, IdleCPU: 0.5, IdleWindow: 60, FullSyncSeconds: -1} }
	nft := at(KubeProxyNFT)
	nft.FullSyncCPU, nft.FullSyncSeconds = 6, 8
	short := at(KubeIPVS)
	short.IdleShort = true
	noSync := at(KubeProxyNFT)
	old := at(KubeProxyNFT) // a result from before the full sync was measured
	old.FullSyncSeconds = 0
	for _, tc := range []struct {
		what string
		t    Tool
		want float64
	}{
		// The window's rate over the hour but the sync's 8 s, and 6 CPU-s
		// for the sync: 0.5 × 3592/3600 + 0.1.
		{"nftables mode: one 6 CPU-s full sync of 8 s an hour", nft, 0.5*3592/3600 + 0.1},
		{"kube-ipvs: its window holds its drift reads", at(KubeIPVS), 0.5},
		{"IPVS mode: likewise", at(KubeProxyIPVS), 0.5},
		{"a window shorter than two periods", short, math.NaN()},
		{"nftables mode without its full sync", noSync, math.NaN()},
		{"nftables mode, a result from before", old, math.NaN()},
		{"no idle window", Tool{Name: KubeProxyNFT, FullSyncCPU: 6, FullSyncSeconds: 8}, math.NaN()},
	} {
		got := tc.t.HourPerMinute()
		if math.IsNaN(tc.want) != math.IsNaN(got) || !math.IsNaN(got) && math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: got %v, want %v", tc.what, got, tc.want)
		}
	}
}
