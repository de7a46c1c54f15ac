package translate

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestUnservableVIPs: an address that cannot be a VIP (as the API server
// lets through in status.loadBalancer.ingress, or in objects older than
// its strict rules) gets no virtual server and no binding, the Service's
// other frontends are served, and each is reported.
func TestUnservableVIPs(t *testing.T) {
	lb := func(ips ...string) svcOpt {
		return func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Status.LoadBalancer.Ingress = nil
			for _, ip := range ips {
				s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
			}
		}
	}
	tests := []struct {
		name string
		opt  svcOpt
		warn string
	}{
		{"loopback ingress", lb("127.0.0.1"), `status.loadBalancer.ingress[0] "127.0.0.1" is a loopback address`},
		{"IPv6 loopback ingress", lb("::1"), `"::1" is a loopback address`},
		{"mapped loopback ingress", lb("::ffff:127.0.0.1"), `"::ffff:127.0.0.1" is a loopback address`},
		{"unspecified ingress", lb("0.0.0.0"), `"0.0.0.0" is unspecified`},
		{"link-local ingress", lb("169.254.169.254"), `"169.254.169.254" is link-local`},
		{"multicast ingress", lb("ff02::1"), `"ff02::1" is multicast`},
		{"zoned external IP", externalIPsOpt("fd00::1%eth0"), `spec.externalIPs[0] "fd00::1%eth0" has a zone`},
		{"leading-zero external IP", externalIPsOpt("192.0.2.010"), `spec.externalIPs[0] "192.0.2.010" is not an IP address`},
		{"loopback ClusterIP", clusterIPsOpt("127.0.0.1"), `spec.clusterIPs[0] "127.0.0.1" is a loopback address`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Service(service(externalIPsOpt("192.0.2.30"), tt.opt), nil, testNode(), testConfig())
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			for _, s := range res.Services {
				if why := unservable(s.Key.Addr); why != "" {
					t.Errorf("virtual server %s: its address %s", s.Key, why)
				}
			}
			for _, a := range res.Addrs {
				if why := unservable(a); why != "" {
					t.Errorf("VIP %s bound: it %s", a, why)
				}
			}
			if len(res.Services) == 0 {
				t.Error("the Service's good frontends were dropped too")
			}
			if w := errors.Join(res.Warnings...); w == nil || !strings.Contains(w.Error(), tt.warn) {
				t.Errorf("warnings %v, want one containing %s", w, tt.warn)
			}
		})
	}
	if res := Service(service(externalIPsOpt("192.0.2.30")), nil, testNode(), testConfig()); len(res.Warnings) > 0 {
		t.Errorf("a good Service warns: %v", res.Warnings)
	}
}

// TestExternalIPCIDRs: with --external-ip-cidrs set, an external IP outside
// them gets no virtual server and no binding, and is reported; one inside
// is served; unset, every external IP is served, as with kube-proxy. The
// list does not apply to ClusterIPs or load-balancer IPs.
func TestExternalIPCIDRs(t *testing.T) {
	allow := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/28"), netip.MustParsePrefix("2001:db8::/64")}
	svc := service(externalIPsOpt("192.0.2.5", "192.0.2.200", "2001:db8::7", "2001:db8:1::7"))
	addrsOf := func(res Result) string {
		var out []string
		for _, a := range res.Addrs {
			out = append(out, a.String())
		}
		return strings.Join(out, " ")
	}
	cfg := testConfig()
	if got := addrsOf(Service(svc, nil, testNode(), cfg)); !strings.Contains(got, "192.0.2.200") || !strings.Contains(got, "2001:db8:1::7") {
		t.Errorf("unset: VIPs %s, want every external IP", got)
	}
	cfg.ExternalIPCIDRs = allow
	res := Service(svc, nil, testNode(), cfg)
	got := addrsOf(res)
	if !strings.Contains(got, "192.0.2.5") || !strings.Contains(got, "2001:db8::7") || strings.Contains(got, "192.0.2.200") || strings.Contains(got, "2001:db8:1::7") {
		t.Errorf("set: VIPs %s, want only those inside %v", got, allow)
	}
	for _, s := range res.Services {
		if a := s.Key.Addr.String(); a == "192.0.2.200" || a == "2001:db8:1::7" {
			t.Errorf("virtual server %s outside the allowed CIDRs", s.Key)
		}
	}
	w := errors.Join(res.Warnings...)
	if w == nil || !strings.Contains(w.Error(), `spec.externalIPs[1] "192.0.2.200" is outside`) || !strings.Contains(w.Error(), `spec.externalIPs[3] "2001:db8:1::7" is outside`) {
		t.Errorf("warnings %v", w)
	}
}
