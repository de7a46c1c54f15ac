package agent

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/health"
	"github.com/kube-ipvs/kube-ipvs/internal/metrics"
	"github.com/kube-ipvs/kube-ipvs/internal/server"
)

// endpoints are the agent's listeners.
func (a *agent) endpoints() []server.Endpoint {
	return endpoints(a.c, a.pages, a.hz, a.reg, a.m)
}

// endpoints are the agent's listeners, each on its own address as in
// kube-proxy (an empty address turns one off): the health server
// (/healthz, /livez), the metrics server (/metrics, /proxyMode) and the
// loopback debug pages. Only kube-proxy's two fail hard, when asked to.
// Every health answer is counted in m, as kube-proxy counts them.
func endpoints(c config.Config, p debugPages, hz *health.Tracker, reg *prometheus.Registry, m *metrics.Metrics) []server.Endpoint {
	var out []server.Endpoint
	if c.HealthzBindAddress != "" {
		opt := health.HandlerOptions{NodeEligible: p.nodeEligible(c.ManifestsDir == ""), Answered: countAnswer(m)}
		out = append(out, server.Endpoint{Name: "healthz", Addr: c.HealthzBindAddress, HardFail: c.BindAddressHardFail,
			Handler: health.Handler(hz, opt)})
	}
	if c.MetricsBindAddress != "" {
		out = append(out, server.Endpoint{Name: "metrics", Addr: c.MetricsBindAddress, HardFail: c.BindAddressHardFail,
			Handler: server.MetricsHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), config.ProxyModeIPVS)})
	}
	if c.DebugAddress != "" {
		out = append(out, server.Endpoint{Name: "debug", Addr: c.DebugAddress, Handler: server.DebugHandler(p)})
	}
	return out
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
