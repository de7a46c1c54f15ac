package translate

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// hugeAnnotation is a value as large as the API server lets all of an
// object's annotations be (256 KiB), made of many short list items, so that
// an error per item would be megabytes.
func hugeAnnotation() string { return strings.Repeat("x,", 128*1024) }

// maxErrorBytes bounds the error of a Service with hostile annotations:
// the reasons shown are capped and each quoted value is cut.
const maxErrorBytes = 2048

func TestHostileAnnotationsGiveBoundedErrors(t *testing.T) {
	huge := hugeAnnotation()
	for _, tc := range []struct {
		name, key, value, want string
	}{
		{"scheduler flags, many items", AnnotationSchedulerFlags, huge, "unknown flag"},
		{"scheduler flags, one long item", AnnotationSchedulerFlags, strings.Repeat("y", 256*1024), "unknown flag"},
		{"scheduler", AnnotationScheduler, strings.Repeat("z", 256*1024), "unknown scheduler"},
		{"drain timeout", AnnotationDrainTimeout, strings.Repeat("9", 256*1024), AnnotationDrainTimeout},
		{"source ranges", annotationSourceRanges, strings.Repeat("w", 256*1024), "does not parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := service(annotationOpt(tc.key, tc.value), typeOpt("LoadBalancer"))
			res := Service(svc, nil, testNode(), testConfig())
			err := res.Err
			if err == nil && len(res.Warnings) == 1 {
				err = res.Warnings[0]
			}
			if err == nil {
				t.Fatalf("no error (warnings %v)", res.Warnings)
			}
			msg := err.Error()
			t.Logf("%d bytes", len(msg))
			if len(msg) > maxErrorBytes {
				t.Errorf("error is %d bytes, want at most %d: %.300s...", len(msg), maxErrorBytes, msg)
			}
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q does not say %q", msg, tc.want)
			}
		})
	}
}

// A translation of a Service with a 256 KiB scheduler-flags annotation
// allocates a bounded number of values, not one error per list item.
func TestHostileSchedulerFlagsAllocations(t *testing.T) {
	svc := service(annotationOpt(AnnotationSchedulerFlags, hugeAnnotation()))
	node, cfg := testNode(), testConfig()
	allocs := testing.AllocsPerRun(3, func() { _ = Service(svc, nil, node, cfg) })
	if allocs > 200 {
		t.Errorf("a translation allocates %.0f times, want at most 200", allocs)
	}
}

// BenchmarkHostileSchedulerFlags translates a Service whose scheduler-flags
// annotation is 256 KiB of unknown flags.
func BenchmarkHostileSchedulerFlags(b *testing.B) {
	svc := service(annotationOpt(AnnotationSchedulerFlags, hugeAnnotation()))
	node, cfg := testNode(), testConfig()
	b.ReportAllocs()
	for b.Loop() {
		if r := Service(svc, nil, node, cfg); r.Err == nil {
			b.Fatal("no error")
		}
	}
}

// A Service listing thousands of external IPs that cannot be served (not
// addresses, loopback, outside --external-ip-cidrs) gets one warning per
// kind of problem, naming the first few and counting the rest.
func TestHostileAddressListsGiveBoundedWarnings(t *testing.T) {
	many := func(format string) []string {
		out := make([]string, 2000)
		for i := range out {
			out[i] = fmt.Sprintf(format, i/250, i%250)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		ips  []string
		want string
	}{
		{"outside --external-ip-cidrs", many("198.51.%d.%d"), "is outside this node's --external-ip-cidrs"},
		{"loopback", many("127.0.%d.%d"), "is a loopback address"},
		{"not addresses", many("%d.x.%d"), "is not an IP address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.ExternalIPCIDRs = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
			res := Service(service(externalIPsOpt(tc.ips...)), nil, testNode(), cfg)
			if len(res.Warnings) != 1 {
				t.Fatalf("%d warnings, want 1", len(res.Warnings))
			}
			msg := res.Warnings[0].Error()
			if len(msg) > maxErrorBytes || !strings.Contains(msg, tc.want) || !strings.Contains(msg, "and 1995 more") {
				t.Errorf("warning of %d bytes %.400q, want at most %d naming %q and counting 1995 more", len(msg), msg, maxErrorBytes, tc.want)
			}
		})
	}
}
