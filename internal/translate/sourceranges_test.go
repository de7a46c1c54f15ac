package translate

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestSourceRanges checks the firewall members a dual-stack load balancer
// gets from its source ranges: a zero-length prefix means no filter for its
// family, and a range that does not parse denies every client of both
// families and is reported.
func TestSourceRanges(t *testing.T) {
	lb := func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}, {IP: "2001:db8::10"}}
	}
	spec := func(rs ...string) svcOpt {
		return func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = rs }
	}
	const (
		fw4     = "KUBE-IPVS-LB-FW 192.0.2.10,tcp:80\n"
		fw6     = "KUBE-IPVS6-LB-FW 2001:db8::10,tcp:80\n"
		allow4  = "KUBE-IPVS-LB-SOURCE-CIDR 192.0.2.10,tcp:80,198.51.100.0/24\n"
		allow6  = "KUBE-IPVS6-LB-SOURCE-CIDR 2001:db8::10,tcp:80,fd00::/8\n"
		denyAll = fw4 + fw6
	)
	tests := []struct {
		name string
		opts []svcOpt
		want string // the LB-FW and LB-SOURCE-CIDR members
		warn string // "" = no warning; else a part of it
	}{
		{name: "none: no filter", want: ""},
		{name: "one range per family", opts: []svcOpt{spec("198.51.100.0/24", "fd00::/8")}, want: fw4 + allow4 + fw6 + allow6},
		{name: "host bits are masked", opts: []svcOpt{spec("198.51.100.7/24")}, want: fw4 + allow4},
		{name: "0.0.0.0/0 is no filter", opts: []svcOpt{spec("0.0.0.0/0")}, want: ""},
		{name: "::/0 is no filter", opts: []svcOpt{spec("::/0")}, want: ""},
		{name: "a /0 with a host part is still all", opts: []svcOpt{spec("10.1.2.3/0")}, want: ""},
		{name: "a /0 beside other ranges opens its family only", opts: []svcOpt{spec("198.51.100.0/24", "0.0.0.0/0", "fd00::/8")},
			want: fw6 + allow6},
		{name: "both families all", opts: []svcOpt{spec("::/0", " 0.0.0.0/0 ")}, want: ""},
		{name: "padding is trimmed", opts: []svcOpt{spec(" 198.51.100.0/24\t")}, want: fw4 + allow4},
		{name: "a typo denies all", opts: []svcOpt{spec("198.51.100.0/24", "198.51.100.0/33")},
			want: denyAll, warn: `spec.loadBalancerSourceRanges[1] "198.51.100.0/33"`},
		{name: "a leading-zero IPv4 denies all", opts: []svcOpt{spec("010.0.0.0/8")},
			want: denyAll, warn: `spec.loadBalancerSourceRanges[0] "010.0.0.0/8"`},
		{name: "a bad range beside a /0 still denies all", opts: []svcOpt{spec("0.0.0.0/0", "::/0", "nope")},
			want: denyAll, warn: `"nope"`},
		{name: "an empty item denies all", opts: []svcOpt{spec("")}, want: denyAll, warn: `spec.loadBalancerSourceRanges[0] ""`},
		{name: "a zoned range denies all", opts: []svcOpt{spec("fe80::%eth0/64")}, want: denyAll, warn: `"fe80::%eth0/64"`},
		{name: "a bare address denies all", opts: []svcOpt{spec("198.51.100.7")}, want: denyAll, warn: `"198.51.100.7"`},
		{name: "annotation when the field is empty", opts: []svcOpt{annotationOpt(annotationSourceRanges, "198.51.100.0/24, fd00::/8")},
			want: fw4 + allow4 + fw6 + allow6},
		{name: "annotation allow-all", opts: []svcOpt{annotationOpt(annotationSourceRanges, "0.0.0.0/0,::/0")}, want: ""},
		{name: "blank annotation is none", opts: []svcOpt{annotationOpt(annotationSourceRanges, "  ")}, want: ""},
		{name: "field wins over the annotation", opts: []svcOpt{spec("fd00::/8"), annotationOpt(annotationSourceRanges, "nope")},
			want: fw6 + allow6},
		{name: "a bad annotation denies all", opts: []svcOpt{annotationOpt(annotationSourceRanges, "198.51.100.0/24,010.0.0.0/8")},
			want: denyAll, warn: `annotation ` + annotationSourceRanges + ` item 1 "010.0.0.0/8"`},
		{name: "a trailing comma in the annotation denies all", opts: []svcOpt{annotationOpt(annotationSourceRanges, "198.51.100.0/24,")},
			want: denyAll, warn: `item 1 ""`},
		{name: "not a load balancer: nothing to filter, nothing to report", opts: []svcOpt{typeOpt(corev1.ServiceTypeNodePort), spec("nope")}, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Service(service(append([]svcOpt{lb}, tt.opts...)...), nil, testNode(), testConfig())
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			var got strings.Builder
			for _, e := range res.SetEntries {
				if strings.Contains(e.Set(), "LB-FW") || strings.Contains(e.Set(), "LB-SOURCE-CIDR") {
					got.WriteString(e.String() + "\n")
				}
			}
			if got.String() != tt.want {
				t.Errorf("members:\n%s\nwant:\n%s", got.String(), tt.want)
			}
			warn := errors.Join(res.Warnings...)
			switch {
			case tt.warn == "" && warn != nil:
				t.Errorf("unexpected warning: %v", warn)
			case tt.warn != "" && (warn == nil || !strings.Contains(warn.Error(), tt.warn)):
				t.Errorf("warning %v, want one containing %s", warn, tt.warn)
			case tt.warn != "" && !strings.Contains(warn.Error(), "default/web"):
				t.Errorf("warning %v does not name the Service", warn)
			}
			if len(res.Services) == 0 {
				t.Error("the Service was not translated")
			}
		})
	}
}
