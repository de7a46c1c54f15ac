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
		{"tcp timeout", func(c *Config) { c.TCPTimeout = 1500 * time.Millisecond }, "--ipvs-tcp-timeout (ipvs.tcpTimeout): must be a whole number of seconds"},
		{"families", func(c *Config) { c.IPv4, c.IPv6 = false, false }, "at least one address family"},
		{"log level", func(c *Config) { c.LogLevel = "loud" }, `--log-level: want debug, info, warn or error, got "loud"`},
		{"cluster cidr", func(c *Config) {
			c.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.245.0.0/16")}
		}, "--cluster-cidr (clusterCIDR): 10.244.0.0/16 and 10.245.0.0/16 are of the same family"},
		{"iptables backend", func(c *Config) { c.IptablesBackend = "bpf" }, `--iptables-backend: want nft or legacy`},
		{"debug address", func(c *Config) { c.DebugAddress = "localhost" }, `--debug-address: want IP:PORT`},
		{"healthz address", func(c *Config) { c.HealthzBindAddress = "0.0.0.0" }, `--healthz-bind-address (healthzBindAddress): want IP:PORT`},
		{"metrics address", func(c *Config) { c.MetricsBindAddress = "::1:x" }, `--metrics-bind-address (metricsBindAddress): want IP:PORT`},
		{"master with manifests", func(c *Config) { c.Master, c.ManifestsDir = "https://192.0.2.1:6443", "m" }, "--manifests: cannot be combined"},
		{"proxy mode", func(c *Config) { c.ProxyMode = "nftables" }, `--proxy-mode (mode): kube-ipvs programs IPVS only, it cannot act as kube-proxy's "nftables" mode`},
		{"masquerade bit", func(c *Config) { c.MasqueradeBit = 13 }, "--iptables-masquerade-bit (iptables.masqueradeBit): kube-ipvs marks with bit 14 (0x4000) only"},
		{"detect local node cidr", func(c *Config) { c.DetectLocalMode = DetectNodeCIDR }, "--detect-local-mode (detectLocalMode): NodeCIDR is not supported yet"},
		{"detect local bridge without name", func(c *Config) { c.DetectLocalMode = DetectBridgeInterface }, "BridgeInterface needs an interface name"},
		{"detect local unknown", func(c *Config) { c.DetectLocalMode = "Magic" }, `want ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix, got "Magic"`},
		{"qps", func(c *Config) { c.Client.QPS = -1 }, "--kube-api-qps (clientConnection.qps): must not be negative"},
		{"burst", func(c *Config) { c.Client.Burst = -1 }, "--kube-api-burst (clientConnection.burst): must not be negative"},
		{"conntrack max", func(c *Config) { c.Conntrack.MaxPerCore = -1 }, "--conntrack-max-per-core (conntrack.maxPerCore): must not be negative"},
		{"conntrack min", func(c *Config) { c.Conntrack.Min = -1 }, "--conntrack-min (conntrack.min): must not be negative"},
		{"conntrack close wait", func(c *Config) { c.Conntrack.TCPCloseWaitTimeout = -time.Second }, "--conntrack-tcp-timeout-close-wait (conntrack.tcpCloseWaitTimeout): must not be negative"},
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
