package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestNodePortAddressKeywords(t *testing.T) {
	for _, tc := range []struct {
		in      []string
		want    []string
		wantErr string
	}{
		{nil, nil, ""},
		{[]string{"primary"}, []string{"primary"}, ""},
		{[]string{"10.0.0.0/8", "primary"}, []string{"10.0.0.0/8", "primary"}, ""},
		{[]string{"primary", "all"}, nil, ""}, // all covers the rest: every address
		{[]string{"localhost"}, nil, "only in kube-proxy's iptables and nftables modes"},
		{[]string{"10.0.0.0/33"}, nil, `"10.0.0.0/33" is neither "primary" nor a CIDR (or "all")`},
	} {
		got, err := NodePortAddresses(tc.in)
		if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("NodePortAddresses(%q) error %v, want %q", tc.in, err, tc.wantErr)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("NodePortAddresses(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"scheduler", func(c *Config) { c.Scheduler = "fastest" }, `--ipvs-scheduler (ipvs.scheduler): unknown scheduler "fastest"`},
		{"both sources", func(c *Config) { c.Kubeconfig, c.ManifestsDir = "k", "m" }, "--manifests: cannot be combined with --kubeconfig or --master"},
		{"nodeport addresses", func(c *Config) { c.NodePortAddresses = []string{"primary", "nope"} }, `--nodeport-addresses (nodePortAddresses): "nope"`},
		{"sync period", func(c *Config) { c.SyncPeriod = 0 }, "--ipvs-sync-period (ipvs.syncPeriod): must be positive"},
		{"min sync period", func(c *Config) { c.MinSyncPeriod = time.Hour }, "--ipvs-min-sync-period (ipvs.minSyncPeriod): must be between"},
		{"drain timeout", func(c *Config) { c.DrainTimeout = -time.Second }, "--drain-timeout: must not be negative"},
		{"no frontends", func(c *Config) { c.MaxFrontends = 0 }, "--max-frontends-per-service: must be between 1 and 1048576 (what the shared sets hold), got 0"},
		{"more frontends than the sets hold", func(c *Config) { c.MaxFrontends = 1<<20 + 1 }, "--max-frontends-per-service: must be between 1 and 1048576 (what the shared sets hold), got 1048577"},
		{"tcp timeout", func(c *Config) { c.Timeouts.TCP = 1500 * time.Millisecond }, "--ipvs-tcp-timeout (ipvs.tcpTimeout): must be a whole number of seconds"},
		{"families", func(c *Config) { c.IPv4, c.IPv6 = false, false }, "at least one address family"},
		{"log level", func(c *Config) { c.LogLevel = "loud" }, `--log-level: want error, warn, info, debug or a klog verbosity (0 to 127), got "loud"`},
		{"cluster cidr", func(c *Config) {
			c.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.245.0.0/16")}
		}, "--cluster-cidr (clusterCIDR): 10.244.0.0/16 and 10.245.0.0/16 are of the same family"},
		{"iptables backend", func(c *Config) { c.IptablesBackend = "bpf" }, `--iptables-backend: want nft or legacy`},
		{"vip binding", func(c *Config) { c.VIPBinding = "tunnel" }, `--vip-binding: want address or local-route, got "tunnel"`},
		{"debug address", func(c *Config) { c.DebugAddress = "localhost" }, `--debug-address: want IP:PORT`},
		{"healthz address", func(c *Config) { c.HealthzBindAddress = "0.0.0.0" }, `--healthz-bind-address (healthzBindAddress): want IP:PORT`},
		{"metrics address", func(c *Config) { c.MetricsBindAddress = "::1:x" }, `--metrics-bind-address (metricsBindAddress): want IP:PORT`},
		{"master with manifests", func(c *Config) { c.Master, c.ManifestsDir = "https://192.0.2.1:6443", "m" }, "--manifests: cannot be combined"},
		{"proxy mode", func(c *Config) { c.ProxyMode = "nftables" }, `--proxy-mode (mode): kube-ipvs programs IPVS only, it cannot act as kube-proxy's "nftables" mode`},
		{"masquerade bit high", func(c *Config) { c.MasqueradeBit = 32 }, "--iptables-masquerade-bit (iptables.masqueradeBit): must be within the range [0, 31], got 32"},
		{"masquerade bit negative", func(c *Config) { c.MasqueradeBit = -1 }, "--iptables-masquerade-bit (iptables.masqueradeBit): must be within the range [0, 31], got -1"},
		{"detect local bridge without name", func(c *Config) { c.DetectLocalMode = DetectBridgeInterface }, "--pod-bridge-interface (detectLocal.bridgeInterface): the pods' interface name must not be empty (needed by --detect-local-mode=BridgeInterface)"},
		{"detect local prefix without prefix", func(c *Config) { c.DetectLocalMode = DetectInterfaceNamePrefix }, "--pod-interface-name-prefix (detectLocal.interfaceNamePrefix): the pods' interface name must not be empty"},
		{"detect local prefix too long", func(c *Config) {
			c.DetectLocalMode, c.InterfaceNamePrefix = DetectInterfaceNamePrefix, "abcdefghijklmno"
		}, `--pod-interface-name-prefix (detectLocal.interfaceNamePrefix): interface "abcdefghijklmno+" is longer than the kernel's 15 bytes`},
		{"detect local unknown", func(c *Config) { c.DetectLocalMode = "Magic" }, `want ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix, got "Magic"`},
		{"qps", func(c *Config) { c.Client.QPS = -1 }, "--kube-api-qps (clientConnection.qps): must not be negative"},
		{"burst", func(c *Config) { c.Client.Burst = -1 }, "--kube-api-burst (clientConnection.burst): must not be negative"},
		{"conntrack max", func(c *Config) { c.Conntrack.MaxPerCore = -1 }, "--conntrack-max-per-core (conntrack.maxPerCore): must not be negative"},
		{"conntrack min", func(c *Config) { c.Conntrack.Min = -1 }, "--conntrack-min (conntrack.min): must not be negative"},
		{"conntrack close wait", func(c *Config) { c.Conntrack.TCPCloseWait = -time.Second }, "--conntrack-tcp-timeout-close-wait (conntrack.tcpCloseWaitTimeout): must not be negative"},
		{"log format", func(c *Config) { c.LogFormat = "xml" }, `--logging-format (logging.format): want text or json, got "xml"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.change(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// Each detect-local mode gives the shim kube-proxy's detector for it; the
// masquerade bit gives the mark 1<<bit.
func TestShimConfig(t *testing.T) {
	v4, v6 := netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")
	for _, tc := range []struct {
		mode      DetectLocalMode
		cidrs     []netip.Prefix
		iface     string
		wantIface string
	}{
		{DetectClusterCIDR, []netip.Prefix{v4, v6}, "", ""},
		{DetectNodeCIDR, nil, "", ""}, // the Node's, filled in by the reconciler
		{DetectBridgeInterface, nil, "cbr0", "cbr0"},
		{DetectInterfaceNamePrefix, nil, "veth", "veth+"},
	} {
		c := Default()
		c.ClusterCIDRs, c.DetectLocalMode, c.MasqueradeBit = []netip.Prefix{v4, v6}, tc.mode, 0
		c.BridgeInterface, c.InterfaceNamePrefix = tc.iface, tc.iface
		if err := c.Validate(); err != nil {
			t.Fatalf("%s: %v", tc.mode, err)
		}
		sc := c.ShimConfig()
		if !slices.Equal(sc.PodCIDRs, tc.cidrs) || sc.PodInterface != tc.wantIface || sc.MasqueradeMark != 1 || sc.Families != c.Families {
			t.Errorf("%s: %+v", tc.mode, sc)
		}
		if err := sc.Validate(); err != nil {
			t.Errorf("%s: shim refuses it: %v", tc.mode, err)
		}
	}
	if m := Default().ShimConfig().MasqueradeMark; m != 0x4000 {
		t.Errorf("default mark %#x, want 0x4000", m)
	}
}
