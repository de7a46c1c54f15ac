package dataplanetest

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// conntrackTests are the contract of dataplane.Conntrack that holds on any
// kernel; deleting real entries is checked with a conntrack client
// (linux/kernel_test.go) and with the fake's planted entries.
var conntrackTests = []contractTest[dataplane.Dataplane]{
	{"FlushConntrackNothing", testFlushConntrackNothing},
}

func testFlushConntrackNothing(t *testing.T, dp dataplane.Dataplane) {
	ctx := ctxFor(t)
	for _, c := range []struct {
		proto model.Protocol
		real  netip.AddrPort
	}{{model.UDP, real4a}, {model.TCP, real4b}, {model.UDP, real6a}, {model.SCTP, real6b}} {
		n, err := dp.FlushConntrack(ctx, c.proto, c.real)
		must(t, fmt.Sprintf("flush %s %s", c.proto, c.real), err)
		if n != 0 {
			t.Errorf("flush %s %s with no traffic deleted %d entries", c.proto, c.real, n)
		}
	}
}
