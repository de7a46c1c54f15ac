package metrics

import (
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Build-info metric names.
const (
	KubernetesBuildInfo = "kubernetes_build_info"
	BuildInfo           = "kube_ipvs_build_info"
)

// Build describes the running binary.
type Build struct {
	Version   string // the agent's version (git describe), "dev" when unknown
	Commit    string // the VCS revision the binary was built from
	TreeState string // "clean" or "dirty"; "" when unknown
	Date      string // the commit's time (RFC 3339); "" when unknown
	GoVersion string
	Compiler  string
	Platform  string // GOOS/GOARCH
}

// BuildOf describes this binary: version as the build stamped it, the rest
// from what the Go toolchain recorded in it.
func BuildOf(version string) Build {
	b := Build{Version: version, GoVersion: runtime.Version(), Compiler: runtime.Compiler,
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.time":
			b.Date = s.Value
		case "vcs.modified":
			b.TreeState = map[string]string{"true": "dirty", "false": "clean"}[s.Value]
		}
	}
	return b
}

// semver picks major and minor out of a version like v1.2.3-4-gabc.
var semver = regexp.MustCompile(`^v?(\d+)\.(\d+)`)

// RegisterBuildInfo registers two constant-1 gauges labelled with b:
// kubernetes_build_info, with the labels every Kubernetes component
// (kube-proxy among them) serves it with, so fleet queries that join on it
// find the agent; and kube_ipvs_build_info, the agent's own.
func RegisterBuildInfo(reg prometheus.Registerer, b Build) error {
	major, minor := "", ""
	if m := semver.FindStringSubmatch(b.Version); m != nil {
		major, minor = m[1], m[2]
	}
	k8s := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: KubernetesBuildInfo,
		Help: "[BETA] A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running."},
		[]string{"major", "minor", "git_version", "git_commit", "git_tree_state", "build_date", "go_version", "compiler", "platform"})
	k8s.WithLabelValues(major, minor, b.Version, b.Commit, b.TreeState, b.Date, b.GoVersion, b.Compiler, b.Platform).Set(1)
	own := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: BuildInfo,
		Help: "A metric with a constant '1' value labeled by the kube-ipvs version, the commit it was built from and the Go version."},
		[]string{"version", "git_commit", "go_version"})
	own.WithLabelValues(b.Version, b.Commit, b.GoVersion).Set(1)
	if err := errors.Join(reg.Register(k8s), reg.Register(own)); err != nil {
		return fmt.Errorf("register build info: %w", err)
	}
	return nil
}
