package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
	"github.com/kube-ipvs/kube-ipvs/internal/server"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
	"github.com/kube-ipvs/kube-ipvs/internal/snapshot"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, code := parseAgent(args, stdout, stderr)
	if code >= 0 {
		return code
	}
	if o.dryRunTable != "" && !o.DryRun {
		fmt.Fprintln(stderr, "kube-ipvs agent: --dry-run-table is the table a --dry-run plans against: give --dry-run too")
		return 2
	}
	log, err := newLogger(o.Config)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	routeKlog(log, o.LogLevel)
	o.warn(log)
	if o.writeConfigTo != "" {
		if err := o.writeConfig(); err != nil {
			log.Error("write configuration", zap.Error(err))
			return 1
		}
		log.Info("wrote configuration", zap.String("file", o.writeConfigTo))
		return 0
	}
	if o.cpuProfile != "" {
		stop, err := startCPUProfile(o.cpuProfile)
		if err != nil {
			log.Error("start the CPU profile", zap.Error(err))
			return 1
		}
		defer stop()
	}
	if o.heapProfile != "" {
		defer writeHeapProfile(o.heapProfile, log)
	}
	ctx, stop := followConfig(ctx, args, o, log)
	defer stop()
	err = agent(ctx, o, log, stdout)
	if errors.Is(context.Cause(ctx), errConfigChanged) {
		log.Error("the config file changed: exiting so that the pod restarts with it, as kube-proxy does", zap.String("config", o.files.config))
		return 1
	}
	if err != nil {
		log.Error("agent failed", zap.Error(err))
		return 1
	}
	return 0
}

// followConfig ends ctx with errConfigChanged when the --config file
// changes to a configuration the same command line accepts; a run that
// ends by itself (--once, --dry-run) or has no file is left alone.
func followConfig(ctx context.Context, args []string, o agentOptions, log *zap.Logger) (context.Context, context.CancelFunc) {
	if o.files.config == "" || o.Once || o.DryRun {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	check := func() error {
		var msg bytes.Buffer
		if _, code := parseAgent(args, io.Discard, &msg); code >= 0 {
			return errors.New(strings.TrimSpace(msg.String()))
		}
		return nil
	}
	go func() { cancel(watchConfig(ctx, o.files.config, o.configData, check, log)) }()
	return ctx, func() { cancel(nil) }
}

// agent wires the pieces and runs them: source -> store -> reconciler ->
// dataplane, driven by the runner (or once).
func agent(ctx context.Context, o agentOptions, log *zap.Logger, stdout io.Writer) error {
	c := o.Config
	node := nodeName(c.HostnameOverride)
	log.Info("starting", zap.String("version", version), zap.String("node", node))
	var dp dataplane.Dataplane
	var err error
	if c.DryRun {
		dp, err = dryRunKernel(ctx, c, o.dryRunTable, os.Stdin, log)
	} else {
		dp, err = linux.New(dataplaneOptions(c, log))
	}
	if err != nil {
		return fmt.Errorf("open dataplane: %w", err)
	}
	defer dp.Close()
	return agentOn(ctx, c, node, dp, log, stdout)
}

// dataplaneOptions are the kernel settings the configuration asks for
// beyond the table: strict ARP, the iptables flavour, conntrack tuning.
func dataplaneOptions(c config.Config, log *zap.Logger) linux.Options {
	return linux.Options{Logger: log, StrictARP: c.StrictARP, IptablesBackend: c.IptablesBackend, Conntrack: conntrackTuning(c.Conntrack)}
}

// agentOn runs the agent on an open dataplane: the real kernel, or a fake
// in tests that follow the agent's whole configuration path.
func agentOn(ctx context.Context, c config.Config, node string, dp dataplane.Dataplane, log *zap.Logger, stdout io.Writer) error {
	src, err := newSource(c, node, log)
	if err != nil {
		return err
	}
	defer src.stop()
	reg, m, err := newMetrics(c.Families, src.store)
	if err != nil {
		return err
	}
	opt := reconcilerOptions(c, node, dp, src, m, log, stdout)
	opt.PodCIDRsFromNode = c.DetectLocalMode == config.DetectNodeCIDR
	closeViews, err := viewsKernel(c, log, &opt)
	if err != nil {
		return err
	}
	defer closeViews()
	rec := reconciler.New(opt)
	if err := rec.Init(ctx); err != nil {
		return fmt.Errorf("prepare node: %w", err)
	}
	if c.Once || c.DryRun {
		return once(ctx, src, rec)
	}
	go func() {
		if err := src.run(ctx); err != nil && ctx.Err() == nil {
			log.Error("source stopped", zap.Error(err))
		}
	}()
	// NodePorts follow the node's addresses as they come and go (kube-proxy
	// re-reads them at each sync). The store starts from the read made at
	// start, so that the watcher's first report, the same addresses,
	// re-translates nothing.
	src.store.SetHostAddrs(opt.Translate.HostAddrs)
	go linux.WatchHostAddrs(ctx, nodePortCandidate, log, src.store.SetHostAddrs)
	v := views{rec: rec, node: node}
	if err := registerViews(v, reg); err != nil {
		return err
	}
	hz := health.New(health.Options{Timeout: healthTimeout(c.SyncPeriod), Families: familyNames(c.Families)})
	parent := ctx
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	serveAll(ctx, fail, endpoints(c, v, hz, reg, m), log)
	hc, syncHealth := healthChecks(v, hz, log, rec.NodePortAddrs)
	defer hc.Close()
	hz.Start()
	listed := listingGC(os.Getenv)
	waitSynced(ctx, src)
	listed()
	if opt.PodCIDRsFromNode {
		if err := waitPodCIDRs(ctx, src.store, node, podCIDRsTimeout, log); err != nil {
			return err
		}
	}
	reader, ok := opt.Views.(dataplane.Reader)
	if !ok {
		return fmt.Errorf("no kernel reader for the drift check")
	}
	go driftChecker(c, rec, reader, log).Run(ctx)
	err = syncLoop(c, queued(ctx, src.store.Notify(), m, hz), syncHealth, rec.DriftWake(), log).Run(ctx)
	if parent.Err() == nil && ctx.Err() != nil {
		return context.Cause(ctx) // a listener failed hard
	}
	return err
}

// syncLoop runs sync on every trigger (coalesced: at most once per
// --ipvs-min-sync-period) and retries a failed sync with backoff. Drift is
// found by the drift checker, which reads the kernel beside the syncs, and
// folded in by the incremental sync its repair cue asks for; the sync loop
// reads the kernel whole only at the first sync and after a failed one.
func syncLoop(c config.Config, trigger <-chan struct{}, sync func(context.Context, bool) (time.Duration, error), repair <-chan struct{}, log *zap.Logger) *runner.Runner {
	return &runner.Runner{
		Sync:        sync,
		Trigger:     trigger,
		Repair:      repair,
		MinInterval: c.MinSyncPeriod,
		Backoff:     time.Second,
		MaxBackoff:  c.SyncPeriod,
		OnError: func(err error, retryIn time.Duration) {
			log.Error("sync failed", zap.Error(err), zap.Duration("retry_in", retryIn))
		},
	}
}

// viewsKernel gives the drift checker and Drift (`kube-ipvs diff`) their
// own kernel reader: its own sockets, apart from the sync's dataplane,
// whose calls are serialized, so that neither a drift read nor a diff
// ever queues a sync behind it (nor the other way round). It only
// observes. The func returned closes it.
func viewsKernel(c config.Config, log *zap.Logger, opt *reconciler.Options) (func(), error) {
	if c.Once || c.DryRun {
		return func() {}, nil
	}
	dp, err := linux.New(linux.Options{Logger: log.Named("views"), IptablesBackend: shim.Backend(c.IptablesBackend)})
	if err != nil {
		return nil, fmt.Errorf("open dataplane for views: %w", err)
	}
	opt.Views = dp
	return func() { _ = dp.Close() }, nil
}

// driftChecker reads the whole kernel once per --ipvs-sync-period beside
// the syncs, on the views' sockets: the period within which drift made by
// anyone else is found (kube-proxy's meaning of the flag: how often the
// rules are refreshed).
func driftChecker(c config.Config, rec *reconciler.Reconciler, reader dataplane.Reader, log *zap.Logger) *rescan.Checker {
	return &rescan.Checker{Mailbox: rec.Rescans(), Reader: reader, Period: c.SyncPeriod, Log: log.Named("drift")}
}

// registerViews registers the scrape-time collectors, which read the
// published view.
func registerViews(v views, reg *prometheus.Registry) error {
	if err := reg.Register(metrics.NewTable(v.table)); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	return nil
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

// endpoints are the agent's listeners, each on its own address as in
// kube-proxy (an empty address turns one off): the health server
// (/healthz, /livez), the metrics server (/metrics, /proxyMode) and the
// loopback debug views. Only kube-proxy's two fail hard, when asked to.
// Every health answer is counted in m, as kube-proxy counts them.
func endpoints(c config.Config, v views, hz *health.Tracker, reg *prometheus.Registry, m *metrics.Metrics) []server.Endpoint {
	var out []server.Endpoint
	if c.HealthzBindAddress != "" {
		opt := health.HandlerOptions{NodeEligible: v.nodeEligible(c.ManifestsDir == ""), Answered: countAnswer(m)}
		out = append(out, server.Endpoint{Name: "healthz", Addr: c.HealthzBindAddress, HardFail: c.BindAddressHardFail,
			Handler: health.Handler(hz, opt)})
	}
	if c.MetricsBindAddress != "" {
		out = append(out, server.Endpoint{Name: "metrics", Addr: c.MetricsBindAddress, HardFail: c.BindAddressHardFail,
			Handler: server.MetricsHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), config.ProxyModeIPVS)})
	}
	if c.DebugAddress != "" {
		out = append(out, server.Endpoint{Name: "debug", Addr: c.DebugAddress, Handler: server.DebugHandler(v)})
	}
	return out
}

// countAnswer counts a health answer in kube-proxy's
// kubeproxy_proxy_healthz_total or kubeproxy_proxy_livez_total.
func countAnswer(m *metrics.Metrics) func(path string, code int) {
	return func(path string, code int) {
		switch path {
		case health.PathHealthz:
			m.Healthz(code)
		case health.PathLivez:
			m.Livez(code)
		}
	}
}

// serveAll runs the endpoints in the background until ctx ends; the first
// that fails hard cancels ctx with its error, and the agent exits with it
// (kube-proxy's bindAddressHardFail).
func serveAll(ctx context.Context, fail context.CancelCauseFunc, eps []server.Endpoint, log *zap.Logger) {
	for _, e := range eps {
		go func() {
			if err := server.Run(ctx, e, log.Named("server")); err != nil {
				fail(err)
			}
		}()
	}
}

// newMetrics builds the agent's registry as kube-proxy's: the Go runtime
// (every runtime metric, as component-base registers it) and process
// collectors, its build info, client-go's request metrics (installed as
// client-go's reporter), the change counters read from store, and the
// reconciler's metrics for the families served. Library code never touches
// the global registry.
func newMetrics(families model.Families, store *snapshot.Store) (*prometheus.Registry, *metrics.Metrics, error) {
	reg := prometheus.NewRegistry()
	if err := errors.Join(
		reg.Register(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsAll))),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
		reg.Register(metrics.NewChanges(families, storeChanges(store))),
		metrics.RegisterBuildInfo(reg, metrics.BuildOf(version)),
	); err != nil {
		return nil, nil, fmt.Errorf("register runtime metrics: %w", err)
	}
	rc, err := metrics.NewRESTClient(reg)
	if err != nil {
		return nil, nil, err
	}
	rc.Install()
	m, err := metrics.New(reg, families)
	return reg, m, err
}

// storeChanges reads the store's change counts for the metrics.
func storeChanges(store *snapshot.Store) func() metrics.Changes {
	return func() metrics.Changes {
		c := store.Counts()
		return metrics.Changes{Services: c.ServiceChanges, Slices: c.SliceChanges,
			ServicesPending: c.ServicesPending, SlicesPending: c.SlicesPending}
	}
}

// queued forwards the store's change notifications to the runner, noting
// when each arrived: kube-proxy's last_queued_timestamp, which against the
// last sync's timestamp tells a stuck agent from an idle one, and the
// health tracker's queued change.
func queued(ctx context.Context, in <-chan struct{}, m *metrics.Metrics, hz *health.Tracker) <-chan struct{} {
	out := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-in:
				m.Queued(time.Now())
				hz.Queued()
				select {
				case out <- struct{}{}:
				default: // one pending trigger is enough: the runner coalesces
				}
			}
		}
	}()
	return out
}

func reconcilerOptions(c config.Config, node string, dp dataplane.Dataplane, src *input, m *metrics.Metrics, log *zap.Logger, out io.Writer) reconciler.Options {
	return reconciler.Options{
		Dataplane: dp,
		Store:     src.store,
		Translate: translate.Config{
			NodeName:          node,
			Scheduler:         c.Scheduler,
			NodePortAddresses: c.NodePortAddresses,
			HostAddrs:         slices.DeleteFunc(hostAddrs(log), func(a netip.Addr) bool { return !nodePortCandidate(a) }),
			Families:          c.Families,
			ServiceProxyName:  c.ServiceProxyName,
			DrainTimeout:      c.DrainTimeout,
			MaxFrontends:      c.MaxFrontendsPerService,
			ExternalIPCIDRs:   c.ExternalIPCIDRs,
			MasqueradeMark:    c.ShimConfig().MasqueradeMark,
		},
		NodePortRange: c.NodePortRange,
		Exclude:       c.ExcludeCIDRs,
		ReservedAddrs: src.apiServer,
		ReservedCIDRs: c.ClusterCIDRs,
		Timeouts:      dataplane.Timeouts{TCP: c.TCPTimeout, TCPFin: c.TCPFinTimeout, UDP: c.UDPTimeout},
		Shim:          c.ShimConfig(),
		DryRun:        c.DryRun,
		Out:           out,
		Log:           log,
		Recorder:      src.recorder,
		Metrics:       m,
	}
}

// healthChecks serves the health-check node ports on the node addresses
// NodePorts use (nodeAddrs, read after each sync: the Node may change), and
// wraps a sync so that the health tracker sees it begin and end, and after
// each one the ports and their local endpoint counts follow the published
// view. The ports answer 503 while the tracker finds the agent unhealthy,
// as kube-proxy's do.
func healthChecks(v views, hz *health.Tracker, log *zap.Logger, nodeAddrs func() []netip.Addr) (*healthcheck.Server, func(context.Context, bool) (time.Duration, error)) {
	hc := healthcheck.New(healthcheck.Options{Logger: log, Healthy: hz.Healthy})
	return hc, func(ctx context.Context, full bool) (time.Duration, error) {
		hz.Begin()
		st, err := v.rec.Sync(ctx, full)
		hz.End(err == nil)
		if herr := hc.Sync(v.rec.View().HealthChecks(), nodeAddrs()); herr != nil {
			log.Warn("health check ports", zap.Error(herr))
		}
		return st.Requeue, err
	}
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

// nodePortCandidate tells whether NodePorts may listen on a host address,
// as kube-proxy's IPVS mode picks them: never loopback, nor IPv6 link-local
// (an IPVS service on it would need a zone).
func nodePortCandidate(a netip.Addr) bool {
	return !a.IsLoopback() && !(a.Is6() && a.IsLinkLocalUnicast())
}

// podCIDRsTimeout is how long kube-proxy waits, in NodeCIDR mode, for the
// Node to be given its pod CIDRs before it gives up.
const podCIDRsTimeout = 5 * time.Minute

// waitPodCIDRs waits for the Node to have spec.podCIDRs, which the
// NodeCIDR detect-local mode tells pod traffic by, as kube-proxy waits for
// them; without them after the timeout it fails, as kube-proxy does.
func waitPodCIDRs(ctx context.Context, store *snapshot.Store, node string, timeout time.Duration, log *zap.Logger) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	if len(translate.NodePodCIDRs(store.Node())) == 0 {
		log.Info("waiting for the Node's spec.podCIDRs (--detect-local-mode=NodeCIDR)", zap.String("node", node), zap.Duration("timeout", timeout))
	}
	for len(translate.NodePodCIDRs(store.Node())) == 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			if store.Node() == nil {
				return fmt.Errorf("timeout waiting for node %q to exist (--detect-local-mode=NodeCIDR needs its spec.podCIDRs)", node)
			}
			return fmt.Errorf("timeout waiting for PodCIDR allocation on node %q (--detect-local-mode=NodeCIDR)", node)
		case <-store.Notify():
		}
	}
	return nil
}

// hostAddrs lists this host's interface addresses except the VIPs on our
// own link: the candidates for CIDR-selected NodePort addresses.
func hostAddrs(log *zap.Logger) []netip.Addr {
	ifaces, err := net.Interfaces()
	if err != nil {
		log.Warn("list interfaces", zap.Error(err))
		return nil
	}
	var out []netip.Addr
	for _, ifc := range ifaces {
		if ifc.Name == dataplane.LinkName {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
					out = append(out, ip.Unmap())
				}
			}
		}
	}
	return out
}

// conntrackTuning is the configuration's conntrack settings, as the
// dataplane writes them at Init.
func conntrackTuning(ct config.Conntrack) dataplane.ConntrackTuning {
	return dataplane.ConntrackTuning{
		MaxPerCore: int(ct.MaxPerCore), Min: int(ct.Min),
		TCPEstablished: ct.TCPEstablishedTimeout, TCPCloseWait: ct.TCPCloseWaitTimeout,
		TCPBeLiberal: ct.TCPBeLiberal, UDP: ct.UDPTimeout, UDPStream: ct.UDPStreamTimeout,
	}
}
