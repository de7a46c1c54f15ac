package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/agent"
	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/linux"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/reconciler"
)

// cleanupOptions is cleanup's command line resolved.
type cleanupOptions struct {
	config.Config
	configFile                         string
	lenient                            []string // what the strict decoding refused in the file
	kubeProxy, kubeProxyOnly, shimOnly bool
}

// parseCleanup reads cleanup's command line as the agent reads its own:
// the --config file first (the agent's, so that cleanup owns what the
// agent owns: ipvs.excludeCIDRs and the logging settings come from it),
// then the flags given explicitly on top. It returns the exit code to stop
// with, or -1 to go on.
func parseCleanup(args []string, stdout, stderr io.Writer) (cleanupOptions, int) {
	var o cleanupOptions
	bind := func(c *config.Config) func(*pflag.FlagSet) {
		return func(fs *pflag.FlagSet) {
			fs.StringVar(&o.configFile, "config", "", "the agent's KubeProxyConfiguration file: its ipvs.excludeCIDRs and logging settings apply; flags given explicitly override it")
			ownershipFlags(fs, c)
			fs.BoolVar(&o.kubeProxy, "kube-proxy", false, "also remove what kube-proxy's IPVS mode left (its KUBE-* chains and ipsets; its virtual servers on kube-ipvs0 go anyway)")
			fs.BoolVar(&o.kubeProxyOnly, "kube-proxy-only", false, "remove only kube-proxy's KUBE-* chains and ipsets, nothing of kube-ipvs: safe while the agent runs (migration without a gap)")
			fs.BoolVar(&o.shimOnly, "shim-only", false, "remove only kube-ipvs' own KUBE-IPVS-* chains and ipsets, and the VIPs it bound as local routes (the default --vip-binding), not the virtual servers or kube-ipvs0's addresses: for a node handed back to a kube-proxy that already serves them (no gap)")
			logFlags(fs, c)
		}
	}
	probe := config.Default()
	fs := newFlagSet("cleanup", bind(&probe))
	fs.SetOutput(stderr)
	if code := parseArgs(fs, args, stdout, stderr); code >= 0 {
		return o, code
	}
	o.Config = config.Default()
	if o.configFile != "" {
		if err := o.readFile(); err != nil {
			fmt.Fprintf(stderr, "kube-ipvs cleanup: --config %s: %s\n", o.configFile, oneLine(err))
			return o, 2
		}
	}
	fs = newFlagSet("cleanup", bind(&o.Config))
	fs.SetOutput(io.Discard) // the first pass has said what there is to say
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(stderr, "kube-ipvs cleanup: %s\n", flagError(fs, err))
		return o, 2
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintln(stderr, invalid("cleanup", err))
		return o, 2
	}
	if o.kubeProxyOnly && o.shimOnly {
		fmt.Fprintln(stderr, "kube-ipvs cleanup: --kube-proxy-only and --shim-only exclude each other")
		return o, 2
	}
	return o, -1
}

// readFile decodes --config onto the defaults. Its mode is not cleanup's
// business: cleanup removes what kube-ipvs programmed, whatever the file
// says kube-proxy would run.
func (o *cleanupOptions) readFile() error {
	data, err := os.ReadFile(o.configFile)
	if err != nil {
		return err
	}
	kp, lenient, err := config.DecodeKubeProxy(data)
	if err != nil {
		return err
	}
	o.lenient = lenient
	if _, err := kp.ApplyTo(&o.Config); err != nil {
		return err
	}
	o.ProxyMode = config.ProxyModeIPVS
	return nil
}

// runCleanup removes everything the agent owns and nothing else.
func runCleanup(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, code := parseCleanup(args, stdout, stderr)
	if code >= 0 {
		return code
	}
	c := o.Config
	log, err := newLogger(c)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	dp, err := linux.New(linux.Options{Logger: log})
	if err != nil {
		log.Error("open dataplane", zap.Error(err))
		return 1
	}
	defer dp.Close()
	if len(o.lenient) > 0 {
		log.Warn("the config file has fields kube-proxy v1.37 does not know, or a key given twice: they are ignored",
			zap.String("config", o.configFile), zap.Strings("unknown", o.lenient))
	}
	var ops []model.Op
	switch {
	case o.shimOnly:
		ops, err = reconciler.CleanupShim(ctx, dp)
		if err == nil {
			err = deleteLocalRoutes(ctx, dp, stdout)
		}
	case o.kubeProxyOnly:
		err = dp.DeleteKubeProxyShim(ctx)
	default:
		ops, err = reconciler.Cleanup(ctx, dp, reconciler.CleanupOptions{
			NodeAddrs: agent.HostAddrs(log), NodePortRange: c.NodePortRange, Exclude: c.ExcludeCIDRs, KubeProxy: o.kubeProxy,
		})
	}
	for _, op := range ops {
		fmt.Fprintln(stdout, op)
	}
	if err != nil {
		log.Error("cleanup incomplete", zap.Error(err))
		return 1
	}
	return 0
}

// deleteLocalRoutes removes the VIPs the agent bound as local routes,
// one line each on stdout: a kube-proxy that serves the node has bound
// each live VIP as an address, and a route left behind would keep a VIP
// the node's after kube-proxy unbinds it.
func deleteLocalRoutes(ctx context.Context, dp *linux.Dataplane, stdout io.Writer) error {
	gone, err := dp.DeleteLocalRoutes(ctx)
	for _, a := range gone {
		fmt.Fprintf(stdout, "ip route del local %s dev %s table local\n", a, dataplane.LinkName)
	}
	return err
}
