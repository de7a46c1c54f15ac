package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/linux"
	"github.com/kube-ipvs/kube-ipvs/internal/reconciler"
)

func cleanupFlags(fs *pflag.FlagSet) (kubeProxy, kubeProxyOnly, shimOnly *bool) {
	return fs.Bool("kube-proxy", false, "also remove what kube-proxy's IPVS mode left (its KUBE-* chains and ipsets; its virtual servers on kube-ipvs0 go anyway)"),
		fs.Bool("kube-proxy-only", false, "remove only kube-proxy's KUBE-* chains and ipsets, nothing of kube-ipvs: safe while the agent runs (migration without a gap)"),
		fs.Bool("shim-only", false, "remove only kube-ipvs' own KUBE-IPVS-* chains and ipsets, not the virtual servers or kube-ipvs0: for a node handed back to a kube-proxy that already serves them (no gap)")
}

// runCleanup removes everything the agent owns and nothing else.
func runCleanup(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := config.Default()
	var kubeProxy, kubeProxyOnly, shimOnly *bool
	fs := newFlagSet("cleanup", func(fs *pflag.FlagSet) {
		ownershipFlags(fs, &c)
		kubeProxy, kubeProxyOnly, shimOnly = cleanupFlags(fs)
		logFlags(fs, &c)
	})
	fs.SetOutput(stderr)
	if code := parseArgs(fs, args, stdout, stderr); code >= 0 {
		return code
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintln(stderr, invalid("cleanup", err))
		return 2
	}
	if *kubeProxyOnly && *shimOnly {
		fmt.Fprintln(stderr, "kube-ipvs cleanup: --kube-proxy-only and --shim-only exclude each other")
		return 2
	}
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
	if *shimOnly {
		ops, err := reconciler.CleanupShim(ctx, dp)
		for _, op := range ops {
			fmt.Fprintln(stdout, op)
		}
		if err != nil {
			log.Error("cleanup incomplete", zap.Error(err))
			return 1
		}
		return 0
	}
	if *kubeProxyOnly {
		if err := dp.DeleteKubeProxyShim(ctx); err != nil {
			log.Error("cleanup incomplete", zap.Error(err))
			return 1
		}
		return 0
	}
	ops, err := reconciler.Cleanup(ctx, dp, reconciler.CleanupOptions{
		NodeAddrs: hostAddrs(log), NodePortRange: c.NodePortRange, Exclude: c.ExcludeCIDRs, KubeProxy: *kubeProxy,
	})
	for _, op := range ops {
		fmt.Fprintln(stdout, op)
	}
	if err != nil {
		log.Error("cleanup incomplete", zap.Error(err))
		return 1
	}
	return 0
}
