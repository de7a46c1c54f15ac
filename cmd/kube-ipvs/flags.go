package main

import (
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// agentFlags binds the agent's flags to a config. Names follow kube-proxy's
// where the meaning is the same, so existing habits carry over.
func agentFlags(fs *flag.FlagSet, c *config.Config) {
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "kubeconfig file (default: in-cluster config)")
	fs.StringVar(&c.ManifestsDir, "manifests", c.ManifestsDir, "read Services, EndpointSlices and Nodes from the YAML/JSON files in this folder instead of a cluster, and follow its changes")
	fs.StringVar(&c.HostnameOverride, "hostname-override", c.HostnameOverride, "this node's name (default: $NODE_NAME, else the hostname)")
	fs.StringVar(&c.ServiceProxyName, "service-proxy-name", c.ServiceProxyName, "serve only objects whose service.kubernetes.io/service-proxy-name label has this value (default: only unlabelled ones)")
	fs.StringVar((*string)(&c.Scheduler), "scheduler", string(c.Scheduler), "IPVS scheduler ("+model.SchedulerList()+"); per Service: annotation kube-ipvs.io/scheduler")
	listVar(fs, "nodeport-addresses", &c.NodePortAddresses, "comma-separated CIDRs of node addresses NodePorts listen on, or \"primary\" (the Node's InternalIPs)")
	ownershipFlags(fs, c)
	fs.BoolVar(&c.IPv4, "ipv4", c.IPv4, "program IPv4 services")
	fs.BoolVar(&c.IPv6, "ipv6", c.IPv6, "program IPv6 services")
	fs.DurationVar(&c.SyncPeriod, "sync-period", c.SyncPeriod, "full resync period (re-reads the kernel and repairs drift)")
	fs.DurationVar(&c.MinSyncPeriod, "min-sync-period", c.MinSyncPeriod, "minimum time between syncs; bursts of changes are coalesced")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "how long a removed TCP/SCTP endpoint may drain at weight 0; per Service: annotation kube-ipvs.io/drain-timeout")
	fs.DurationVar(&c.TCPTimeout, "tcp-timeout", c.TCPTimeout, "IPVS timeout for idle TCP connections (0: leave as is)")
	fs.DurationVar(&c.TCPFinTimeout, "tcpfin-timeout", c.TCPFinTimeout, "IPVS timeout for TCP connections after FIN (0: leave as is)")
	fs.DurationVar(&c.UDPTimeout, "udp-timeout", c.UDPTimeout, "IPVS timeout for UDP flows (0: leave as is)")
	fs.BoolVar(&c.Once, "once", c.Once, "sync once and exit (non-zero on failure)")
	fs.BoolVar(&c.DryRun, "dry-run", c.DryRun, "print the operations a sync would apply, one ipvsadm-style line each, and change nothing")
	fs.BoolVar(&c.MasqueradeAll, "masquerade-all", c.MasqueradeAll, "masquerade every connection to a ClusterIP")
	fs.Func("cluster-cidr", "comma-separated pod CIDRs, at most one per family: connections to a ClusterIP from outside them are masqueraded", func(v string) error {
		ps, err := parsePrefixes(v)
		c.ClusterCIDRs = ps
		return err
	})
	fs.BoolVar(&c.StrictARP, "strict-arp", c.StrictARP, "set arp_ignore=1 and arp_announce=2 so VIPs on kube-ipvs0 are not answered by every node (MetalLB layer 2 needs it)")
	fs.StringVar((*string)(&c.IptablesBackend), "iptables-backend", string(c.IptablesBackend), "nft or legacy (default: the one holding more rules on this node)")
	fs.StringVar(&c.DebugAddress, "debug-address", c.DebugAddress, "IP:PORT for /livez, /healthz, Prometheus /metrics and the views of `kube-ipvs status` and `kube-ipvs diff` (empty: off)")
	logFlags(fs, c)
}

// ownershipFlags bind what widens or narrows the ownership predicate; the
// agent and cleanup must read them alike, or cleanup would delete what the
// agent leaves alone.
func ownershipFlags(fs *flag.FlagSet, c *config.Config) {
	fs.Func("nodeport-range", "NodePort range: virtual servers on node addresses with these ports are ours (default 30000-32767)", func(s string) error {
		r, err := model.ParsePortRange(s)
		c.NodePortRange = r
		return err
	})
	fs.Func("exclude-cidrs", "comma-separated CIDRs whose virtual servers and addresses kube-ipvs never deletes", func(s string) error {
		ps, err := parsePrefixes(s)
		c.ExcludeCIDRs = ps
		return err
	})
}

func logFlags(fs *flag.FlagSet, c *config.Config) {
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "json or console")
}

// listVar is a comma-separated string list flag.
func listVar(fs *flag.FlagSet, name string, p *[]string, usage string) {
	fs.Func(name, usage, func(s string) error {
		*p = nil
		for _, f := range strings.Split(s, ",") {
			if f = strings.TrimSpace(f); f != "" {
				*p = append(*p, f)
			}
		}
		return nil
	})
}

func parsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR", f)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// parseFlags parses args; a bad flag is reported naming it (by the flag
// package) and then Validate names every remaining problem.
func parseFlags(fs *flag.FlagSet, args []string, c *config.Config, stderr io.Writer) bool {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return false
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintf(stderr, "%s: invalid flags:\n%s\n", fs.Name(), indent(err.Error()))
		return false
	}
	return true
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }

// newLogger builds the zap logger the flags ask for, writing to stderr.
func newLogger(c config.Config) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(c.LogLevel)
	if err != nil {
		return nil, err
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	var encoder zapcore.Encoder
	if c.LogFormat == "json" {
		encoder = zapcore.NewJSONEncoder(enc)
	} else {
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		encoder = zapcore.NewConsoleEncoder(enc)
	}
	return zap.New(zapcore.NewCore(encoder, zapcore.Lock(os.Stderr), level)), nil
}

// nodeName is --hostname-override, else $NODE_NAME, else the hostname, as
// kube-proxy resolves it.
func nodeName(override string) string {
	if override != "" {
		return strings.ToLower(override)
	}
	if n := os.Getenv("NODE_NAME"); n != "" {
		return strings.ToLower(n)
	}
	h, _ := os.Hostname()
	return strings.ToLower(h)
}
