package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
)

// agentOptions is the agent's command line resolved: the configuration,
// the file it came from, and what to warn about once a logger exists.
type agentOptions struct {
	config.Config
	files
	base       config.KubeProxyConfiguration // the file read, or kube-proxy's defaults
	configData []byte                        // the file's bytes as read, to tell when it changes
	lenient    []string                      // what the strict decoding refused in the file
	ignored    []string                      // settings with no meaning here
	overridden []string                      // flags that override the file
}

// parseAgent reads the agent's command line the way kube-proxy does: the
// file (--config), if any, then the flags given explicitly on top of it.
// It returns the exit code to stop with (0 for --help), or -1 to go on.
func parseAgent(args []string, stdout, stderr io.Writer) (agentOptions, int) {
	var o agentOptions
	// First pass: check the flags and learn --config, printing nothing.
	probe := config.Default()
	fs := newFlagSet("agent", func(fs *pflag.FlagSet) { agentFlags(fs, &probe, &o.files) })
	fs.SetOutput(io.Discard)
	if code := parseArgs(fs, args, stdout, stderr); code >= 0 {
		return o, code
	}
	if o.printVersion { // kube-proxy's --version, before anything is read
		fmt.Fprintln(stdout, "kube-ipvs", version)
		return o, 0
	}
	o.Config, o.base = config.Default(), config.DefaultKubeProxy()
	if o.files.config != "" {
		if err := o.readFile(); err != nil {
			fmt.Fprintf(stderr, "kube-ipvs agent: --config %s: %s\n", o.files.config, oneLine(err))
			return o, 2
		}
	}
	// Second pass onto the file's settings: only flags given explicitly
	// change them. Deprecated aliases say so here, once.
	fs = newFlagSet("agent", func(fs *pflag.FlagSet) { agentFlags(fs, &o.Config, &o.files) })
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(stderr, "kube-ipvs agent: %s\n", flagError(fs, err))
		return o, 2
	}
	o.noteFlags(fs)
	if fs.Changed("healthz-port") {
		o.HealthzBindAddress = withPort(o.HealthzBindAddress, o.healthzPort, o.healthzBare)
	}
	if fs.Changed("metrics-port") {
		o.MetricsBindAddress = withPort(o.MetricsBindAddress, o.metricsPort, o.metricsBare)
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintln(stderr, invalid("agent", err))
		return o, 2
	}
	if o.dryRunTable != "" && !o.DryRun {
		fmt.Fprintln(stderr, "kube-ipvs agent: --dry-run-table is the table a --dry-run plans against: give --dry-run too")
		return o, 2
	}
	return o, -1
}

// readFile decodes --config onto the defaults.
func (o *agentOptions) readFile() error {
	data, err := os.ReadFile(o.files.config)
	if err != nil {
		return err
	}
	kp, lenient, err := config.DecodeKubeProxy(data)
	if err != nil {
		return err
	}
	o.base, o.configData, o.lenient = kp, data, lenient
	o.ignored, err = kp.ApplyTo(&o.Config)
	return err
}

// noteFlags records the explicit flags worth a warning: kube-proxy flags
// that mean nothing here, and flags overriding the file. kube-proxy itself
// ignores most flags when --config is given (all but --hostname-override,
// --master and the logging flags); kube-ipvs lets them win, and says so.
func (o *agentOptions) noteFlags(fs *pflag.FlagSet) {
	notOverriding := []string{"config", "write-config-to", "version", "bind-address", "hostname-override", "master", "v", "log-level", "logging-format", "log-format",
		"manifests", "once", "dry-run", "dry-run-table", "drain-timeout", "max-frontends-per-service", "debug-address", "service-proxy-name", "iptables-backend", "ipv4", "ipv6", "nodeport-range"}
	fs.Visit(func(f *pflag.Flag) {
		switch {
		case slices.Contains(ignoredFlagNames, f.Name):
			o.ignored = append(o.ignored, "--"+f.Name)
		case o.files.config != "" && !slices.Contains(notOverriding, f.Name):
			o.overridden = append(o.overridden, "--"+f.Name)
		}
	})
}

// warn logs, once each, what the configuration ignores or overrides.
func (o agentOptions) warn(log *zap.Logger) {
	if len(o.lenient) > 0 {
		log.Warn("the config file has fields kube-proxy v1.37 does not know, or a key given twice: they are ignored (the last of a repeated key wins), as kube-proxy's lenient decoding ignores them",
			zap.String("config", o.files.config), zap.Strings("unknown", o.lenient))
	}
	if len(o.ignored) > 0 {
		log.Warn("these kube-proxy settings have no meaning in kube-ipvs and are ignored (iptables-, nftables- and Windows-only, or left to the host)",
			zap.Strings("ignored", o.ignored))
	}
	if ip := o.nodeIPHint(); ip != "" {
		log.Warn("bindAddress names this node's primary IP to kube-proxy; kube-ipvs takes it from the Node's addresses (nodePortAddresses: primary) and ignores it",
			zap.String("bindAddress", ip))
	}
	if len(o.overridden) > 0 {
		log.Info("flags override the config file (kube-proxy would ignore them)", zap.String("config", o.files.config), zap.Strings("flags", o.overridden))
	}
	if len(o.ExternalIPCIDRs) == 0 {
		log.Warn("--external-ip-cidrs is unset: a Service in any namespace may have its spec.externalIPs served on this node (CVE-2020-8554); set it, or enable the API server's DenyServiceExternalIPs admission plugin cluster-wide")
	}
	if len(o.NodePortAddresses) == 0 {
		log.Warn("nodePortAddresses is unset; NodePort connections will be accepted on all local IPs. Consider using `--nodeport-addresses primary`")
	}
}

// nodeIPHint is the specific IP --bind-address (or the file's bindAddress)
// gives as the node's primary IP, or "". kube-proxy uses it for its node IP
// (cmd/kube-proxy/app/server.go, detectNodeIPs), which kube-ipvs reads from
// the Node instead; an unspecified address (0.0.0.0, ::) only picks the
// family of the listeners' defaults, which the file's defaults honour.
func (o agentOptions) nodeIPHint() string {
	for _, s := range []string{o.files.bindAddress, o.base.BindAddress} {
		if a, err := netip.ParseAddr(s); err == nil && !a.IsUnspecified() {
			return a.String()
		}
	}
	return ""
}

// writeConfigAndExit writes the effective configuration and returns the
// exit code.
func (o agentOptions) writeConfigAndExit(log *zap.Logger) int {
	if err := o.writeConfig(); err != nil {
		log.Error("write configuration", zap.Error(err))
		return 1
	}
	log.Info("wrote configuration", zap.String("file", o.writeConfigTo))
	return 0
}

// writeConfig writes the effective configuration, as kube-proxy's
// --write-config-to does.
func (o agentOptions) writeConfig() error {
	data, err := config.EncodeKubeProxy(config.FromConfig(o.Config, o.base))
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.files.writeConfigTo, data, 0o644); err != nil {
		return fmt.Errorf("write configuration: %w", err)
	}
	return nil
}

func newFlagSet(name string, bind func(*pflag.FlagSet)) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.Usage = func() {}
	fs.SortFlags = false
	bind(fs)
	return fs
}

// parseArgs parses a command's flags; -h/--help prints them to stdout.
// It returns the exit code to stop with, or -1 to go on.
func parseArgs(fs *pflag.FlagSet, args []string, stdout, stderr io.Writer) int {
	if code := parseFlags(fs, args, stdout, stderr); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kube-ipvs %s: unexpected argument %q%s\n", fs.Name(), fs.Arg(0), strayHint(fs, args))
		return 2
	}
	return -1
}

// parseFlags is parseArgs for a command that takes arguments after its
// flags.
func parseFlags(fs *pflag.FlagSet, args []string, stdout, stderr io.Writer) int {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		fmt.Fprintf(stdout, "Usage: kube-ipvs %s [flags]\n\nFlags:\n%s", fs.Name(), fs.FlagUsages())
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "kube-ipvs %s: %s\n", fs.Name(), flagError(fs, err))
		return 2
	}
	return -1
}

// flagError is one line: what is wrong with which flag, and a hint.
func flagError(fs *pflag.FlagSet, err error) string {
	var inv *pflag.InvalidValueError
	var missing *pflag.NotExistError
	switch {
	case errors.As(err, &inv):
		f := inv.GetFlag()
		return fmt.Sprintf("--%s=%s: %s", f.Name, inv.GetValue(), causeOf(f.Value.Type(), inv.Unwrap()))
	case errors.As(err, &missing):
		return err.Error() + unknownHint(fs, missing)
	}
	return err.Error() + "; see --help"
}

// causeOf replaces the strconv messages of pflag's numbers and booleans
// with what the value should look like.
func causeOf(typ string, err error) string {
	switch typ {
	case "int32":
		return "want a whole number"
	case "float32":
		return "want a number"
	case "bool":
		return "want true or false"
	}
	return oneLine(err)
}

// unknownHint helps with the unknown flags a kube-proxy or an older
// kube-ipvs command line may hold.
func unknownHint(fs *pflag.FlagSet, missing *pflag.NotExistError) string {
	name := missing.GetSpecifiedName()
	if short := missing.GetSpecifiedShortnames(); len(short) > 1 {
		name = strings.SplitN(short, "=", 2)[0] // -kubeconfig: a Go-flag habit
	}
	switch {
	case name == "cleanup":
		return ` (kube-proxy's --cleanup is "kube-ipvs cleanup --kube-proxy")`
	case name == "init-only":
		return " (kube-ipvs prepares the node at every start: run the agent)"
	case len(name) > 1 && fs.Lookup(name) != nil:
		return fmt.Sprintf(" (long flags take two dashes: --%s)", name)
	}
	return "; see --help"
}

// strayHint catches a boolean given its value as a separate word
// (--masquerade-all true), which pflag reads as an argument.
func strayHint(fs *pflag.FlagSet, args []string) string {
	for i, a := range args[:len(args)-1] {
		name := strings.TrimPrefix(a, "--")
		if f := fs.Lookup(name); f != nil && f.NoOptDefVal != "" && args[i+1] == fs.Arg(0) {
			return fmt.Sprintf(" (a boolean takes its value with =: --%s=%s)", name, fs.Arg(0))
		}
	}
	return "; see --help"
}

// invalid reports Validate's problems: one on its line, several listed.
func invalid(cmd string, err error) string {
	if msg := err.Error(); !strings.Contains(msg, "\n") {
		return fmt.Sprintf("kube-ipvs %s: %s", cmd, msg)
	}
	return fmt.Sprintf("kube-ipvs %s: invalid configuration:\n%s", cmd, indent(err.Error()))
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }
