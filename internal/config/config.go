// Package config holds the agent's configuration, its defaults and its
// validation. Pure: flags are parsed in cmd/, checked here; the types and
// rules of each setting belong to the package that owns the concept.
package config

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// Config is everything the agent is told at start.
type Config struct {
	// Source: exactly one of Kubeconfig/in-cluster or ManifestsDir.
	Kubeconfig       string
	ManifestsDir     string
	HostnameOverride string // resolved node name; see cmd
	ServiceProxyName string

	Scheduler         model.Scheduler
	NodePortAddresses []string // CIDRs or translate.NodePortPrimary
	NodePortRange     model.PortRange
	ExcludeCIDRs      []netip.Prefix
	model.Families    // --ipv4, --ipv6: handed alike to translation and the shim

	SyncPeriod    time.Duration
	MinSyncPeriod time.Duration
	DrainTimeout  time.Duration

	TCPTimeout, TCPFinTimeout, UDPTimeout time.Duration

	// The netfilter shim and node settings (kube-proxy's flag names).
	MasqueradeAll   bool
	ClusterCIDRs    []netip.Prefix // at most one per family
	StrictARP       bool
	IptablesBackend shim.Backend // nft, legacy or detect ("")

	Once   bool
	DryRun bool

	// DebugAddress serves /livez, /healthz and the views `status` and
	// `diff` read; empty: off.
	DebugAddress string

	LogLevel  string
	LogFormat string
}

// DefaultDebugAddress is loopback only: the debug views are for the node's
// own operator, not the network.
const DefaultDebugAddress = "127.0.0.1:10247"

// Default returns the configuration a flagless agent runs with.
func Default() Config {
	return Config{
		Scheduler:         model.SchedRR,
		NodePortAddresses: []string{translate.NodePortPrimary},
		NodePortRange:     model.PortRange{First: 30000, Last: 32767},
		Families:          model.Families{IPv4: true, IPv6: true},
		SyncPeriod:        30 * time.Second,
		MinSyncPeriod:     time.Second,
		DrainTimeout:      2 * time.Minute,
		LogLevel:          "info",
		LogFormat:         "console",
		DebugAddress:      DefaultDebugAddress,
	}
}

// Validate checks every field and names the flag of each problem.
func (c Config) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	if err := c.Scheduler.Validate(); err != nil {
		bad("scheduler", "%v", err)
	}
	if c.Kubeconfig != "" && c.ManifestsDir != "" {
		bad("manifests", "cannot be combined with --kubeconfig")
	}
	for _, a := range c.NodePortAddresses {
		if err := translate.CheckNodePortAddress(a); err != nil {
			bad("nodeport-addresses", "%v", err)
		}
	}
	if c.SyncPeriod <= 0 {
		bad("sync-period", "must be positive, got %s", c.SyncPeriod)
	}
	if c.MinSyncPeriod < 0 || (c.SyncPeriod > 0 && c.MinSyncPeriod > c.SyncPeriod) {
		bad("min-sync-period", "must be between 0 and --sync-period (%s), got %s", c.SyncPeriod, c.MinSyncPeriod)
	}
	if c.DrainTimeout < 0 {
		bad("drain-timeout", "must not be negative, got %s", c.DrainTimeout)
	}
	for flag, d := range map[string]time.Duration{"tcp-timeout": c.TCPTimeout, "tcpfin-timeout": c.TCPFinTimeout, "udp-timeout": c.UDPTimeout} {
		if d < 0 || d%time.Second != 0 {
			bad(flag, "must be a whole number of seconds >= 0, got %s", d)
		}
	}
	if err := shim.CheckClusterCIDRs(c.ClusterCIDRs); err != nil {
		bad("cluster-cidr", "%v", err)
	}
	if err := c.IptablesBackend.Validate(); err != nil {
		bad("iptables-backend", "%v", err)
	}
	if c.DebugAddress != "" {
		if _, err := netip.ParseAddrPort(c.DebugAddress); err != nil {
			bad("debug-address", "want IP:PORT (or empty to turn off), got %q", c.DebugAddress)
		}
	}
	if !c.IPv4 && !c.IPv6 {
		errs = append(errs, errors.New("--ipv4/--ipv6: at least one address family must be enabled"))
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.LogLevel) {
		bad("log-level", "want debug, info, warn or error, got %q", c.LogLevel)
	}
	if c.LogFormat != "json" && c.LogFormat != "console" {
		bad("log-format", "want json or console, got %q", c.LogFormat)
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}
