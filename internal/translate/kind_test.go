package translate

import "testing"

func TestFrontendKinds(t *testing.T) {
	for _, tt := range []struct {
		kind                        FrontendKind
		bindsVIP, internal, sources bool
	}{
		{KindClusterIP, true, true, false},
		{KindExternalIP, true, false, false},
		{KindLoadBalancer, true, false, true},
		{KindNodePort, false, false, false},
	} {
		k := tt.kind
		if k.BindsVIP() != tt.bindsVIP || k.InternalPolicy() != tt.internal || k.HasSourceRanges() != tt.sources {
			t.Errorf("%s: binds VIP %v, internal policy %v, source ranges %v", k, k.BindsVIP(), k.InternalPolicy(), k.HasSourceRanges())
		}
	}
}

func TestTopologyAdmits(t *testing.T) {
	ep := endpoint{zoneHints: []string{"z1"}, nodeHints: []string{"n1"}}
	for _, tt := range []struct {
		mode       topology
		node, zone string
		want       bool
	}{
		{topologyNone, "n2", "z2", true},
		{topologySameZone, "n2", "z1", true},
		{topologySameZone, "n1", "z2", false},
		{topologySameNode, "n1", "z2", true},
		{topologySameNode, "n2", "z1", false},
	} {
		if got := tt.mode.admits(ep, tt.node, tt.zone); got != tt.want {
			t.Errorf("mode %d on %s/%s: %v, want %v", tt.mode, tt.node, tt.zone, got, tt.want)
		}
	}
}
