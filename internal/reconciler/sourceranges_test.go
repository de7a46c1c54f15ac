package reconciler

import (
	"strings"
	"testing"
)

// TestBadSourceRangeDeniesAndWarns: a source range that does not parse
// leaves the load balancer filtered with no allowed range, the Service is
// otherwise applied, and the user is told; fixing it to allow-all removes
// the filter.
func TestBadSourceRangeDeniesAndWarns(t *testing.T) {
	r := newRig(t)
	svc := lbLocal()
	svc.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24", "010.0.0.0/8"}
	r.store.SetService(svc)
	r.sync(false)
	want := `set KUBE-IPVS-CLUSTER-IP 10.96.0.20,tcp:80
set KUBE-IPVS-FRONTENDS 10.96.0.20,tcp:80
set KUBE-IPVS-FRONTENDS 192.0.2.20,tcp:80
set KUBE-IPVS-LB-FW 192.0.2.20,tcp:80
set KUBE-IPVS-NO-ENDPOINTS 10.96.0.20,tcp:80
set KUBE-IPVS-NO-ENDPOINTS 192.0.2.20,tcp:80
set KUBE-IPVS-VIPS 10.96.0.20
set KUBE-IPVS-VIPS 192.0.2.20
`
	if got := setLines(r.fake.Dump()); got != want {
		t.Fatalf("members:\n%s\nwant:\n%s", got, want)
	}
	if !strings.Contains(r.fake.Dump(), "-A -t 192.0.2.20:80") {
		t.Fatalf("the load balancer's virtual server is missing:\n%s", r.fake.Dump())
	}
	if len(r.warn.warnings) != 1 || !strings.Contains(r.warn.warnings[0], "default/lb") || !strings.Contains(r.warn.warnings[0], "010.0.0.0/8") {
		t.Fatalf("warnings %q, want one naming default/lb and the range", r.warn.warnings)
	}

	svc = svc.DeepCopy()
	svc.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24", "0.0.0.0/0"}
	r.store.SetService(svc)
	r.sync(false)
	if got := firewallLines(r.fake.Dump()); got != "" {
		t.Fatalf("allow-all still filtered:\n%s", got)
	}
	if len(r.warn.warnings) != 1 {
		t.Fatalf("warnings %q after the fix, want none new", r.warn.warnings)
	}
}

// firewallLines are the LB-FW and LB-SOURCE-CIDR members of a dump.
func firewallLines(dump string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(setLines(dump), "\n") {
		if strings.Contains(l, "-LB-FW ") || strings.Contains(l, "-LB-SOURCE-CIDR ") {
			b.WriteString(l)
		}
	}
	return b.String()
}
