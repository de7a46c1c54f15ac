package agent

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/objects"
	"github.com/kube-ipvs/kube-ipvs/internal/reconciler"
	"github.com/kube-ipvs/kube-ipvs/internal/source"
)

// input is whichever of the two sources the flags chose, behind the same
// store: the rest of the agent cannot tell them apart.
type input struct {
	store    *objects.Store
	run      func(ctx context.Context) error // follow changes until ctx ends
	load     func(ctx context.Context) error // deliver the initial state, then return
	recorder reconciler.Recorder
	stop     func()
	// apiServer are the API server's addresses, which no Service may claim.
	apiServer []netip.Addr
}

func newSource(c config.Config, node string, log *zap.Logger) (*input, error) {
	if c.ManifestsDir != "" {
		return manifestSource(c, node, log), nil
	}
	return kubeSource(c, node, log)
}

func manifestSource(c config.Config, node string, log *zap.Logger) *input {
	store := objects.NewStore(source.SourceManifests)
	m := &source.Manifests{Dir: c.ManifestsDir, NodeName: node, Store: store, Log: log, NodePortRange: c.NodePortRange}
	return &input{
		store: store,
		run:   m.Run,
		load:  func(context.Context) error { return m.Load() },
		stop:  func() {},
	}
}

func kubeSource(c config.Config, node string, log *zap.Logger) (*input, error) {
	co := c.Client
	client, err := source.NewClient(co)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	api := apiServerAddrs(co, log)
	store := objects.NewStore(source.SourcesKubernetes...)
	k := &source.Kubernetes{Client: client, NodeName: node, ServiceProxyName: c.ServiceProxyName, Store: store, Log: log}
	rec, stopRec := source.NewServiceEventRecorder(client, node, store, log)
	src := &input{store: store, run: k.Run, recorder: rec, stop: stopRec, apiServer: api}
	src.load = func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- k.Run(ctx) }()
		for !store.Synced() {
			select {
			case <-ctx.Done():
				cancel()
				return ctx.Err()
			case err := <-errc:
				cancel()
				return fmt.Errorf("kubernetes source: %w", err)
			case <-store.Notify():
			}
		}
		src.stop = func() { cancel(); stopRec() }
		return nil
	}
	return src, nil
}

// apiServerAddrs are the addresses of the API server the agent talks to,
// looked up once at start (kube-proxy too reads its kubeconfig once). A
// name that does not resolve reserves nothing, and says so.
func apiServerAddrs(co source.ClientOptions, log *zap.Logger) []netip.Addr {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := source.APIServerAddrs(ctx, co)
	if err != nil {
		log.Warn("the API server's address is not known: Services may claim it", zap.Error(err))
	}
	return addrs
}
