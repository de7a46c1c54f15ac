package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cbconfig "k8s.io/component-base/config/v1alpha1"
	logsapi "k8s.io/component-base/logs/api/v1"
	kpv1 "k8s.io/kube-proxy/config/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// DefaultKubeProxy is the file kube-proxy would write with no flags but
// --proxy-mode=ipvs: every default filled in.
func DefaultKubeProxy() KubeProxyConfiguration {
	var kp KubeProxyConfiguration
	kp.APIVersion, kp.Kind, kp.Mode = KubeProxyAPIVersion, KubeProxyKind, ProxyModeIPVS
	kp.setDefaults()
	// kube-proxy's --ipvs-min-sync-period defaults to 1s, a file's
	// minSyncPeriod to 0 (setDefaults leaves it): a written default file
	// carries the flag's.
	kp.IPVS.MinSyncPeriod.Duration = time.Second
	return kp
}

// setDefaults fills zero fields as kube-proxy's SetDefaults_KubeProxyConfiguration
// and platformApplyDefaults do (pkg/proxy/apis/config/v1alpha1/defaults.go,
// cmd/kube-proxy/app/server_linux.go).
func (kp *KubeProxyConfiguration) setDefaults() {
	if kp.BindAddress == "" {
		kp.BindAddress = "0.0.0.0"
	}
	healthz, metrics := "[::]", "[::1]"
	if a, err := netip.ParseAddr(kp.BindAddress); err == nil && a.Unmap().Is4() {
		healthz, metrics = "0.0.0.0", "127.0.0.1"
	}
	kp.HealthzBindAddress = withPort(kp.HealthzBindAddress, healthz, 10256)
	kp.MetricsBindAddress = withPort(kp.MetricsBindAddress, metrics, 10249)
	setPtr(&kp.OOMScoreAdj, -999)
	setDuration(&kp.IPTables.SyncPeriod, 30*time.Second)
	setDuration(&kp.IPTables.MinSyncPeriod, time.Second)
	if kp.IPTables.LocalhostNodePorts == nil {
		t := true
		kp.IPTables.LocalhostNodePorts = &t
	}
	setDuration(&kp.IPVS.SyncPeriod, 30*time.Second)
	setDuration(&kp.NFTables.SyncPeriod, 30*time.Second)
	setDuration(&kp.NFTables.MinSyncPeriod, time.Second)
	setPtr(&kp.Conntrack.MaxPerCore, 32*1024)
	setPtr(&kp.Conntrack.Min, 128*1024)
	setPtr(&kp.IPTables.MasqueradeBit, DefaultMasqueradeBit)
	setPtr(&kp.NFTables.MasqueradeBit, DefaultMasqueradeBit)
	if kp.Conntrack.TCPEstablishedTimeout == nil {
		kp.Conntrack.TCPEstablishedTimeout = &metav1.Duration{Duration: 24 * time.Hour}
	}
	if kp.Conntrack.TCPCloseWaitTimeout == nil {
		kp.Conntrack.TCPCloseWaitTimeout = &metav1.Duration{Duration: time.Hour}
	}
	setDuration(&kp.ConfigSyncPeriod, 15*time.Minute)
	if kp.ClientConnection.ContentType == "" {
		kp.ClientConnection.ContentType = ContentTypeProtobuf
	}
	if kp.ClientConnection.QPS == 0 {
		kp.ClientConnection.QPS = 5
	}
	if kp.ClientConnection.Burst == 0 {
		kp.ClientConnection.Burst = 10
	}
	if kp.FeatureGates == nil {
		kp.FeatureGates = map[string]bool{}
	}
	logsapi.SetRecommendedLoggingConfiguration(&kp.Logging)
	if kp.DetectLocalMode == "" {
		kp.DetectLocalMode = kpv1.LocalMode(DetectClusterCIDR)
	}
}

// withPort is kube-proxy's default for a bind address: the default host
// when empty, the default port appended when it has none.
func withPort(addr, defaultHost string, port int) string {
	if addr == "" {
		return fmt.Sprintf("%s:%d", defaultHost, port)
	}
	if _, err := netip.ParseAddrPort(addr); err != nil {
		if a, err := netip.ParseAddr(addr); err == nil {
			return netip.AddrPortFrom(a, uint16(port)).String()
		}
	}
	return addr
}

func setPtr(p **int32, v int32) {
	if *p == nil {
		*p = &v
	}
}

func setDuration(d *metav1.Duration, v time.Duration) {
	if d.Duration == 0 {
		d.Duration = v
	}
}

// ApplyTo sets every field of c that the file has a meaning for, and
// returns the paths of the fields that mean nothing to kube-ipvs but were
// set to other than kube-proxy's default (iptables-, nftables- and
// winkernel-only settings, feature gates, ...): the caller warns once.
func (kp KubeProxyConfiguration) ApplyTo(c *Config) (ignored []string, err error) {
	var errs []error
	field := func(path string, e error) {
		if e != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, e))
		}
	}
	c.ProxyMode = string(kp.Mode)
	c.Kubeconfig = kp.ClientConnection.Kubeconfig
	c.QPS, c.Burst = kp.ClientConnection.QPS, kp.ClientConnection.Burst
	c.ContentType, c.AcceptContentTypes = kp.ClientConnection.ContentType, kp.ClientConnection.AcceptContentTypes
	// Compression, HTTP2 and Master are not in kube-proxy's file: the flags'.
	c.HostnameOverride = kp.HostnameOverride
	c.HealthzBindAddress, c.MetricsBindAddress = kp.HealthzBindAddress, kp.MetricsBindAddress
	c.BindAddressHardFail = kp.BindAddressHardFail
	if kp.IPVS.Scheduler != "" {
		c.Scheduler = model.Scheduler(kp.IPVS.Scheduler)
	}
	c.SyncPeriod, c.MinSyncPeriod = kp.IPVS.SyncPeriod.Duration, kp.IPVS.MinSyncPeriod.Duration
	c.ExcludeCIDRs, err = ParsePrefixes(kp.IPVS.ExcludeCIDRs)
	field("ipvs.excludeCIDRs", err)
	c.StrictARP = kp.IPVS.StrictARP
	c.Timeouts = dataplane.Timeouts{TCP: kp.IPVS.TCPTimeout.Duration, TCPFin: kp.IPVS.TCPFinTimeout.Duration, UDP: kp.IPVS.UDPTimeout.Duration}
	c.ClusterCIDRs, err = ParsePrefixes(strings.Split(kp.ClusterCIDR, ","))
	field("clusterCIDR", err)
	c.NodePortAddresses, err = NodePortAddresses(kp.NodePortAddresses)
	field("nodePortAddresses", err)
	c.MasqueradeAll, c.MasqueradeBit = kp.IPTables.MasqueradeAll, *kp.IPTables.MasqueradeBit
	c.DetectLocalMode = DetectLocalMode(kp.DetectLocalMode)
	c.BridgeInterface, c.InterfaceNamePrefix = kp.DetectLocal.BridgeInterface, kp.DetectLocal.InterfaceNamePrefix
	c.Conntrack = dataplane.ConntrackTuning{
		MaxPerCore: int(*kp.Conntrack.MaxPerCore), Min: int(*kp.Conntrack.Min),
		TCPEstablished: kp.Conntrack.TCPEstablishedTimeout.Duration,
		TCPCloseWait:   kp.Conntrack.TCPCloseWaitTimeout.Duration,
		TCPBeLiberal:   kp.Conntrack.TCPBeLiberal,
		UDP:            kp.Conntrack.UDPTimeout.Duration, UDPStream: kp.Conntrack.UDPStreamTimeout.Duration,
	}
	c.LogFormat, err = LogFormatOf(kp.Logging.Format)
	field("logging.format", err)
	c.LogLevel = LogLevelOfVerbosity(uint32(kp.Logging.Verbosity))
	return kp.ignoredFields(), errors.Join(errs...)
}

// LogLevelOfVerbosity maps klog's -v (logging.verbosity) onto --log-level.
// A line logged at klog's V(n) shows when n <= v, as in kube-proxy: 0 is
// "info" (no V line), 4 is "debug" (kube-ipvs logs its most detailed lines
// at V(4), where kube-proxy logs each sync's summary and each change), any
// other verbosity is its number.
func LogLevelOfVerbosity(v uint32) string {
	switch v {
	case 0:
		return "info"
	case 4:
		return "debug"
	}
	return strconv.FormatUint(uint64(v), 10)
}

// VerbosityOfLogLevel is the klog verbosity a --log-level shows: "info" 0,
// "debug" 4, a number itself; "warn" and "error", which show no info
// line, 0 (klog's least). ok is false for anything else.
func VerbosityOfLogLevel(level string) (v uint32, ok bool) {
	switch level {
	case "error", "warn", "info":
		return 0, true
	case "debug":
		return 4, true
	}
	n, err := strconv.ParseUint(level, 10, 8)
	if err != nil || n > maxVerbosity || strconv.FormatUint(n, 10) != level {
		return 0, false
	}
	return uint32(n), true
}

// maxVerbosity is the highest klog verbosity: zap's levels are int8, and a
// V(n) line is logged at zap level -n.
const maxVerbosity = 127

// LogFormatOf maps kube-proxy's logging formats onto the agent's.
func LogFormatOf(f string) (string, error) {
	switch f {
	case "text", "console":
		return "console", nil
	case "json":
		return "json", nil
	}
	return "", fmt.Errorf("want text or json, got %q", f)
}

// ignoredFields names the fields set to other than kube-proxy's default
// that kube-ipvs has no use for.
func (kp KubeProxyConfiguration) ignoredFields() []string {
	def := KubeProxyConfiguration{}
	def.setDefaults()
	var out []string
	for _, f := range []struct {
		path      string
		got, want any
	}{
		{"featureGates", len(kp.FeatureGates) > 0, false},
		{"enableProfiling", kp.EnableProfiling, def.EnableProfiling},
		{"showHiddenMetricsForVersion", kp.ShowHiddenMetricsForVersion, def.ShowHiddenMetricsForVersion},
		{"oomScoreAdj", kp.OOMScoreAdj, def.OOMScoreAdj},
		{"configSyncPeriod", kp.ConfigSyncPeriod, def.ConfigSyncPeriod},
		{"portRange", kp.PortRange, def.PortRange},
		{"iptables.localhostNodePorts", kp.IPTables.LocalhostNodePorts, def.IPTables.LocalhostNodePorts},
		{"iptables.syncPeriod", kp.IPTables.SyncPeriod, def.IPTables.SyncPeriod},
		{"iptables.minSyncPeriod", kp.IPTables.MinSyncPeriod, def.IPTables.MinSyncPeriod},
		{"nftables", kp.NFTables, def.NFTables},
		{"winkernel", kp.Winkernel, def.Winkernel},
		{"windowsRunAsService", kp.WindowsRunAsService, def.WindowsRunAsService},
		{"logging.flushFrequency", kp.Logging.FlushFrequency.Duration, def.Logging.FlushFrequency.Duration},
		{"logging.vmodule", len(kp.Logging.VModule) > 0, false},
		{"logging.options", kp.Logging.Options, def.Logging.Options},
	} {
		if !reflect.DeepEqual(f.got, f.want) {
			out = append(out, f.path)
		}
	}
	return out
}

// FromConfig is the file that means c: base (the file read, or
// DefaultKubeProxy) with every field kube-ipvs honours set from c. What
// --write-config-to writes.
func FromConfig(c Config, base KubeProxyConfiguration) KubeProxyConfiguration {
	kp := base
	kp.Mode = ProxyModeIPVS
	// kube-proxy keeps one sync period, written under the mode's section
	// only: the others read as zero.
	kp.IPTables.SyncPeriod, kp.IPTables.MinSyncPeriod = metav1.Duration{}, metav1.Duration{}
	kp.NFTables.SyncPeriod, kp.NFTables.MinSyncPeriod = metav1.Duration{}, metav1.Duration{}
	kp.ClientConnection = cbconfig.ClientConnectionConfiguration{
		Kubeconfig: c.Kubeconfig, QPS: c.QPS, Burst: c.Burst,
		ContentType: c.ContentType, AcceptContentTypes: c.AcceptContentTypes,
	}
	kp.HostnameOverride = c.HostnameOverride
	kp.HealthzBindAddress, kp.MetricsBindAddress = c.HealthzBindAddress, c.MetricsBindAddress
	kp.BindAddressHardFail = c.BindAddressHardFail
	kp.IPVS.Scheduler = string(c.Scheduler)
	kp.IPVS.SyncPeriod, kp.IPVS.MinSyncPeriod = metav1.Duration{Duration: c.SyncPeriod}, metav1.Duration{Duration: c.MinSyncPeriod}
	kp.IPVS.ExcludeCIDRs = prefixStrings(c.ExcludeCIDRs)
	kp.IPVS.StrictARP = c.StrictARP
	kp.IPVS.TCPTimeout, kp.IPVS.TCPFinTimeout, kp.IPVS.UDPTimeout = metav1.Duration{Duration: c.Timeouts.TCP}, metav1.Duration{Duration: c.Timeouts.TCPFin}, metav1.Duration{Duration: c.Timeouts.UDP}
	kp.ClusterCIDR = strings.Join(prefixStrings(c.ClusterCIDRs), ",")
	kp.NodePortAddresses = c.NodePortAddresses
	bit := c.MasqueradeBit
	kp.IPTables.MasqueradeAll, kp.IPTables.MasqueradeBit = c.MasqueradeAll, &bit
	kp.DetectLocalMode = kpv1.LocalMode(c.DetectLocalMode)
	kp.DetectLocal = kpv1.DetectLocalConfiguration{BridgeInterface: c.BridgeInterface, InterfaceNamePrefix: c.InterfaceNamePrefix}
	maxPerCore, ctMin := int32(c.Conntrack.MaxPerCore), int32(c.Conntrack.Min)
	kp.Conntrack = kpv1.KubeProxyConntrackConfiguration{
		MaxPerCore: &maxPerCore, Min: &ctMin,
		TCPEstablishedTimeout: &metav1.Duration{Duration: c.Conntrack.TCPEstablished},
		TCPCloseWaitTimeout:   &metav1.Duration{Duration: c.Conntrack.TCPCloseWait},
		TCPBeLiberal:          c.Conntrack.TCPBeLiberal,
		UDPTimeout:            metav1.Duration{Duration: c.Conntrack.UDP},
		UDPStreamTimeout:      metav1.Duration{Duration: c.Conntrack.UDPStream},
	}
	kp.Logging.Format = map[string]string{"console": "text", "json": "json"}[c.LogFormat]
	kp.Logging.FlushFrequency.SerializeAsString = true // as kube-proxy writes it
	v, _ := VerbosityOfLogLevel(c.LogLevel)
	kp.Logging.Verbosity = logsapi.VerbosityLevel(v)
	return kp
}

// EncodeKubeProxy writes kp as YAML, keys sorted, as kube-proxy does.
func EncodeKubeProxy(kp KubeProxyConfiguration) ([]byte, error) {
	j, err := json.Marshal(kp.KubeProxyConfiguration)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", KubeProxyKind, err)
	}
	return yaml.JSONToYAML(j)
}

// ParsePrefixes parses CIDRs, skipping empty entries; the error names each
// entry that is not one.
func ParsePrefixes(in []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	var errs []error
	for _, f := range in {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("%q is not a CIDR", f))
			continue
		}
		out = append(out, p.Masked())
	}
	return out, errors.Join(errs...)
}

func prefixStrings(ps []netip.Prefix) []string {
	if len(ps) == 0 {
		return nil
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}
