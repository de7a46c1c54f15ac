package main

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// files are the agent's flags that name files rather than settings.
type files struct {
	config        string // --config: a KubeProxyConfiguration
	writeConfigTo string // --write-config-to: write the effective one and exit
	cpuProfile    string // --cpu-profile: hidden, for measuring the agent's own work
	heapProfile   string // --heap-profile: hidden, likewise for its memory

	// kube-proxy's flags that act once the others are read.
	bindAddress              string // --bind-address: kube-proxy's node IP hint
	healthzPort, metricsPort int32  // --healthz-port, --metrics-port: 0 turns the server off
	healthzBare, metricsBare bool   // the bind address flag was a bare IP, which a port completes
	printVersion             bool   // --version
	dryRunTable              string // --dry-run-table: the saved table a dry run plans against
}

// agentFlags binds the agent's flags onto c, with kube-proxy's names
// (cmd/kube-proxy/app/options.go) wherever kube-proxy has the setting,
// so a kube-proxy command line carries over.
func agentFlags(fs *pflag.FlagSet, c *config.Config, f *files) {
	fs.StringVar(&f.config, "config", "", "a KubeProxyConfiguration file (kubeproxy.config.k8s.io/v1alpha1), as kubeadm writes it; flags given explicitly override it")
	fs.StringVar(&f.writeConfigTo, "write-config-to", "", "write the effective configuration as a KubeProxyConfiguration to this file and exit")
	// Hidden: a measuring aid (the cold-start profile), not a setting.
	fs.StringVar(&f.cpuProfile, "cpu-profile", "", "write a Go CPU profile of the whole run to this file")
	_ = fs.MarkHidden("cpu-profile")
	fs.StringVar(&f.heapProfile, "heap-profile", "", "write a Go heap profile to this file when the run ends")
	_ = fs.MarkHidden("heap-profile")
	fs.Var(namedString{&c.ProxyMode, "ProxyMode"}, "proxy-mode", `kube-proxy's mode: only "ipvs" is accepted (empty is kube-proxy's default, iptables)`)
	clientFlags(fs, c)
	fs.StringVar(&c.ManifestsDir, "manifests", c.ManifestsDir, "read Services, EndpointSlices and Nodes from the YAML/JSON files in this folder instead of a cluster, and follow its changes")
	fs.StringVar(&c.HostnameOverride, "hostname-override", c.HostnameOverride, "this node's name (default: $NODE_NAME, else the hostname)")
	fs.StringVar(&c.ServiceProxyName, "service-proxy-name", c.ServiceProxyName, "serve only objects whose service.kubernetes.io/service-proxy-name label has this value (default: only unlabelled ones)")
	ipvsFlags(fs, c)
	fs.Var(listValue(&c.NodePortAddresses, config.NodePortAddresses), "nodeport-addresses", `comma-separated CIDRs of node addresses NodePorts listen on, "primary" (the Node's InternalIPs) or "all"; unset: every node address, following addresses as they come and go`)
	ownershipFlags(fs, c)
	fs.Var(prefixesValue{&c.ExternalIPCIDRs}, "external-ip-cidrs", "comma-separated CIDRs a Service's spec.externalIPs must be inside to be served on this node (unset: any, as kube-proxy; any namespace may then claim an address, CVE-2020-8554: enable the DenyServiceExternalIPs admission plugin or set this)")
	fs.BoolVar(&c.IPv4, "ipv4", c.IPv4, "program IPv4 services")
	fs.BoolVar(&c.IPv6, "ipv6", c.IPv6, "program IPv6 services")
	fs.Var(durationValue{&c.DrainTimeout}, "drain-timeout", "how long a removed TCP/SCTP endpoint may drain at weight 0; per Service: annotation kube-ipvs.io/drain-timeout")
	fs.IntVar(&c.MaxFrontends, "max-frontends-per-service", c.MaxFrontends, "at most this many virtual servers for one Service, so that no Service fills the sets every Service's frontends share (2^20 members); "+
		"one with more gets its ClusterIPs first, then load-balancer IPs and external IPs in the object's order (the same on every node), NodePorts last, and a TooManyFrontends Warning Event")
	fs.BoolVar(&c.Once, "once", c.Once, "sync once and exit (non-zero on failure)")
	fs.BoolVar(&c.DryRun, "dry-run", c.DryRun, "print the operations a sync would apply, one ipvsadm-style line each, and change nothing; needs neither root nor IPVS (without them it plans against an empty kernel)")
	fs.StringVar(&f.dryRunTable, "dry-run-table", f.dryRunTable, `with --dry-run: plan against the IPVS table saved in this file ("ipvsadm -Sn" or "kube-ipvs ipvsadm -Sn" output; "-": stdin) instead of this node's`)
	shimFlags(fs, c)
	conntrackFlags(fs, c)
	fs.Var(addrPortValue{&c.HealthzBindAddress, 10256, &f.healthzBare}, "healthz-bind-address", "IP:PORT of kube-proxy's health server: /healthz (fails when a change waits over twice the sync period, or the Node is being deleted) and /livez (empty: off)")
	fs.Var(addrPortValue{&c.MetricsBindAddress, 10249, &f.metricsBare}, "metrics-bind-address", "IP:PORT of kube-proxy's metrics server: Prometheus /metrics and /proxyMode (empty: off)")
	fs.BoolVar(&c.BindAddressHardFail, "bind-address-hard-fail", c.BindAddressHardFail, "exit when the health or metrics server cannot listen on its address (otherwise log it and try again every 5s)")
	fs.StringVar(&c.DebugAddress, "debug-address", c.DebugAddress, "IP:PORT of the debug pages kube-ipvs status and kube-ipvs diff read (empty: off); keep it on loopback")
	logFlags(fs, c)
	portFlags(fs, f)
	ignoredFlags(fs, f)
}

// portFlags are kube-proxy's deprecated --healthz-port and --metrics-port:
// 0 turns that server off; another port completes a bind address given as
// a bare IP (kube-proxy's addressFromDeprecatedFlags). Hidden, as
// kube-proxy hides them.
func portFlags(fs *pflag.FlagSet, f *files) {
	fs.Int32Var(&f.healthzPort, "healthz-port", 10256, "the health server's port; 0 turns it off (use --healthz-bind-address)")
	fs.Int32Var(&f.metricsPort, "metrics-port", 10249, "the metrics server's port; 0 turns it off (use --metrics-bind-address)")
	_ = fs.MarkHidden("healthz-port")
	_ = fs.MarkHidden("metrics-port")
	fs.Var(versionValue{&f.printVersion}, "version", "print the version and exit")
	fs.Lookup("version").NoOptDefVal = "true"
}

// withPort is kube-proxy's addressFromDeprecatedFlags: port 0 turns the
// server off; another port replaces the default one of an address given
// as a bare IP, and leaves an address given with its port alone.
func withPort(addr string, port int32, bare bool) string {
	if port == 0 {
		return ""
	}
	if ap, err := netip.ParseAddrPort(addr); err == nil && bare {
		return netip.AddrPortFrom(ap.Addr(), uint16(port)).String()
	}
	return addr
}

func clientFlags(fs *pflag.FlagSet, c *config.Config) {
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "kubeconfig file (default: in-cluster config)")
	fs.StringVar(&c.Master, "master", c.Master, "the API server's address (overrides the kubeconfig's)")
	fs.StringVar(&c.Client.ContentType, "kube-api-content-type", c.Client.ContentType, "content type of requests sent to the API server")
	fs.Float32Var(&c.Client.QPS, "kube-api-qps", c.Client.QPS, "queries per second to the API server")
	fs.Int32Var(&c.Client.Burst, "kube-api-burst", c.Client.Burst, "burst of queries to the API server")
	fs.BoolVar(&c.Client.Compression, "kube-api-compression", c.Client.Compression, "ask the API server to gzip its lists and watch streams: a quarter of the bytes of a start's list and of each change, for a little CPU on both sides (--kube-api-compression=false: identity)")
	fs.BoolVar(&c.Client.HTTP2, "kube-api-http2", c.Client.HTTP2, "talk HTTP/2 to the API server, one connection for all watches (--kube-api-http2=false: HTTP/1.1, a connection per watch, four per node)")
}

// ipvsFlags are kube-proxy's --ipvs-* flags; today's shorter names stay
// as deprecated aliases sharing the same value.
func ipvsFlags(fs *pflag.FlagSet, c *config.Config) {
	aliased(fs, (*schedulerValue)(&c.Scheduler), "ipvs-scheduler", "scheduler", "IPVS scheduler ("+model.SchedulerList()+"); per Service: annotation kube-ipvs.io/scheduler")
	aliased(fs, durationValue{&c.SyncPeriod}, "ipvs-sync-period", "sync-period", "rescan period: the kernel is read whole this often, beside the syncs, and what anyone else changed (drift) is repaired")
	aliased(fs, durationValue{&c.MinSyncPeriod}, "ipvs-min-sync-period", "min-sync-period", "minimum time between syncs; bursts of changes are coalesced")
	aliased(fs, durationValue{&c.Timeouts.TCP}, "ipvs-tcp-timeout", "tcp-timeout", "IPVS timeout for idle TCP connections (0: leave as is)")
	aliased(fs, durationValue{&c.Timeouts.TCPFin}, "ipvs-tcpfin-timeout", "tcpfin-timeout", "IPVS timeout for TCP connections after FIN (0: leave as is)")
	aliased(fs, durationValue{&c.Timeouts.UDP}, "ipvs-udp-timeout", "udp-timeout", "IPVS timeout for UDP flows (0: leave as is)")
	aliased(fs, (*boolValue)(&c.StrictARP), "ipvs-strict-arp", "strict-arp", "set arp_ignore=1 and arp_announce=2 so VIPs on kube-ipvs0 are not answered by every node (MetalLB layer 2 needs it)")
}

func shimFlags(fs *pflag.FlagSet, c *config.Config) {
	fs.BoolVar(&c.MasqueradeAll, "masquerade-all", c.MasqueradeAll, "masquerade every connection to a ClusterIP")
	fs.Int32Var(&c.MasqueradeBit, "iptables-masquerade-bit", c.MasqueradeBit, "the fwmark bit asking for SNAT, 0..31 (mark 1<<bit; 14 is kube-proxy's and kubelet's 0x4000)")
	fs.Var(prefixesValue{&c.ClusterCIDRs}, "cluster-cidr", "comma-separated pod CIDRs, at most one per family: connections to a ClusterIP from outside them are masqueraded")
	fs.Var(namedString{(*string)(&c.DetectLocalMode), "LocalMode"}, "detect-local-mode", "how pod traffic is told from the rest (connections to a ClusterIP from elsewhere are masqueraded): ClusterCIDR (--cluster-cidr), NodeCIDR (the Node's spec.podCIDRs), BridgeInterface (--pod-bridge-interface) or InterfaceNamePrefix (--pod-interface-name-prefix)")
	fs.StringVar(&c.BridgeInterface, "pod-bridge-interface", c.BridgeInterface, "the pods' bridge, for --detect-local-mode=BridgeInterface")
	fs.StringVar(&c.InterfaceNamePrefix, "pod-interface-name-prefix", c.InterfaceNamePrefix, "the pods' interface name prefix, for --detect-local-mode=InterfaceNamePrefix")
	fs.StringVar((*string)(&c.VIPBinding), "vip-binding", string(c.VIPBinding), "how a VIP is made the node's: local-route (a local route through kube-ipvs0, as `ip route show table local dev kube-ipvs0` lists: binding costs the same at any number of Services) or address (on kube-ipvs0, as kube-proxy does and `ip addr show kube-ipvs0` lists: each bind costs more the more there are); VIPs bound either way are read, kept and unbound alike")
	fs.StringVar((*string)(&c.IptablesBackend), "iptables-backend", string(c.IptablesBackend), "nft or legacy (default: the one holding more rules on this node)")
}

// conntrackFlags are read and checked; the agent does not set the
// nf_conntrack sysctls from them yet.
func conntrackFlags(fs *pflag.FlagSet, c *config.Config) {
	ct := &c.Conntrack
	fs.Var(int32Value{&ct.MaxPerCore}, "conntrack-max-per-core", "conntrack entries per CPU core (0: leave the limit and --conntrack-min alone)")
	fs.Var(int32Value{&ct.Min}, "conntrack-min", "conntrack entries at least, whatever --conntrack-max-per-core gives")
	fs.Var(durationValue{&ct.TCPEstablished}, "conntrack-tcp-timeout-established", "conntrack idle timeout of established TCP connections (0: leave as is)")
	fs.Var(durationValue{&ct.TCPCloseWait}, "conntrack-tcp-timeout-close-wait", "conntrack timeout of TCP connections in CLOSE_WAIT")
	fs.BoolVar(&ct.TCPBeLiberal, "conntrack-tcp-be-liberal", ct.TCPBeLiberal, "set nf_conntrack_tcp_be_liberal")
	fs.Var(durationValue{&ct.UDP}, "conntrack-udp-timeout", "conntrack idle timeout of unreplied UDP flows (0: leave as is)")
	fs.Var(durationValue{&ct.UDPStream}, "conntrack-udp-timeout-stream", "conntrack idle timeout of assured UDP flows (0: leave as is)")
}

// ignoredFlagNames are kube-proxy flags that mean nothing to kube-ipvs.
// They are accepted, with kube-proxy's types (a boolean takes no value), so
// a kube-proxy command line starts, and named in one warning.
var ignoredFlagNames = []string{
	"profiling", "show-hidden-metrics-for-version", "feature-gates", "oom-score-adj",
	"config-sync-period", "iptables-sync-period", "iptables-min-sync-period", "iptables-localhost-nodeports",
	"vmodule", "log-flush-frequency", "log-json-info-buffer-size", "log-json-split-stream",
	"log-text-info-buffer-size", "log-text-split-stream",
}

const ignoredUsage = "kube-proxy's; no meaning in kube-ipvs (ignored with a warning)"

func ignoredFlags(fs *pflag.FlagSet, f *files) {
	fs.Var(ipValue{&f.bindAddress}, "bind-address", "kube-proxy's hint of this node's primary IP; kube-ipvs reads the Node's addresses (a specific IP is warned about)")
	fs.Bool("profiling", false, ignoredUsage)
	fs.String("show-hidden-metrics-for-version", "", ignoredUsage)
	fs.Var(mapStringBool{}, "feature-gates", ignoredUsage)
	fs.Int32("oom-score-adj", -999, ignoredUsage)
	fs.Duration("config-sync-period", 15*time.Minute, ignoredUsage)
	fs.Duration("iptables-sync-period", 30*time.Second, ignoredUsage)
	fs.Duration("iptables-min-sync-period", time.Second, ignoredUsage)
	fs.Bool("iptables-localhost-nodeports", true, ignoredUsage)
	fs.Var(vmoduleValue{}, "vmodule", ignoredUsage)
	fs.Duration("log-flush-frequency", 5*time.Second, ignoredUsage)
	fs.Var(quantityValue{}, "log-json-info-buffer-size", ignoredUsage)
	fs.Bool("log-json-split-stream", false, ignoredUsage)
	fs.Var(quantityValue{}, "log-text-info-buffer-size", ignoredUsage)
	fs.Bool("log-text-split-stream", false, ignoredUsage)
	for _, name := range append([]string{"bind-address"}, ignoredFlagNames...) {
		_ = fs.MarkHidden(name)
	}
}

// ownershipFlags bind what widens or narrows the ownership predicate; the
// agent and cleanup must read them alike, or cleanup would delete what the
// agent leaves alone.
func ownershipFlags(fs *pflag.FlagSet, c *config.Config) {
	fs.Var(portRangeValue{&c.NodePortRange}, "nodeport-range", "the API server's --service-node-port-range (default 30000-32767): a virtual server on a node address with a port in it is a NodePort, kube-proxy's left over and removed when no Service names it; one whose port a Service names as its nodePort is taken over whatever the range; one outside it that no Service names is left alone")
	aliased(fs, &prefixListValue{p: &c.ExcludeCIDRs}, "ipvs-exclude-cidrs", "exclude-cidrs", "comma-separated CIDRs where other tools keep virtual servers (kube-proxy's ipvs.excludeCIDRs): a virtual server or address there is deleted only if kube-ipvs recorded it as its own; Services there are still served")
}

func logFlags(fs *pflag.FlagSet, c *config.Config) {
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "error, warn, info (-v=0), debug (-v=4) or a klog verbosity")
	fs.VarP(verbosityValue{&c.LogLevel}, "v", "v", "klog verbosity, as kube-proxy's: a line logged at V(n) shows when n <= v (2: each failed operation; 3: each Service skipped; 4: each sync, kernel read and operation)")
	aliased(fs, logFormatValue{&c.LogFormat}, "logging-format", "log-format", "text or json")
}

// aliased defines a flag and a deprecated alias sharing its value; using
// the alias prints one line naming the new flag.
func aliased(fs *pflag.FlagSet, v pflag.Value, name, alias, usage string) {
	fs.Var(v, name, usage)
	fs.Var(v, alias, usage)
	if b, ok := v.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		fs.Lookup(name).NoOptDefVal, fs.Lookup(alias).NoOptDefVal = "true", "true"
	}
	_ = fs.MarkDeprecated(alias, "use --"+name)
}

// newLogger builds the zap logger the flags ask for, writing to stderr.
func newLogger(c config.Config) (*zap.Logger, error) {
	return newLoggerTo(c, zapcore.Lock(os.Stderr))
}

// durationValue is a duration flag whose error says what is wrong in
// words: a bare number is missing its unit.
type durationValue struct{ p *time.Duration }

func (v durationValue) Set(s string) error {
	d, err := config.ParseDuration(s)
	if err != nil {
		return err
	}
	*v.p = d
	return nil
}
func (v durationValue) String() string {
	if v.p == nil {
		return ""
	}
	return v.p.String()
}
func (durationValue) Type() string { return "duration" }

// prefixesValue is a comma-separated CIDR list; the last use of the flag
// wins.
type prefixesValue struct{ p *[]netip.Prefix }

func (v prefixesValue) Set(s string) error {
	ps, err := config.ParsePrefixes(strings.Split(s, ","))
	if err != nil {
		return err
	}
	*v.p = ps
	return nil
}
func (v prefixesValue) String() string {
	if v.p == nil {
		return ""
	}
	var out []string
	for _, p := range *v.p {
		out = append(out, p.String())
	}
	return strings.Join(out, ",")
}
func (prefixesValue) Type() string { return "string" }

// prefixListValue is a comma-separated CIDR list that, as kube-proxy's
// string slices do, replaces the default at its first use and appends at
// the next.
type prefixListValue struct {
	p   *[]netip.Prefix
	set bool
}

func (v *prefixListValue) Set(s string) error {
	ps, err := config.ParsePrefixes(strings.Split(s, ","))
	if err != nil {
		return err
	}
	if v.set {
		ps = append(*v.p, ps...)
	}
	*v.p, v.set = ps, true
	return nil
}
func (v *prefixListValue) String() string { return prefixesValue{v.p}.String() }
func (*prefixListValue) Type() string     { return "stringSlice" }

// stringListValue is a comma-separated list checked by a function; as
// kube-proxy's string slices, its first use replaces the default and the
// next ones append.
type stringListValue struct {
	p     *[]string
	check func([]string) ([]string, error)
	given *[]string // what the flag was given so far
}

func listValue(p *[]string, check func([]string) ([]string, error)) stringListValue {
	return stringListValue{p, check, new([]string)}
}

func (v stringListValue) Set(s string) error {
	in := slices.Clone(*v.given)
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			in = append(in, f)
		}
	}
	out, err := v.check(in)
	if err != nil {
		return err
	}
	*v.p, *v.given = out, in
	return nil
}
func (v stringListValue) String() string {
	if v.p == nil {
		return ""
	}
	return strings.Join(*v.p, ",")
}
func (stringListValue) Type() string { return "stringSlice" }

// int32Value is an int flag that takes what kube-proxy's int32 flag of
// the same name takes.
type int32Value struct{ p *int }

func (v int32Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, 32)
	if err != nil {
		return err
	}
	*v.p = int(n)
	return nil
}
func (v int32Value) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.Itoa(*v.p)
}
func (int32Value) Type() string { return "int32" }

type portRangeValue struct{ p *model.PortRange }

func (v portRangeValue) Set(s string) error {
	r, err := model.ParsePortRange(s)
	if err != nil {
		return err
	}
	*v.p = r
	return nil
}
func (v portRangeValue) String() string {
	if v.p == nil {
		return ""
	}
	return fmt.Sprintf("%d-%d", v.p.First, v.p.Last)
}
func (portRangeValue) Type() string { return "FIRST-LAST" }

type schedulerValue model.Scheduler

func (v *schedulerValue) Set(s string) error { *v = schedulerValue(s); return nil }
func (v *schedulerValue) String() string     { return string(*v) }
func (*schedulerValue) Type() string         { return "string" }

type boolValue bool

func (v *boolValue) Set(s string) error {
	switch strings.ToLower(s) {
	case "true", "1", "t":
		*v = true
	case "false", "0", "f":
		*v = false
	default:
		return fmt.Errorf("want true or false")
	}
	return nil
}
func (v *boolValue) String() string { return fmt.Sprint(bool(*v)) }
func (*boolValue) Type() string     { return "bool" }
func (*boolValue) IsBoolFlag() bool { return true }

// addrPortValue is a listener address; a bare IP gets the default port,
// as kube-proxy's flags do. Empty turns the listener off.
type addrPortValue struct {
	p    *string
	port uint16
	bare *bool // set when given as a bare IP
}

func (v addrPortValue) Set(s string) error {
	a, err := netip.ParseAddr(s)
	*v.bare = err == nil
	if err == nil {
		s = netip.AddrPortFrom(a, v.port).String()
	} else if _, err := netip.ParseAddrPort(s); s != "" && err != nil {
		return fmt.Errorf("want IP:PORT or IP (port %d), or empty to turn it off", v.port)
	}
	*v.p = s
	return nil
}
func (v addrPortValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}
func (addrPortValue) Type() string { return "ipport" }

type verbosityValue struct{ level *string }

func (v verbosityValue) Set(s string) error {
	var n uint32
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil || fmt.Sprint(n) != s || n > 127 {
		return fmt.Errorf("want a whole number from 0 to 127")
	}
	*v.level = config.LogLevelOfVerbosity(n)
	return nil
}
func (v verbosityValue) String() string {
	if v.level == nil {
		return "0"
	}
	n, _ := config.VerbosityOfLogLevel(*v.level)
	return fmt.Sprint(n)
}
func (verbosityValue) Type() string { return "Level" }

type logFormatValue struct{ p *string }

func (v logFormatValue) Set(s string) error {
	f, err := config.LogFormatOf(s)
	if err != nil {
		return fmt.Errorf("want text or json")
	}
	*v.p = f
	return nil
}
func (v logFormatValue) String() string {
	if v.p == nil {
		return ""
	}
	return map[string]string{"console": "text"}[*v.p] + map[string]string{"json": "json"}[*v.p]
}
func (logFormatValue) Type() string { return "string" }

// namedString is a string flag under kube-proxy's name for its type.
type namedString struct {
	p   *string
	typ string
}

func (v namedString) Set(s string) error { *v.p = s; return nil }
func (v namedString) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}
func (v namedString) Type() string { return v.typ }

// ipValue is an IP address, as kube-proxy's --bind-address takes it.
type ipValue struct{ p *string }

func (v ipValue) Set(s string) error {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("want an IP address")
	}
	*v.p = a.String()
	return nil
}
func (v ipValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}
func (ipValue) Type() string { return "ip" }

// mapStringBool checks kube-proxy's --feature-gates syntax (A=true,B=false).
type mapStringBool struct{}

func (mapStringBool) Set(s string) error {
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if _, err := strconv.ParseBool(strings.TrimSpace(v)); !ok || k == "" || err != nil {
			return fmt.Errorf("want NAME=true|false pairs, comma-separated, got %q", kv)
		}
	}
	return nil
}
func (mapStringBool) String() string { return "" }
func (mapStringBool) Type() string   { return "mapStringBool" }

// vmoduleValue checks klog's --vmodule syntax (pattern=N,...).
type vmoduleValue struct{}

func (vmoduleValue) Set(s string) error {
	for _, pv := range strings.Split(s, ",") {
		p, n, ok := strings.Cut(strings.TrimSpace(pv), "=")
		if _, err := strconv.ParseUint(n, 10, 32); !ok || p == "" || err != nil {
			return fmt.Errorf("want pattern=N pairs, comma-separated, got %q", pv)
		}
	}
	return nil
}
func (vmoduleValue) String() string { return "" }
func (vmoduleValue) Type() string   { return "moduleSpec" }

// quantityValue checks a resource quantity (512, 2Ki, 5M).
type quantityValue struct{}

func (quantityValue) Set(s string) error {
	if _, err := resource.ParseQuantity(s); err != nil {
		return fmt.Errorf("want a quantity such as 512, 2Ki or 5M")
	}
	return nil
}
func (quantityValue) String() string { return "0" }
func (quantityValue) Type() string   { return "quantity" }

// versionValue is kube-proxy's --version: true or raw prints the version
// and exits.
type versionValue struct{ p *bool }

func (v versionValue) Set(s string) error {
	switch strings.ToLower(s) {
	case "true", "raw":
		*v.p = true
	case "false":
		*v.p = false
	default:
		return fmt.Errorf("want true, raw or false (kube-ipvs does not set a reported version)")
	}
	return nil
}
func (v versionValue) String() string { return fmt.Sprint(*v.p) }
func (versionValue) Type() string     { return "version" }
