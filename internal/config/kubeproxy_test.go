package config

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// decodeApply is what the agent does with --config: defaults, then the file.
func decodeApply(data []byte) (Config, []string, error) {
	c := Default()
	kp, _, err := DecodeKubeProxy(data)
	if err != nil {
		return c, nil, err
	}
	ignored, err := kp.ApplyTo(&c)
	return c, ignored, err
}

// The files Kubernetes itself writes mean to kube-ipvs what they mean to
// kube-proxy's IPVS mode, field by field.
func TestKubeProxyFilesAsWritten(t *testing.T) {
	for _, tc := range []struct {
		file   string
		change func(*Config)
	}{
		{"kubeadm-v1.37.2-ipvs.conf", func(c *Config) {
			c.ProxyMode = "ipvs"
			c.Kubeconfig = "/var/lib/kube-proxy/kubeconfig.conf"
			c.ClusterCIDRs = prefixes("10.244.0.0/16")
			// kubeadm writes minSyncPeriod: 0s and kube-proxy does not
			// default it: every change syncs at once.
			c.MinSyncPeriod = 0
		}},
		{"kube-proxy-v1.37.2-ipvs-defaults.yaml", func(c *Config) { c.ProxyMode = "ipvs" }},
		{"kube-proxy-v1.37.2-ipvs-flags.yaml", func(c *Config) {
			c.ProxyMode = "ipvs"
			c.Kubeconfig = "/var/lib/kube-proxy/kubeconfig.conf"
			c.Client.QPS, c.Client.Burst = 50, 100
			c.HostnameOverride = "node-a"
			c.Scheduler = model.Scheduler("lc")
			c.StrictARP = true
			c.Timeouts.TCP, c.Timeouts.TCPFin, c.Timeouts.UDP = 900*time.Second, 120*time.Second, 300*time.Second
			c.SyncPeriod, c.MinSyncPeriod = time.Minute, 2*time.Second
			c.ExcludeCIDRs = prefixes("192.0.2.0/24", "2001:db8::/64")
			c.ClusterCIDRs = prefixes("10.244.0.0/16", "fd00:10:244::/56")
			c.NodePortAddresses = []string{"primary", "198.51.100.0/24"}
			c.MasqueradeAll = true
			c.MetricsBindAddress = "0.0.0.0:10249"
			c.BindAddressHardFail = true
			c.Conntrack.MaxPerCore, c.Conntrack.TCPBeLiberal = 0, true
			c.Conntrack.UDP, c.Conntrack.UDPStream = 30*time.Second, 2*time.Minute
			c.LogFormat, c.LogLevel = "json", "debug"
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got, ignored, err := decodeApply(readTestdata(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			want := Default()
			tc.change(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("config\n got %+v\nwant %+v", got, want)
			}
			if len(ignored) != 0 {
				t.Errorf("ignored %q, want none: the file sets nothing beyond kube-proxy's defaults there", ignored)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

const header = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"

// ipvsHeader starts a file for kube-proxy's IPVS mode, which kube-ipvs
// takes over.
const ipvsHeader = header + "mode: ipvs\n"

// What only kube-proxy's strict decoding refuses (an unknown field, a key
// in the wrong case, a repeated key) is read leniently, as kube-proxy's
// loadConfig reads it: the rest of the file applies, and each complaint
// comes back naming the key's path, for one warning.
func TestDecodeKubeProxyLenient(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		warn       []string
		check      func(KubeProxyConfiguration) error
	}{
		{"unknown nested key", header + "ipvs:\n  foo: 1\n  scheduler: lc\n", []string{`unknown field "ipvs.foo"`},
			func(kp KubeProxyConfiguration) error { return wantEq(kp.IPVS.Scheduler, "lc") }},
		{"unknown keys everywhere", header + "foo: 1\nlogging:\n  options:\n    json:\n      bar: 2\n", []string{`unknown field "foo"`, `unknown field "logging.options.json.bar"`}, nil},
		{"keys are case-sensitive", header + "conntrack:\n  MaxPerCore: 2\n", []string{`unknown field "conntrack.MaxPerCore"`},
			func(kp KubeProxyConfiguration) error { return wantEq(*kp.Conntrack.MaxPerCore, int32(32*1024)) }},
		{"repeated key: the last wins", header + "mode: iptables\nmode: ipvs\n", []string{`key "mode" already set`},
			func(kp KubeProxyConfiguration) error { return wantEq(string(kp.Mode), "ipvs") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kp, warnings, err := DecodeKubeProxy([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if len(warnings) != len(tc.warn) {
				t.Errorf("warnings %q, want %d", warnings, len(tc.warn))
			}
			for _, w := range tc.warn {
				if !slices.ContainsFunc(warnings, func(got string) bool { return strings.Contains(got, w) }) {
					t.Errorf("warnings %q lack %q", warnings, w)
				}
			}
			if tc.check != nil {
				if err := tc.check(kp); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// A field a newer kubeadm adds to the file kubeadm v1.37 writes changes
// nothing else: the node keeps its configuration and is told about it.
func TestKubeadmFileWithAFutureField(t *testing.T) {
	data := readTestdata(t, "kubeadm-v1.37.2-ipvs.conf")
	want, _, err := decodeApply(data)
	if err != nil {
		t.Fatal(err)
	}
	future := strings.Replace(string(data), "ipvs:\n", "ipvs:\n  futureKnob: 3\n", 1) + "futureSection:\n  enabled: true\n"
	kp, warnings, err := DecodeKubeProxy([]byte(future))
	if err != nil {
		t.Fatalf("a file with a field kube-proxy v1.37 does not know is refused: %v", err)
	}
	if want := []string{`unknown field "futureSection"`, `unknown field "ipvs.futureKnob"`}; !slices.Equal(warnings, want) {
		t.Errorf("warnings %q, want %q", warnings, want)
	}
	got := Default()
	if _, err := kp.ApplyTo(&got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("config\n got %+v\nwant %+v", got, want)
	}
}

// What kube-proxy refuses even leniently (a value of the wrong type, a
// malformed duration, another kind or version) is refused, naming the
// key's path.
func TestDecodeKubeProxyRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"wrong kind", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n", []string{`got apiVersion "kubeproxy.config.k8s.io/v1alpha1", kind "KubeletConfiguration"`}},
		{"wrong version", "apiVersion: kubeproxy.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n", []string{`want apiVersion kubeproxy.config.k8s.io/v1alpha1`}},
		{"duration without unit", header + "ipvs:\n  tcpTimeout: \"900\"\n", []string{`ipvs.tcpTimeout: a duration needs a unit, e.g. "900s"`}},
		{"duration as a number", header + "conntrack:\n  tcpCloseWaitTimeout: 3600\n", []string{`conntrack.tcpCloseWaitTimeout: want a duration string such as "30s", got 3600`}},
		{"bad duration", header + "ipvs:\n  syncPeriod: soon\n", []string{`ipvs.syncPeriod: want a duration such as 30s, 5m or 1h30m, got "soon"`}},
		{"bad duration beside an unknown field", header + "foo: 1\nipvs:\n  syncPeriod: soon\n", []string{`ipvs.syncPeriod: want a duration such as 30s`}},
		{"wrong type", header + "conntrack:\n  maxPerCore: many\n", []string{"conntrack.maxPerCore"}},
		{"wrong type of a section", header + "ipvs: lc\n", []string{"ipvs"}},
		{"bad flush frequency", header + "logging:\n  flushFrequency: often\n", []string{"logging.flushFrequency"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := DecodeKubeProxy([]byte(tc.yaml))
			if err == nil {
				t.Fatal("decoded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// detectLocalMode with its detectLocal setting and masqueradeBit are
// taken as kube-proxy takes them, and --write-config-to writes them back.
func TestKubeProxyDetectLocalAndMark(t *testing.T) {
	for _, tc := range []struct {
		yaml   string
		change func(*Config)
	}{
		{"detectLocalMode: NodeCIDR\n", func(c *Config) { c.DetectLocalMode = DetectNodeCIDR }},
		{"detectLocalMode: BridgeInterface\ndetectLocal:\n  bridgeInterface: cbr0\n", func(c *Config) {
			c.DetectLocalMode, c.BridgeInterface = DetectBridgeInterface, "cbr0"
		}},
		{"detectLocalMode: InterfaceNamePrefix\ndetectLocal:\n  interfaceNamePrefix: veth\niptables:\n  masqueradeBit: 3\n", func(c *Config) {
			c.DetectLocalMode, c.InterfaceNamePrefix, c.MasqueradeBit = DetectInterfaceNamePrefix, "veth", 3
		}},
	} {
		got, _, err := decodeApply([]byte(ipvsHeader + tc.yaml))
		if err == nil {
			err = got.Validate()
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		want, _, err := decodeApply([]byte(ipvsHeader))
		if err != nil {
			t.Fatal(err)
		}
		tc.change(&want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\n got %#v\nwant %#v", tc.yaml, got, want)
		}
		out, err := EncodeKubeProxy(FromConfig(got, DefaultKubeProxy()))
		if err != nil {
			t.Fatal(err)
		}
		again, _, err := decodeApply(out)
		got.ProxyMode = ProxyModeIPVS // written as what it means
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("%q written and read back: %v\n got %#v\nwant %#v", tc.yaml, err, again, got)
		}
	}
}

// Values that decode but kube-ipvs cannot take are refused by ApplyTo or
// Validate, naming the field.
func TestKubeProxyFileValuesRefused(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"iptables mode", "mode: iptables\n", `--proxy-mode (mode): kube-ipvs programs IPVS only, it cannot act as kube-proxy's "iptables" mode: set "ipvs", or run kube-proxy itself for "iptables"`},
		{"nftables mode", "mode: nftables\n", `cannot act as kube-proxy's "nftables" mode`},
		// kube-proxy runs an empty or absent mode as iptables: not IPVS.
		{"empty mode", "mode: \"\"\n", `--proxy-mode (mode): empty means kube-proxy's default, "iptables", and kube-ipvs takes over kube-proxy's IPVS mode only`},
		{"no mode", "clusterCIDR: 10.244.0.0/16\n", `empty means kube-proxy's default, "iptables"`},
		{"exclude cidrs", "ipvs:\n  excludeCIDRs: [192.0.2.0/24, nope]\n", `ipvs.excludeCIDRs: "nope" is not a CIDR`},
		{"cluster cidr", "clusterCIDR: 10.244.0.0/16,nope\n", `clusterCIDR: "nope" is not a CIDR`},
		{"nodeport localhost", "nodePortAddresses: [localhost]\n", "nodePortAddresses: \"localhost\": NodePorts on loopback exist only in kube-proxy's iptables and nftables modes"},
		{"logging format", "logging:\n  format: xml\n", `logging.format: want text or json, got "xml"`},
		{"masquerade bit", "iptables:\n  masqueradeBit: 32\n", "--iptables-masquerade-bit (iptables.masqueradeBit): must be within the range [0, 31], got 32"},
		{"scheduler", "ipvs:\n  scheduler: fastest\n", `--ipvs-scheduler (ipvs.scheduler): unknown scheduler "fastest"`},
		{"min sync period", "ipvs:\n  minSyncPeriod: 1m\n", "ipvs.minSyncPeriod): must be between 0 and the sync period (30s), got 1m0s"},
		{"detect local", "detectLocalMode: PodCIDR\n", `--detect-local-mode (detectLocalMode): want ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix, got "PodCIDR"`},
		{"bridge without name", "detectLocalMode: BridgeInterface\ndetectLocal:\n  interfaceNamePrefix: veth\n", "--pod-bridge-interface (detectLocal.bridgeInterface): the pods' interface name must not be empty"},
		{"healthz address", "healthzBindAddress: nowhere:1\n", `--healthz-bind-address (healthzBindAddress): want IP:PORT`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err := decodeApply([]byte(header + tc.yaml))
			if err == nil {
				err = c.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// kube-proxy's defaults apply to what the file leaves out or zero, as
// kube-proxy applies them: a bare IP gets its port, an IPv6 bindAddress
// moves the default listeners to IPv6, "all" is every address.
func TestKubeProxyFileDefaults(t *testing.T) {
	for _, tc := range []struct {
		yaml  string
		check func(Config) error
	}{
		{"healthzBindAddress: 10.0.0.1\nmetricsBindAddress: \"::1\"\n", func(c Config) error {
			return wantEq(c.HealthzBindAddress+" "+c.MetricsBindAddress, "10.0.0.1:10256 [::1]:10249")
		}},
		{"bindAddress: \"::\"\n", func(c Config) error {
			return wantEq(c.HealthzBindAddress+" "+c.MetricsBindAddress, "[::]:10256 [::1]:10249")
		}},
		{"nodePortAddresses: [primary, all]\n", func(c Config) error { return wantEq(fmt.Sprint(c.NodePortAddresses), "[]") }},
		{"conntrack:\n  maxPerCore: 0\n  min: null\n", func(c Config) error {
			return wantEq(fmt.Sprint(c.Conntrack.MaxPerCore, c.Conntrack.Min), "0 131072")
		}},
		{"logging:\n  verbosity: 3\n  flushFrequency: 5000000000\n", func(c Config) error { return wantEq(c.LogLevel, "3") }},
		{"clientConnection:\n  qps: 0\n  burst: 0\n  contentType: application/json\n", func(c Config) error {
			return wantEq(c.Client, Client{QPS: 5, Burst: 10, ContentType: "application/json", HTTP2: true, Compression: true})
		}},
	} {
		t.Run(tc.yaml, func(t *testing.T) {
			c, _, err := decodeApply([]byte(header + tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.check(c); err != nil {
				t.Error(err)
			}
		})
	}
}

func wantEq(got, want any) error {
	if !reflect.DeepEqual(got, want) {
		return fmt.Errorf("got %v, want %v", got, want)
	}
	return nil
}

// Fields with no meaning here are named, only when set to other than
// kube-proxy's default.
func TestKubeProxyFileIgnoredFields(t *testing.T) {
	yaml := header + `featureGates: {KubeProxyIPVS: true}
oomScoreAdj: -500
configSyncPeriod: 15m
iptables:
  localhostNodePorts: false
  syncPeriod: 30s
  masqueradeAll: true
nftables:
  syncPeriod: 10s
winkernel:
  enableDSR: true
logging:
  vmodule: [{filePattern: proxier.go, verbosity: 5}]
`
	c, ignored, err := decodeApply([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"featureGates", "oomScoreAdj", "iptables.localhostNodePorts", "nftables", "winkernel", "logging.vmodule"}
	if !slices.Equal(ignored, want) {
		t.Errorf("ignored %q, want %q", ignored, want)
	}
	if !c.MasqueradeAll {
		t.Error("iptables.masqueradeAll, which IPVS mode honours too, was not read")
	}
}

// --write-config-to writes a file that reads back as the same settings,
// and with no flags, the file kube-proxy itself writes for IPVS mode.
// klog's verbosity and --log-level map onto each other: every verbosity
// keeps its number, "info" and "debug" are 0 and 4, as kube-proxy's -v.
func TestVerbosityOfLogLevel(t *testing.T) {
	for v := uint32(0); v <= 127; v++ {
		if got, ok := VerbosityOfLogLevel(LogLevelOfVerbosity(v)); !ok || got != v {
			t.Errorf("verbosity %d read back as %d (%v) through %q", v, got, ok, LogLevelOfVerbosity(v))
		}
	}
	for level, want := range map[string]uint32{"info": 0, "debug": 4, "warn": 0, "error": 0, "2": 2} {
		if got, ok := VerbosityOfLogLevel(level); !ok || got != want {
			t.Errorf("%q: verbosity %d (%v), want %d", level, got, ok, want)
		}
	}
	for _, bad := range []string{"", "loud", "-1", "128", "02", "4.0"} {
		if _, ok := VerbosityOfLogLevel(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestFromConfigRoundTrip(t *testing.T) {
	custom, _, err := decodeApply(readTestdata(t, "kube-proxy-v1.37.2-ipvs-flags.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	verbose := Default()
	verbose.LogLevel = "3" // -v=3: logging.verbosity 3, read back as -v=3
	for name, c := range map[string]Config{"defaults": Default(), "custom": custom, "verbosity": verbose} {
		t.Run(name, func(t *testing.T) {
			c.ProxyMode = ProxyModeIPVS
			data, err := EncodeKubeProxy(FromConfig(c, DefaultKubeProxy()))
			if err != nil {
				t.Fatal(err)
			}
			back, ignored, err := decodeApply(data)
			if err != nil {
				t.Fatalf("%v\n%s", err, data)
			}
			if !reflect.DeepEqual(back, c) || len(ignored) > 0 {
				t.Errorf("read back\n got %+v\nwant %+v\nignored %q\n%s", back, c, ignored, data)
			}
		})
	}
	ours := FromConfig(Default(), DefaultKubeProxy())
	ours.IPVS.Scheduler = "" // kube-proxy leaves rr implicit
	data, err := EncodeKubeProxy(ours)
	if err != nil {
		t.Fatal(err)
	}
	if want := readTestdata(t, "kube-proxy-v1.37.2-ipvs-defaults.yaml"); string(data) != string(want) {
		t.Errorf("defaults written\n%s\nwant, as kube-proxy writes them:\n%s", data, want)
	}
}
