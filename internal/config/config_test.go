package config

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"scheduler", func(c *Config) { c.Scheduler = "fastest" }, `--scheduler: unknown scheduler "fastest"`},
		{"both sources", func(c *Config) { c.Kubeconfig, c.ManifestsDir = "k", "m" }, "--manifests: cannot be combined with --kubeconfig"},
		{"nodeport addresses", func(c *Config) { c.NodePortAddresses = []string{"primary", "nope"} }, `--nodeport-addresses: "nope"`},
		{"sync period", func(c *Config) { c.SyncPeriod = 0 }, "--sync-period: must be positive"},
		{"min sync period", func(c *Config) { c.MinSyncPeriod = time.Hour }, "--min-sync-period: must be between"},
		{"drain timeout", func(c *Config) { c.DrainTimeout = -time.Second }, "--drain-timeout: must not be negative"},
		{"tcp timeout", func(c *Config) { c.TCPTimeout = 1500 * time.Millisecond }, "--tcp-timeout: must be a whole number of seconds"},
		{"families", func(c *Config) { c.IPv4, c.IPv6 = false, false }, "at least one address family"},
		{"log level", func(c *Config) { c.LogLevel = "loud" }, `--log-level: want debug, info, warn or error, got "loud"`},
		{"cluster cidr", func(c *Config) {
			c.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.245.0.0/16")}
		}, "--cluster-cidr: 10.244.0.0/16 and 10.245.0.0/16 are of the same family"},
		{"iptables backend", func(c *Config) { c.IptablesBackend = "bpf" }, `--iptables-backend: want nft or legacy`},
		{"debug address", func(c *Config) { c.DebugAddress = "localhost" }, `--debug-address: want IP:PORT`},
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
