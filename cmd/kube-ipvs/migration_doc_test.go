package main

import (
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
)

// docs/migration.md waits for a pod only once the DaemonSet has made it:
// `kubectl wait` on a selector that matches no pod yet exits at once
// (kubernetes#65868). Each `kubectl wait pod` follows a loop that waits for
// a pod with the same selectors; and every manifests/ path it names exists.
func TestMigrationDocWaitsForPodsThatExist(t *testing.T) {
	data, err := os.ReadFile("../../docs/migration.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	selectors := regexp.MustCompile(`(-l \S+|--field-selector \S+)`)
	waits := 0
	for i, l := range lines {
		if !strings.Contains(l, "kubectl") || !regexp.MustCompile(`\bwait pods?\b`).MatchString(l) {
			continue
		}
		waits++
		want := strings.Join(selectors.FindAllString(l, -1), " ")
		if i == 0 || !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "until kubectl") ||
			strings.Join(selectors.FindAllString(lines[i-1], -1), " ") != want {
			t.Errorf("line %d: %q waits for pods (%s) with no loop before it waiting for them to exist", i+1, strings.TrimSpace(l), want)
		}
	}
	if waits == 0 {
		t.Error("no kubectl wait pod found: the check reads nothing")
	}
	for _, p := range regexp.MustCompile("manifests/[A-Za-z0-9_.+/-]*[A-Za-z0-9_+-]").FindAllString(string(data), -1) {
		if _, err := os.Stat(filepath.Join("../..", p)); err != nil {
			t.Errorf("docs/migration.md names %s: %v", p, err)
		}
	}
}

// The metrics Service of manifests/monitoring reaches the agent on the
// port of its default metricsBindAddress (kube-proxy's).
func TestMetricsServiceTargetsTheMetricsPort(t *testing.T) {
	data, err := os.ReadFile("../../manifests/monitoring/service/metrics-service.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var svc corev1.Service
	if err := yaml.UnmarshalStrict(data, &svc); err != nil {
		t.Fatal(err)
	}
	want := netip.MustParseAddrPort(config.DefaultMetricsBindAddress).Port()
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.IntValue() != int(want) {
		t.Errorf("Service ports %+v, want targetPort %d", svc.Spec.Ports, want)
	}
}
