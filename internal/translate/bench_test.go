package translate

import (
	"fmt"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// BenchmarkService translates one ClusterIP Service with ten endpoints in
// one slice, the unit a cold start repeats for every Service.
func BenchmarkService(b *testing.B) {
	svc := service()
	eps := make([]discoveryv1.Endpoint, 10)
	for i := range eps {
		eps[i] = ep(fmt.Sprintf("10.0.1.%d", i+1), onNode(fmt.Sprintf("n%d", i%3)))
	}
	slices := []*discoveryv1.EndpointSlice{v4(eps...)}
	node, cfg := testNode(), testConfig()
	b.ReportAllocs()
	for b.Loop() {
		if r := Service(svc, slices, node, cfg); len(r.Services) == 0 {
			b.Fatal("no virtual server")
		}
	}
}
