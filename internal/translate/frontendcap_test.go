package translate

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// keysOf lists a Result's virtual servers, sorted.
func keysOf(r Result) []string {
	var out []string
	for _, s := range r.Services {
		out = append(out, s.Key.String())
	}
	slices.Sort(out)
	return out
}

// bigLB is a dual-stack LoadBalancer Service with two ports, two external
// IPs and one ingress IP: 14 frontends on testNode (a primary address per
// family).
func bigLB() *corev1.Service {
	return service(typeOpt(corev1.ServiceTypeLoadBalancer), clusterIPsOpt("10.96.0.10", "fd00::10"),
		portsOpt(svcPort("http", corev1.ProtocolTCP, 80, 30080), svcPort("https", corev1.ProtocolTCP, 443, 30443)),
		externalIPsOpt("198.51.100.1", "198.51.100.2"), ingressOpt("203.0.113.100"))
}

func TestFrontendCap(t *testing.T) {
	for _, tc := range []struct {
		name    string
		max     int
		want    []string
		dropped int
	}{
		{"at the cap", 14, nil, 0},
		{"ClusterIPs, then load-balancer IPs, then external IPs, address by address", 7, []string{
			"-t 10.96.0.10:443", "-t 10.96.0.10:80", "-t 198.51.100.1:80", "-t 203.0.113.100:443", "-t 203.0.113.100:80",
			"-t [fd00::10]:443", "-t [fd00::10]:80",
		}, 7},
		{"NodePorts last, port by port", 12, []string{
			"-t 10.96.0.10:443", "-t 10.96.0.10:80", "-t 192.168.1.10:30080",
			"-t 198.51.100.1:443", "-t 198.51.100.1:80", "-t 198.51.100.2:443", "-t 198.51.100.2:80",
			"-t 203.0.113.100:443", "-t 203.0.113.100:80", "-t [fd00:1::10]:30080",
			"-t [fd00::10]:443", "-t [fd00::10]:80",
		}, 2},
		{"one", 1, []string{"-t 10.96.0.10:80"}, 13},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.MaxFrontends = tc.max
			res := Service(bigLB(), nil, testNode(), cfg)
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			var capped []error
			for _, w := range res.Warnings {
				if errors.Is(w, ErrTooManyFrontends) {
					capped = append(capped, w)
				}
			}
			if tc.dropped == 0 {
				if len(res.Services) != 14 || len(capped) != 0 {
					t.Fatalf("%d virtual servers, warnings %v: want all 14, no warning", len(res.Services), res.Warnings)
				}
				return
			}
			if got := keysOf(res); !slices.Equal(got, tc.want) {
				t.Errorf("served\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if len(capped) != 1 || !strings.Contains(capped[0].Error(), fmt.Sprintf("it asks for %d frontends on this node, at most %d are made", tc.max+tc.dropped, tc.max)) {
				t.Errorf("warnings %v, want one saying %d of %d are made", res.Warnings, tc.max, tc.max+tc.dropped)
			}
			for _, a := range res.Addrs {
				if !slices.ContainsFunc(res.Services, func(s *model.Service) bool { return s.Key.Addr == a }) {
					t.Errorf("VIP %s bound without a virtual server", a)
				}
			}
		})
	}
}

// Under the cap, every node serves the same ClusterIP, load-balancer and
// external-IP frontends, or fewer where its own flags leave some out, but
// never others: how many NodePort addresses a node has, which families it
// serves and its --external-ip-cidrs do not move the choice.
func TestFrontendCapSameOnEveryNode(t *testing.T) {
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	all := []string{"-t 10.96.0.10:443", "-t 10.96.0.10:80", "-t 198.51.100.1:443", "-t 198.51.100.1:80", "-t 198.51.100.2:80",
		"-t 203.0.113.100:443", "-t 203.0.113.100:80", "-t [fd00::10]:443", "-t [fd00::10]:80"}
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		want []string // the frontends not NodePorts
	}{
		{"one NodePort address", func(c *Config) { c.HostAddrs = addrs("192.168.1.10") }, all},
		{"four NodePort addresses", func(c *Config) {
			c.HostAddrs = addrs("192.168.1.10", "192.168.1.11", "192.168.1.12", "fd00:1::10")
		}, all},
		{"IPv4 only, one external IP allowed", func(c *Config) {
			c.HostAddrs = addrs("192.168.1.10")
			c.Families = model.Families{IPv4: true}
			c.ExternalIPCIDRs = []netip.Prefix{netip.MustParsePrefix("198.51.100.2/32")}
		}, []string{"-t 10.96.0.10:443", "-t 10.96.0.10:80", "-t 198.51.100.2:80", "-t 203.0.113.100:443", "-t 203.0.113.100:80"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.MaxFrontends, cfg.NodePortAddresses = 9, nil
			tc.cfg(&cfg)
			res := Service(bigLB(), nil, testNode(), cfg)
			var got []string
			for i, s := range res.Services {
				if res.Meta[i].Kind != KindNodePort {
					got = append(got, s.Key.String())
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("served\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// With no cap configured, a Service of 1,024 external IPs on 16 ports
// (16,400 frontends) gets DefaultMaxFrontends of them, its ClusterIPs
// among them.
func TestFrontendCapDefault(t *testing.T) {
	var ips []string
	for i := range 1024 {
		ips = append(ips, fmt.Sprintf("198.51.%d.%d", 100+i/256, i%256))
	}
	var ports []corev1.ServicePort
	for i := range 16 {
		ports = append(ports, svcPort(fmt.Sprintf("p%d", i), corev1.ProtocolTCP, int32(8000+i), 0))
	}
	res := Service(service(externalIPsOpt(ips...), portsOpt(ports...)), nil, testNode(), testConfig())
	if n := len(res.Services); n != DefaultMaxFrontends {
		t.Fatalf("%d virtual servers, want %d", n, DefaultMaxFrontends)
	}
	for _, p := range ports {
		if !slices.Contains(keysOf(res), fmt.Sprintf("-t 10.96.0.10:%d", p.Port)) {
			t.Errorf("ClusterIP port %d not served", p.Port)
		}
	}
	if len(res.Warnings) != 1 || !errors.Is(res.Warnings[0], ErrTooManyFrontends) {
		t.Errorf("warnings %v, want the cap's", res.Warnings)
	}
}

// hostileFrontends is a Service of 1,024 external IPs on 1,024 ports: a
// 70 KB object asking for 1,049,600 frontends.
func hostileFrontends() *corev1.Service {
	var ips []string
	for i := range 1024 {
		ips = append(ips, fmt.Sprintf("198.51.%d.%d", 100+i/256, i%256))
	}
	var ports []corev1.ServicePort
	for i := range 1024 {
		ports = append(ports, svcPort(fmt.Sprintf("p%d", i), corev1.ProtocolTCP, int32(1000+i), 0))
	}
	return service(externalIPsOpt(ips...), portsOpt(ports...))
}

// BenchmarkFrontendCapHostile translates a Service asking for a million
// frontends, of which DefaultMaxFrontends are served.
func BenchmarkFrontendCapHostile(b *testing.B) {
	svc, node, cfg := hostileFrontends(), testNode(), testConfig()
	b.ReportAllocs()
	for b.Loop() {
		if r := Service(svc, nil, node, cfg); len(r.Services) != DefaultMaxFrontends {
			b.Fatalf("%d virtual servers", len(r.Services))
		}
	}
}
