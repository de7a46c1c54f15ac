package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// The configuration file kube-proxy reads with --config, as kubeadm writes
// it into the kube-proxy ConfigMap's config.conf.
const (
	KubeProxyAPIVersion = "kubeproxy.config.k8s.io/v1alpha1"
	KubeProxyKind       = "KubeProxyConfiguration"
)

// KubeProxyConfiguration mirrors k8s.io/kube-proxy/config/v1alpha1's type
// field for field (JSON names and shapes), so that strict decoding accepts
// exactly what kube-proxy accepts. It is mirrored, not imported: that
// module's types pull component-base's logging, feature-gate and metrics
// packages (with a global metrics registry, OpenTelemetry and cobra) into
// the agent for a dozen fields.
type KubeProxyConfiguration struct {
	APIVersion   string          `json:"apiVersion"`
	Kind         string          `json:"kind"`
	FeatureGates map[string]bool `json:"featureGates,omitempty"`

	ClientConnection KPClientConnection `json:"clientConnection"`
	Logging          KPLogging          `json:"logging,omitempty"`

	HostnameOverride            string `json:"hostnameOverride"`
	BindAddress                 string `json:"bindAddress"`
	HealthzBindAddress          string `json:"healthzBindAddress"`
	MetricsBindAddress          string `json:"metricsBindAddress"`
	BindAddressHardFail         bool   `json:"bindAddressHardFail"`
	EnableProfiling             bool   `json:"enableProfiling"`
	ShowHiddenMetricsForVersion string `json:"showHiddenMetricsForVersion"`

	Mode      string      `json:"mode"`
	IPTables  KPIPTables  `json:"iptables"`
	IPVS      KPIPVS      `json:"ipvs"`
	NFTables  KPNFTables  `json:"nftables"`
	Winkernel KPWinkernel `json:"winkernel"`

	DetectLocalMode string        `json:"detectLocalMode"`
	DetectLocal     KPDetectLocal `json:"detectLocal"`
	ClusterCIDR     string        `json:"clusterCIDR"`

	NodePortAddresses []string    `json:"nodePortAddresses"`
	OOMScoreAdj       *int32      `json:"oomScoreAdj"`
	Conntrack         KPConntrack `json:"conntrack"`
	ConfigSyncPeriod  Duration    `json:"configSyncPeriod"`
	PortRange         string      `json:"portRange"`

	WindowsRunAsService bool `json:"windowsRunAsService,omitempty"`
}

// KPClientConnection mirrors component-base's ClientConnectionConfiguration.
type KPClientConnection struct {
	Kubeconfig         string  `json:"kubeconfig"`
	AcceptContentTypes string  `json:"acceptContentTypes"`
	ContentType        string  `json:"contentType"`
	QPS                float32 `json:"qps"`
	Burst              int32   `json:"burst"`
}

// KPLogging mirrors component-base's LoggingConfiguration.
type KPLogging struct {
	Format         string          `json:"format,omitempty"`
	FlushFrequency FlushFrequency  `json:"flushFrequency"`
	Verbosity      uint32          `json:"verbosity"`
	VModule        []KPVModuleItem `json:"vmodule,omitempty"`
	Options        KPLogOptions    `json:"options,omitempty"`
}

// KPVModuleItem is one per-file verbosity of KPLogging.
type KPVModuleItem struct {
	FilePattern string `json:"filePattern"`
	Verbosity   uint32 `json:"verbosity"`
}

// KPLogOptions mirrors component-base's FormatOptions.
type KPLogOptions struct {
	Text KPLogOutput `json:"text,omitempty"`
	JSON KPLogOutput `json:"json,omitempty"`
}

// KPLogOutput mirrors component-base's OutputRoutingOptions.
type KPLogOutput struct {
	SplitStream    bool               `json:"splitStream,omitempty"`
	InfoBufferSize *resource.Quantity `json:"infoBufferSize,omitempty"`
}

// FlushFrequency is a duration written either as a string ("5s") or as
// nanoseconds, as component-base accepts both.
type FlushFrequency struct{ time.Duration }

// UnmarshalJSON accepts "5s" or 5000000000.
func (f *FlushFrequency) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		d, err := ParseDuration(s)
		if err != nil {
			return fmt.Errorf("logging.flushFrequency: %w", err)
		}
		f.Duration = d
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("logging.flushFrequency: want a duration such as \"5s\" or nanoseconds, got %s", b)
	}
	f.Duration = time.Duration(n)
	return nil
}

// Duration is a duration in its string form ("30s"), as metav1.Duration
// writes it. A malformed one does not fail decoding: it is kept, so that
// DecodeKubeProxy can name its path (json errors from an UnmarshalJSON
// carry none).
type Duration struct {
	time.Duration
	invalid error
}

// UnmarshalJSON reads "30s"; anything else is recorded as invalid.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		d.invalid = fmt.Errorf("want a duration string such as \"30s\", got %s", b)
		return nil
	}
	d.Duration, d.invalid = ParseDuration(s)
	return nil
}

// MarshalJSON writes "30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.Duration.String()) }

// ParseDuration is time.ParseDuration with errors that say what to write:
// a bare number is missing its unit.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	if _, numErr := strconv.ParseFloat(s, 64); numErr == nil {
		return 0, fmt.Errorf("a duration needs a unit, e.g. %q", s+"s")
	}
	return 0, fmt.Errorf("want a duration such as 30s, 5m or 1h30m, got %q", s)
}

// invalidDurations names every Duration in v (a struct) that did not
// parse, by its JSON path.
func invalidDurations(v reflect.Value, path string) []error {
	var errs []error
	for i := 0; i < v.NumField(); i++ {
		f, sf := v.Field(i), v.Type().Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if !sf.IsExported() || name == "" || name == "-" {
			continue
		}
		if path != "" {
			name = path + "." + name
		}
		if f.Kind() == reflect.Pointer {
			if f.IsNil() {
				continue
			}
			f = f.Elem()
		}
		switch d := f.Addr().Interface().(type) {
		case *Duration:
			if d.invalid != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, d.invalid))
			}
		default:
			if f.Kind() == reflect.Struct {
				errs = append(errs, invalidDurations(f, name)...)
			}
		}
	}
	return errs
}

// MarshalJSON writes the string form, as kube-proxy --write-config-to does.
func (f FlushFrequency) MarshalJSON() ([]byte, error) {
	return json.Marshal(f.String())
}

// KPIPTables mirrors KubeProxyIPTablesConfiguration; its masquerade fields
// serve the IPVS mode too.
type KPIPTables struct {
	MasqueradeBit      *int32   `json:"masqueradeBit"`
	MasqueradeAll      bool     `json:"masqueradeAll"`
	LocalhostNodePorts *bool    `json:"localhostNodePorts"`
	SyncPeriod         Duration `json:"syncPeriod"`
	MinSyncPeriod      Duration `json:"minSyncPeriod"`
}

// KPIPVS mirrors KubeProxyIPVSConfiguration.
type KPIPVS struct {
	SyncPeriod    Duration `json:"syncPeriod"`
	MinSyncPeriod Duration `json:"minSyncPeriod"`
	Scheduler     string   `json:"scheduler"`
	ExcludeCIDRs  []string `json:"excludeCIDRs"`
	StrictARP     bool     `json:"strictARP"`
	TCPTimeout    Duration `json:"tcpTimeout"`
	TCPFinTimeout Duration `json:"tcpFinTimeout"`
	UDPTimeout    Duration `json:"udpTimeout"`
}

// KPNFTables mirrors KubeProxyNFTablesConfiguration.
type KPNFTables struct {
	MasqueradeBit *int32   `json:"masqueradeBit"`
	MasqueradeAll bool     `json:"masqueradeAll"`
	SyncPeriod    Duration `json:"syncPeriod"`
	MinSyncPeriod Duration `json:"minSyncPeriod"`
}

// KPWinkernel mirrors KubeProxyWinkernelConfiguration.
type KPWinkernel struct {
	NetworkName           string `json:"networkName"`
	SourceVip             string `json:"sourceVip"`
	EnableDSR             bool   `json:"enableDSR"`
	RootHnsEndpointName   string `json:"rootHnsEndpointName"`
	ForwardHealthCheckVip bool   `json:"forwardHealthCheckVip"`
}

// KPConntrack mirrors KubeProxyConntrackConfiguration.
type KPConntrack struct {
	MaxPerCore            *int32    `json:"maxPerCore"`
	Min                   *int32    `json:"min"`
	TCPEstablishedTimeout *Duration `json:"tcpEstablishedTimeout"`
	TCPCloseWaitTimeout   *Duration `json:"tcpCloseWaitTimeout"`
	TCPBeLiberal          bool      `json:"tcpBeLiberal"`
	UDPTimeout            Duration  `json:"udpTimeout"`
	UDPStreamTimeout      Duration  `json:"udpStreamTimeout"`
}

// KPDetectLocal mirrors DetectLocalConfiguration.
type KPDetectLocal struct {
	BridgeInterface     string `json:"bridgeInterface"`
	InterfaceNamePrefix string `json:"interfaceNamePrefix"`
}
