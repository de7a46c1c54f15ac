// Package config holds the agent's configuration, its defaults and its
// validation, and reads and writes it as kube-proxy's configuration file
// (KubeProxyConfiguration). Pure: flags are parsed and files read in cmd/,
// checked here; the types and rules of each setting belong to the package
// that owns the concept.
package config

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
	"github.com/kube-ipvs/kube-ipvs/internal/source"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// Config is everything the agent is told at start. Where a component
// owns a setting, the setting is a field of that component's own options
// (embedded or named below), so that the flags and the file bind onto the
// value the component is handed, with no copy between them.
type Config struct {
	// Client is how the source reaches the API server; exactly one of
	// Kubeconfig/Master/in-cluster or ManifestsDir is the source.
	Client
	// ProxyMode is kube-proxy's --proxy-mode (the file's mode): "ipvs",
	// the default; anything else, empty included (kube-proxy's iptables),
	// is refused.
	ProxyMode        string
	ManifestsDir     string
	HostnameOverride string // the node's name, resolved by the agent

	// Translation is how Services become virtual servers: the scheduler,
	// the NodePort addresses, the families, the drain timeout, the
	// frontends cap, the external IP CIDRs. The agent fills in what only
	// the running node knows (NodeName, HostAddrs, MasqueradeMark).
	Translation
	NodePortRange model.PortRange
	ExcludeCIDRs  []netip.Prefix

	SyncPeriod    time.Duration
	MinSyncPeriod time.Duration
	// Timeouts are the IPVS connection timeouts (0: leave as is).
	Timeouts dataplane.Timeouts

	// The netfilter shim and node settings (kube-proxy's flag names).
	MasqueradeAll bool
	// MasqueradeBit is the fwmark bit asking for SNAT (0..31, mark 1<<bit).
	MasqueradeBit   int32
	DetectLocalMode DetectLocalMode
	ClusterCIDRs    []netip.Prefix // at most one per family
	// BridgeInterface and InterfaceNamePrefix are read by the detect-local
	// modes of the same names.
	BridgeInterface     string
	InterfaceNamePrefix string
	StrictARP           bool
	// VIPBinding is how a VIP is made the node's: a local route through
	// kube-ipvs0 (the default, whose cost does not grow with the number of
	// VIPs) or an address on it (kube-proxy's way).
	VIPBinding      VIPBinding
	IptablesBackend shim.Backend // nft, legacy or detect ("")
	// Conntrack is the nf_conntrack tuning kube-proxy writes at start
	// (zero: leave the kernel's value; MaxPerCore 0 also ignores Min).
	Conntrack dataplane.ConntrackTuning

	Once   bool
	DryRun bool

	// HealthzBindAddress and MetricsBindAddress are kube-proxy's listeners
	// (IP:PORT; empty: off): /healthz and /livez, and /metrics.
	// BindAddressHardFail makes failing to listen on them fatal; otherwise
	// the agent logs it and tries again.
	HealthzBindAddress  string
	MetricsBindAddress  string
	BindAddressHardFail bool
	// DebugAddress serves the debug pages `status` and `diff` read; empty:
	// off.
	DebugAddress string

	LogLevel  string
	LogFormat string
}

// Client and Translation are the options of the packages that own them
// (the source's client, translation), embedded in Config under these
// names.
type (
	Client      = source.ClientOptions
	Translation = translate.Config
)

// DetectLocalMode is how kube-proxy tells traffic from local pods from
// the rest (for masquerading): kube-proxy's names.
type DetectLocalMode string

// The detect-local modes kube-proxy knows.
const (
	DetectClusterCIDR         DetectLocalMode = "ClusterCIDR"
	DetectNodeCIDR            DetectLocalMode = "NodeCIDR"
	DetectBridgeInterface     DetectLocalMode = "BridgeInterface"
	DetectInterfaceNamePrefix DetectLocalMode = "InterfaceNamePrefix"
)

// VIPBinding is how a VIP is made the node's own, so that packets to it
// are delivered locally, where IPVS takes them.
type VIPBinding string

const (
	// VIPAddress binds each VIP as an address on kube-ipvs0, as kube-proxy
	// does: `ip addr show kube-ipvs0` lists them. The kernel walks the
	// link's address list on every add, so N VIPs cost the square of N.
	// It is for a node whose other tools read the VIPs off the link's
	// addresses.
	VIPAddress VIPBinding = "address"
	// VIPLocalRoute, the default, binds each VIP as a local route through
	// kube-ipvs0 in the local table (`ip route show table local dev
	// kube-ipvs0`): the route the kernel makes for an address, without the
	// address, at the same cost at any N. Packets to the VIP are delivered
	// locally, to IPVS, as they are for an address.
	VIPLocalRoute VIPBinding = "local-route"
)

// DefaultDebugAddress is loopback only: the debug pages are for the node's
// own operator, not the network.
const DefaultDebugAddress = "127.0.0.1:10247"

// kube-proxy's defaults (pkg/proxy/apis/config/v1alpha1/defaults.go).
const (
	DefaultHealthzBindAddress = "0.0.0.0:10256"
	DefaultMetricsBindAddress = "127.0.0.1:10249"
	DefaultMasqueradeBit      = 14
	ContentTypeProtobuf       = "application/vnd.kubernetes.protobuf"
	ProxyModeIPVS             = "ipvs"
)

// Default returns the configuration a flagless agent runs with: kube-proxy's
// IPVS-mode defaults where it has the setting.
func Default() Config {
	return Config{
		ProxyMode: ProxyModeIPVS,
		// HTTP/2 and gzip: client-go's defaults, and kube-proxy's (see
		// source.ClientOptions for what each costs whom).
		Client: Client{QPS: 5, Burst: 10, ContentType: ContentTypeProtobuf, HTTP2: true, Compression: true},
		Translation: Translation{
			Scheduler:    model.SchedRR,
			Families:     model.Families{IPv4: true, IPv6: true},
			DrainTimeout: 2 * time.Minute,
			MaxFrontends: translate.DefaultMaxFrontends,
		},
		NodePortRange:      model.PortRange{First: 30000, Last: 32767},
		SyncPeriod:         30 * time.Second,
		MinSyncPeriod:      time.Second,
		MasqueradeBit:      DefaultMasqueradeBit,
		DetectLocalMode:    DetectClusterCIDR,
		VIPBinding:         VIPLocalRoute,
		HealthzBindAddress: DefaultHealthzBindAddress,
		MetricsBindAddress: DefaultMetricsBindAddress,
		Conntrack: dataplane.ConntrackTuning{
			MaxPerCore: 32 * 1024, Min: 128 * 1024,
			TCPEstablished: 24 * time.Hour, TCPCloseWait: time.Hour,
		},

		LogLevel:     "info",
		LogFormat:    "console",
		DebugAddress: DefaultDebugAddress,
	}
}

// NodePortAddressAll and NodePortAddressLocalhost are kube-proxy's other
// keywords for --nodeport-addresses.
const (
	NodePortAddressAll       = "all"
	NodePortAddressLocalhost = "localhost"
)

// NodePortAddresses turns kube-proxy's --nodeport-addresses list into the
// agent's: "all" anywhere means every address (the empty list), as in
// kube-proxy's IPVS mode; "localhost" is refused, since IPVS mode never
// serves NodePorts on loopback (kube-proxy drops those addresses).
func NodePortAddresses(in []string) ([]string, error) {
	var out []string
	for _, a := range in {
		switch a {
		case NodePortAddressAll:
			return nil, nil
		case NodePortAddressLocalhost:
			return nil, fmt.Errorf("%q: NodePorts on loopback exist only in kube-proxy's iptables and nftables modes", a)
		}
		if err := translate.CheckNodePortAddress(a); err != nil {
			return nil, fmt.Errorf("%w (or %q)", err, NodePortAddressAll)
		}
		out = append(out, a)
	}
	return out, nil
}

// Validate checks every field and names the flag (and the config file
// field) of each problem.
func (c Config) Validate() error {
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...)))
	}
	if err := c.Scheduler.Validate(); err != nil {
		bad("--ipvs-scheduler (ipvs.scheduler)", "%v", err)
	}
	switch c.ProxyMode {
	case ProxyModeIPVS:
	case "":
		// kube-proxy reads an empty mode as its platform default, iptables
		// (cmd/kube-proxy/app/server_linux.go): that node's Services live
		// in iptables rules, which would keep answering beside IPVS.
		bad("--proxy-mode (mode)", "empty means kube-proxy's default, \"iptables\", and kube-ipvs takes over kube-proxy's IPVS mode only: "+
			"set mode: ipvs once kube-proxy runs in IPVS mode (or its iptables rules are gone: kube-proxy --cleanup), or pass --proxy-mode=ipvs")
	default:
		bad("--proxy-mode (mode)", "kube-ipvs programs IPVS only, it cannot act as kube-proxy's %q mode: set \"ipvs\", or run kube-proxy itself for %q", c.ProxyMode, c.ProxyMode)
	}
	if c.ManifestsDir != "" && (c.Kubeconfig != "" || c.Master != "") {
		bad("--manifests", "cannot be combined with --kubeconfig or --master")
	}
	for _, a := range c.NodePortAddresses {
		if err := translate.CheckNodePortAddress(a); err != nil {
			bad("--nodeport-addresses (nodePortAddresses)", "%v", err)
		}
	}
	c.validatePeriods(bad)
	if c.MaxFrontends < 1 || c.MaxFrontends > shim.MaxSetMembers {
		bad("--max-frontends-per-service", "must be between 1 and %d (what the shared sets hold), got %d", shim.MaxSetMembers, c.MaxFrontends)
	}
	if err := shim.CheckPodCIDRs(c.ClusterCIDRs); err != nil {
		bad("--cluster-cidr (clusterCIDR)", "%v", err)
	}
	if _, err := shim.MasqueradeMark(c.MasqueradeBit); err != nil {
		bad("--iptables-masquerade-bit (iptables.masqueradeBit)", "%v", err)
	}
	c.validateDetectLocal(bad)
	c.validateClient(bad)
	validateConntrack(c.Conntrack, bad)
	if err := c.IptablesBackend.Validate(); err != nil {
		bad("--iptables-backend", "%v", err)
	}
	if c.VIPBinding != VIPAddress && c.VIPBinding != VIPLocalRoute {
		bad("--vip-binding", "want %s or %s, got %q", VIPAddress, VIPLocalRoute, string(c.VIPBinding))
	}
	for _, a := range []struct{ name, addr string }{
		{"--debug-address", c.DebugAddress},
		{"--healthz-bind-address (healthzBindAddress)", c.HealthzBindAddress},
		{"--metrics-bind-address (metricsBindAddress)", c.MetricsBindAddress},
	} {
		if _, err := netip.ParseAddrPort(a.addr); a.addr != "" && err != nil {
			bad(a.name, "want IP:PORT (or empty to turn off), got %q", a.addr)
		}
	}
	if !c.IPv4 && !c.IPv6 {
		errs = append(errs, errors.New("--ipv4/--ipv6: at least one address family must be enabled"))
	}
	if _, ok := VerbosityOfLogLevel(c.LogLevel); !ok {
		bad("--log-level", "want error, warn, info, debug or a klog verbosity (0 to 127), got %q", c.LogLevel)
	}
	if c.LogFormat != "json" && c.LogFormat != "console" {
		bad("--logging-format (logging.format)", "want text or json, got %q", c.LogFormat)
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

func (c Config) validatePeriods(bad func(name, format string, args ...any)) {
	if c.SyncPeriod <= 0 {
		bad("--ipvs-sync-period (ipvs.syncPeriod)", "must be positive, got %s", c.SyncPeriod)
	}
	if c.MinSyncPeriod < 0 || (c.SyncPeriod > 0 && c.MinSyncPeriod > c.SyncPeriod) {
		bad("--ipvs-min-sync-period (ipvs.minSyncPeriod)", "must be between 0 and the sync period (%s), got %s", c.SyncPeriod, c.MinSyncPeriod)
	}
	if c.DrainTimeout < 0 {
		bad("--drain-timeout", "must not be negative, got %s", c.DrainTimeout)
	}
	// The kernel keeps IPVS timeouts in whole seconds.
	checkDurations(bad, "must be a whole number of seconds >= 0", func(d time.Duration) bool { return d >= 0 && d%time.Second == 0 },
		namedDuration{"--ipvs-tcp-timeout (ipvs.tcpTimeout)", c.Timeouts.TCP},
		namedDuration{"--ipvs-tcpfin-timeout (ipvs.tcpFinTimeout)", c.Timeouts.TCPFin},
		namedDuration{"--ipvs-udp-timeout (ipvs.udpTimeout)", c.Timeouts.UDP})
}

type namedDuration struct {
	name string
	d    time.Duration
}

// checkDurations reports each duration that is not ok.
func checkDurations(bad func(name, format string, args ...any), rule string, ok func(time.Duration) bool, ds ...namedDuration) {
	for _, nd := range ds {
		if !ok(nd.d) {
			bad(nd.name, "%s, got %s", rule, nd.d)
		}
	}
}

// validateDetectLocal checks the detect-local mode and the setting it
// reads, as kube-proxy does, and what iptables would refuse in it.
func (c Config) validateDetectLocal(bad func(name, format string, args ...any)) {
	switch c.DetectLocalMode {
	case DetectClusterCIDR, DetectNodeCIDR:
	case DetectBridgeInterface:
		if err := shim.CheckPodInterface(c.BridgeInterface); err != nil {
			bad("--pod-bridge-interface (detectLocal.bridgeInterface)", "%v (needed by --detect-local-mode=BridgeInterface)", err)
		}
	case DetectInterfaceNamePrefix:
		if err := shim.CheckPodInterface(c.InterfaceNamePrefix + "+"); err != nil {
			bad("--pod-interface-name-prefix (detectLocal.interfaceNamePrefix)", "%v (needed by --detect-local-mode=InterfaceNamePrefix)", err)
		}
	default:
		bad("--detect-local-mode (detectLocalMode)", "want ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix, got %q", c.DetectLocalMode)
	}
}

// ShimConfig is the netfilter shim's configuration: families, masquerading
// and how pod traffic is told from the rest (kube-proxy's local traffic
// detector, one per mode). In NodeCIDR mode the pod CIDRs are the Node's
// spec.podCIDRs, which only the running agent knows: they are left empty
// here for the reconciler to fill in.
func (c Config) ShimConfig() shim.Config {
	mark, _ := shim.MasqueradeMark(c.MasqueradeBit) // Validate refused a bad one
	sc := shim.Config{Families: c.Families, MasqueradeAll: c.MasqueradeAll, MasqueradeMark: mark}
	switch c.DetectLocalMode {
	case DetectClusterCIDR:
		sc.PodCIDRs = c.ClusterCIDRs
	case DetectBridgeInterface:
		sc.PodInterface = c.BridgeInterface
	case DetectInterfaceNamePrefix:
		sc.PodInterface = c.InterfaceNamePrefix + "+"
	}
	return sc
}

func (c Config) validateClient(bad func(name, format string, args ...any)) {
	if c.Client.QPS < 0 {
		bad("--kube-api-qps (clientConnection.qps)", "must not be negative, got %g", c.Client.QPS)
	}
	if c.Client.Burst < 0 {
		bad("--kube-api-burst (clientConnection.burst)", "must not be negative, got %d", c.Client.Burst)
	}
}

func validateConntrack(ct dataplane.ConntrackTuning, bad func(name, format string, args ...any)) {
	if ct.MaxPerCore < 0 {
		bad("--conntrack-max-per-core (conntrack.maxPerCore)", "must not be negative, got %d", ct.MaxPerCore)
	}
	if ct.Min < 0 {
		bad("--conntrack-min (conntrack.min)", "must not be negative, got %d", ct.Min)
	}
	checkDurations(bad, "must not be negative", func(d time.Duration) bool { return d >= 0 },
		namedDuration{"--conntrack-tcp-timeout-established (conntrack.tcpEstablishedTimeout)", ct.TCPEstablished},
		namedDuration{"--conntrack-tcp-timeout-close-wait (conntrack.tcpCloseWaitTimeout)", ct.TCPCloseWait},
		namedDuration{"--conntrack-udp-timeout (conntrack.udpTimeout)", ct.UDP},
		namedDuration{"--conntrack-udp-timeout-stream (conntrack.udpStreamTimeout)", ct.UDPStream})
}
