package reconciler

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A Service with more frontends than --max-frontends-per-service gets the
// first ones (its ClusterIP first), and its owner one TooManyFrontends
// Event however often it is re-translated; another Service gets all of
// its frontends.
func TestFrontendCapPerService(t *testing.T) {
	r := newRigWith(t, func(o *Options) { o.Translate.MaxFrontends = 3 })
	r.webAndDNS()
	big := service("big", "10.96.0.20", corev1.ProtocolTCP, 80)
	big.Spec.ExternalIPs = []string{"198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4"}
	big.Generation = 1
	r.store.SetService(big)
	r.store.SetSlice(slice("big", corev1.ProtocolTCP, 8080, ready("10.244.1.9")))
	r.sync(false)
	for range 5 {
		r.store.SetService(big)
		r.sync(false)
	}
	r.expectDump(`-A -t 10.96.0.10:80 -s rr
  -a -t 10.96.0.10:80 -r 10.244.1.2:8080 -m -w 1
  -a -t 10.96.0.10:80 -r 10.244.2.2:8080 -m -w 1
-A -t 10.96.0.20:80 -s rr
  -a -t 10.96.0.20:80 -r 10.244.1.9:8080 -m -w 1
-A -u 10.96.0.53:53 -s rr
  -a -u 10.96.0.53:53 -r 10.244.1.3:53 -m -w 1
-A -t 198.51.100.1:80 -s rr
  -a -t 198.51.100.1:80 -r 10.244.1.9:8080 -m -w 1
-A -t 198.51.100.2:80 -s rr
  -a -t 198.51.100.2:80 -r 10.244.1.9:8080 -m -w 1
addr 10.96.0.10
addr 10.96.0.20
addr 10.96.0.53
addr 198.51.100.1
addr 198.51.100.2
`)
	if len(r.warn.warnings) != 1 || !strings.HasPrefix(r.warn.warnings[0], "default/big TooManyFrontends: ") ||
		!strings.Contains(r.warn.warnings[0], "it asks for 5 frontends on this node, at most 3 are made") {
		t.Fatalf("warnings %q, want one TooManyFrontends on default/big", r.warn.warnings)
	}
}
