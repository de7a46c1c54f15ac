// Package agent assembles the node agent from one configuration and runs
// it: the source, the reconciler on a dataplane, the runner that drives
// it, the rescan, the health tracker and health-check ports, the
// listeners (health, metrics, debug pages) and the metrics registry. It
// also makes the decisions that need the running node: its name, its host
// addresses, waiting for its pod CIDRs. cmd/kube-ipvs parses flags and
// files into a config.Config and calls Run.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/linux"
	"github.com/kube-ipvs/kube-ipvs/internal/reconciler"
)

// Options are what one run of the agent is given beyond its configuration.
type Options struct {
	Config config.Config
	// DryRunTable is the table saved by `ipvsadm -Sn` a dry run plans
	// against ("-": read from Stdin); empty: this node's kernel.
	DryRunTable string
	Stdin       io.Reader
	// Stdout is where a dry run prints its operations.
	Stdout  io.Writer
	Log     *zap.Logger
	Version string
	// Kernel, when set, is the dataplane to run on (a fake, in tests that
	// follow the whole configuration path); nil opens this node's.
	Kernel dataplane.Dataplane
}

// Run runs the agent until ctx ends, or once with --once or --dry-run.
func Run(ctx context.Context, opt Options) error {
	if opt.Log == nil {
		opt.Log = zap.NewNop()
	}
	if opt.Stdout == nil {
		opt.Stdout = io.Discard
	}
	node := NodeName(opt.Config.HostnameOverride)
	opt.Log.Info("starting", zap.String("version", opt.Version), zap.String("node", node))
	dp := opt.Kernel
	if dp == nil {
		var err error
		if dp, err = openKernel(ctx, opt); err != nil {
			return fmt.Errorf("open dataplane: %w", err)
		}
		defer dp.Close()
	}
	a, err := assemble(opt, node, dp)
	if err != nil {
		return err
	}
	defer a.close()
	if err := a.rec.Init(ctx); err != nil {
		return fmt.Errorf("prepare node: %w", err)
	}
	if a.c.Once || a.c.DryRun {
		return once(ctx, a.src, a.rec)
	}
	return a.run(ctx)
}

// openKernel opens the kernel the agent programs, or the one a dry run
// plans against.
func openKernel(ctx context.Context, opt Options) (dataplane.Dataplane, error) {
	if opt.Config.DryRun {
		stdin := opt.Stdin
		if stdin == nil {
			stdin = os.Stdin
		}
		return dryRunKernel(ctx, opt.Config, opt.DryRunTable, stdin, opt.Log)
	}
	return linux.New(KernelOptions(opt.Config, opt.Log))
}

// KernelOptions are the kernel settings the configuration asks for beyond
// the table: strict ARP, how VIPs are bound, the iptables flavour,
// conntrack tuning.
func KernelOptions(c config.Config, log *zap.Logger) linux.Options {
	return linux.Options{Logger: log, StrictARP: c.StrictARP, LocalRoutes: c.VIPBinding == config.VIPLocalRoute,
		IptablesBackend: c.IptablesBackend, Conntrack: c.Conntrack}
}

// run serves the listeners, waits for the source's initial state (and in
// NodeCIDR mode the Node's pod CIDRs), then runs the rescan and
// the sync loop until ctx ends or a listener fails hard.
func (a *agent) run(ctx context.Context) error {
	parent := ctx
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	a.follow(ctx)
	serveAll(ctx, fail, a.endpoints(), a.log)
	a.hz.Start()
	if err := a.ready(ctx); err != nil {
		return err
	}
	go a.rescan().Run(ctx)
	err := a.syncLoop(ctx).Run(ctx)
	if parent.Err() == nil && ctx.Err() != nil {
		return context.Cause(ctx) // a listener failed hard
	}
	return err
}

// once waits for the source's initial state, then runs one full sync.
func once(ctx context.Context, src *input, rec *reconciler.Reconciler) error {
	listed := listingGC(os.Getenv)
	loadErr := src.load(ctx)
	listed()
	if loadErr != nil && !src.store.Synced() {
		return loadErr
	}
	_, err := rec.Sync(ctx, true)
	return errors.Join(loadErr, err)
}
