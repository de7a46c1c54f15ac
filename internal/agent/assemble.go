package agent

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/linux"
	"github.com/kube-ipvs/kube-ipvs/internal/health"
	"github.com/kube-ipvs/kube-ipvs/internal/healthcheck"
	"github.com/kube-ipvs/kube-ipvs/internal/metrics"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/reconciler"
	"github.com/kube-ipvs/kube-ipvs/internal/rescan"
	"github.com/kube-ipvs/kube-ipvs/internal/runner"
)

// agent is the assembled components of one run.
type agent struct {
	c    config.Config
	node string
	log  *zap.Logger

	// hostAddrs are this host's addresses NodePorts may listen on, as
	// read at assembly.
	hostAddrs []netip.Addr

	src   *input
	reg   *prometheus.Registry
	m     *metrics.Metrics
	rec   *reconciler.Reconciler
	pages debugPages
	// reader is the kernel reader of the rescan and the debug
	// pages; nil for a run that ends by itself (--once, --dry-run).
	reader dataplane.Reader
	hz     *health.Tracker
	hc     *healthcheck.Server

	closers []func()
}

// assemble builds every component from the configuration, on an open
// dataplane. Nothing runs yet.
func assemble(opt Options, node string, dp dataplane.Dataplane) (*agent, error) {
	c := opt.Config
	a := &agent{c: c, node: node, log: opt.Log, hostAddrs: nodePortHostAddrs(opt.Log)}
	var err error
	if a.src, err = newSource(c, node, a.log); err != nil {
		return nil, err
	}
	a.closers = append(a.closers, a.src.stop)
	if a.reg, a.m, err = newMetrics(c.Families, a.src.store, opt.Version); err != nil {
		a.close()
		return nil, err
	}
	if err := a.openReader(); err != nil {
		a.close()
		return nil, err
	}
	a.rec = reconciler.New(a.reconcilerOptions(dp, opt.Stdout))
	a.pages = debugPages{rec: a.rec, node: node}
	if err := registerCollectors(a.pages, a.reg); err != nil {
		a.close()
		return nil, err
	}
	a.hz = health.New(health.Options{Timeout: healthTimeout(c.SyncPeriod), Families: familyNames(c.Families)})
	a.hc = newHealthChecks(a.rec, a.hz, a.log)
	a.closers = append(a.closers, a.hc.Close)
	return a, nil
}

// close releases what assemble opened, last first.
func (a *agent) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
}

// newHealthChecks serves the health-check node ports, which follow the
// view each sync publishes: the ports, their local endpoint counts and the
// node addresses NodePorts are served on. They answer 503 while the
// tracker finds the agent unhealthy, as kube-proxy's do.
func newHealthChecks(rec *reconciler.Reconciler, hz *health.Tracker, log *zap.Logger) *healthcheck.Server {
	published := func() healthcheck.View { return rec.View() }
	return healthcheck.New(healthcheck.Options{Logger: log, Healthy: hz.Healthy, Published: published})
}

// listeners are what follows the syncs: the health tracker first, so that
// the health-check ports answer with its verdict on the sync just ended.
func (a *agent) listeners() []Listener { return []Listener{a.hz, a.hc} }

func (a *agent) reconcilerOptions(dp dataplane.Dataplane, out io.Writer) reconciler.Options {
	c := a.c
	tc := c.Translation
	tc.NodeName, tc.HostAddrs, tc.MasqueradeMark = a.node, a.hostAddrs, c.ShimConfig().MasqueradeMark
	opt := reconciler.Options{
		Dataplane:        dp,
		Store:            a.src.store,
		Translate:        tc,
		NodePortRange:    c.NodePortRange,
		Exclude:          c.ExcludeCIDRs,
		ReservedAddrs:    a.src.apiServer,
		ReservedCIDRs:    c.ClusterCIDRs,
		Timeouts:         c.Timeouts,
		Shim:             c.ShimConfig(),
		PodCIDRsFromNode: c.DetectLocalMode == config.DetectNodeCIDR,
		DryRun:           c.DryRun,
		LocalRoutes:      c.VIPBinding == config.VIPLocalRoute,
		Out:              out,
		Log:              a.log,
		Recorder:         a.src.recorder,
		Metrics:          a.m,
	}
	if a.reader != nil {
		opt.Reader = a.reader
	}
	return opt
}

// openReader gives the rescan and the debug pages' diff their own
// kernel reader: its own sockets, apart from the sync's dataplane, whose
// calls are serialized, so that neither a rescan nor a diff ever
// queues a sync behind it (nor the other way round). It only reads. A run
// that ends by itself needs none.
func (a *agent) openReader() error {
	if a.c.Once || a.c.DryRun {
		return nil
	}
	// It follows the kernel's announcements too: those about local routes
	// only where VIPs are bound so.
	dp, err := linux.New(linux.Options{Logger: a.log.Named("reader"), IptablesBackend: a.c.IptablesBackend,
		LocalRoutes: a.c.VIPBinding == config.VIPLocalRoute})
	if err != nil {
		return fmt.Errorf("open the kernel reader: %w", err)
	}
	a.reader = dp
	a.closers = append(a.closers, func() { _ = dp.Close() })
	return nil
}

// follow runs the source, and follows the node's addresses as they come
// and go (kube-proxy re-reads them at each sync), until ctx ends. The
// store starts from the addresses read at assembly, so that the watcher's
// first report, the same addresses, re-translates nothing.
func (a *agent) follow(ctx context.Context) {
	go func() {
		if err := a.src.run(ctx); err != nil && ctx.Err() == nil {
			a.log.Error("source stopped", zap.Error(err))
		}
	}()
	a.src.store.SetHostAddrs(a.hostAddrs)
	go linux.WatchHostAddrs(ctx, nodePortCandidate, a.log, a.src.store.SetHostAddrs)
}

// ready waits until the source has delivered its initial state and, in
// NodeCIDR mode, the Node has its pod CIDRs.
func (a *agent) ready(ctx context.Context) error {
	listed := listingGC(os.Getenv)
	waitSynced(ctx, a.src)
	listed()
	if a.c.DetectLocalMode != config.DetectNodeCIDR {
		return nil
	}
	return waitPodCIDRs(ctx, a.src.store, a.node, podCIDRsTimeout, a.log)
}

// rescan reads the whole kernel once per --ipvs-sync-period beside
// the syncs, on the kernel reader's sockets: the period within which drift
// made by anyone else is found (kube-proxy's meaning of the flag: how
// often the rules are refreshed). The kernel reader also follows the
// kernel's announcements, so that a VIP or an iptables-nft rule changed by
// anyone else is read again and repaired at once.
func (a *agent) rescan() *rescan.Checker {
	c := &rescan.Checker{Mailbox: a.rec.Rescans(), Reader: a.reader, Period: a.c.SyncPeriod, Log: a.log.Named("rescan")}
	if n, ok := a.reader.(dataplane.Notifier); ok {
		c.Notify = n
	}
	return c
}

// syncLoop runs a sync on every change and every repair the rescan
// asks for (coalesced: at most once per --ipvs-min-sync-period) and
// retries a failed sync with backoff. The sync loop reads the kernel whole
// only at the first sync and after a failed one. The health tracker and
// the health-check ports follow each sync.
func (a *agent) syncLoop(ctx context.Context) *runner.Runner {
	s := syncer{rec: a.rec, listeners: a.listeners()}
	return &runner.Runner{
		Sync:        s.sync,
		Trigger:     a.triggers(ctx),
		MinInterval: a.c.MinSyncPeriod,
		Backoff:     time.Second,
		MaxBackoff:  a.c.SyncPeriod,
		OnError: func(err error, retryIn time.Duration) {
			a.log.Error("sync failed", zap.Error(err), zap.Duration("retry_in", retryIn))
		},
	}
}

// healthTimeout is how long a queued change may wait for a successful
// sync before /healthz and /livez fail: kube-proxy's twice the sync period.
func healthTimeout(syncPeriod time.Duration) time.Duration { return 2 * syncPeriod }

// familyNames are the enabled families as kube-proxy names them.
func familyNames(f model.Families) []string {
	var out []string
	if f.IPv4 {
		out = append(out, "IPv4")
	}
	if f.IPv6 {
		out = append(out, "IPv6")
	}
	return out
}

// waitSynced blocks until the source has delivered its initial state, so
// the first sync sees the whole cluster (a sync before it could not prune
// and would cost a full read of the kernel for nothing).
func waitSynced(ctx context.Context, src *input) {
	for !src.store.Synced() {
		select {
		case <-ctx.Done():
			return
		case <-src.store.Notify():
		}
	}
}
