package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/linux"
	"github.com/kube-ipvs/kube-ipvs/internal/reconciler"
)

// runCleanup removes everything the agent owns and nothing else.
func runCleanup(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := config.Default()
	fs := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	ownershipFlags(fs, &c)
	kubeProxy := fs.Bool("kube-proxy", false, "also remove what kube-proxy's IPVS mode left (its KUBE-* chains and ipsets; its virtual servers on kube-ipvs0 go anyway)")
	kubeProxyOnly := fs.Bool("kube-proxy-only", false, "remove only kube-proxy's KUBE-* chains and ipsets, nothing of kube-ipvs: safe while the agent runs (migration without a gap)")
	logFlags(fs, &c)
	if !parseFlags(fs, args, &c, stderr) {
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
