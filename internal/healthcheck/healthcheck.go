// Package healthcheck serves the health-check node ports of Services with
// externalTrafficPolicy Local: an external load balancer probes every node
// on the Service's healthCheckNodePort and sends traffic only to nodes that
// answer 200, i.e. that have a local endpoint. The answers follow
// kube-proxy's (pkg/proxy/healthcheck): 200 with the count of local
// endpoints, 503 when there is none, and the same JSON body, so load
// balancers configured for kube-proxy keep working. The ports listen on the
// node addresses NodePorts are served on, never on the wildcard address:
// a VIP bound on kube-ipvs0 is local too, and must not answer them.
package healthcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/httplimit"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// Options configure a Server.
type Options struct {
	Logger *zap.Logger
	// Listen opens a port's listener on one address (a seam for tests);
	// nil listens on TCP at that address.
	Listen func(at netip.AddrPort) (net.Listener, error)
	// Healthy reports whether the proxy itself is healthy (no change has
	// waited too long for a sync: health.Tracker); nil means always. It
	// fills serviceProxyHealthy.
	Healthy func() bool
	// Limits bound what a client may hold of each listener (anyone who
	// reaches a node address may connect); zero fields take httplimit's
	// defaults.
	Limits httplimit.Limits
	// Published is the view the last sync published, which the ports
	// follow after each sync (SyncEnded); nil: they follow only Sync.
	Published func() View
}

// View is what the ports follow of a sync's published view
// (reconciler.View): the health-check ports with their local endpoint
// counts, and the node addresses NodePorts were served on.
type View interface {
	HealthChecks() []translate.HealthCheck
	NodePortAddrs() []netip.Addr
}

// Server runs one HTTP server per health-check node port.
type Server struct {
	opt Options
	log *zap.Logger

	mu    sync.Mutex
	ports map[uint16]*port
}

// port is one health-check port, its listeners (one per node address)
// and what it reports.
type port struct {
	n   uint16
	srv *http.Server
	lns map[netip.Addr]net.Listener

	mu    sync.Mutex
	name  model.ServiceName
	local int
}

// New returns a server with no ports open.
func New(opt Options) *Server {
	if opt.Logger == nil {
		opt.Logger = zap.NewNop()
	}
	if opt.Listen == nil {
		opt.Listen = func(at netip.AddrPort) (net.Listener, error) {
			return net.Listen("tcp", at.String())
		}
	}
	if opt.Healthy == nil {
		opt.Healthy = func() bool { return true }
	}
	return &Server{opt: opt, log: opt.Logger.Named("healthcheck"), ports: map[uint16]*port{}}
}

// Sync makes every port of hcs listen on exactly the node addresses addrs
// (those NodePorts are served on), updates what every port reports, and
// closes the ports no longer listed. A listener that cannot be opened is
// reported and retried on the next Sync; the port's other addresses serve
// meanwhile.
func (s *Server) Sync(hcs []translate.HealthCheck, addrs []netip.Addr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := map[uint16]bool{}
	var errs []error
	for _, hc := range hcs {
		want[hc.Port] = true
		p, ok := s.ports[hc.Port]
		if !ok {
			p = s.newPort(hc.Port)
			s.ports[hc.Port] = p
		}
		p.set(hc.Service, hc.LocalEndpoints)
		errs = append(errs, s.listen(p, addrs))
	}
	for n, p := range s.ports {
		if !want[n] {
			p.close()
			delete(s.ports, n)
			s.log.Info("health check port closed", zap.Uint16("port", n))
		}
	}
	return errors.Join(errs...)
}

// SyncBegan is nothing to the ports: they follow what a sync published.
func (s *Server) SyncBegan() {}

// SyncEnded makes the ports follow the view the sync published, whether it
// failed or not (a failed sync publishes what it knew). A listener that
// cannot be opened is logged and retried after the next sync.
func (s *Server) SyncEnded(error) {
	if s.opt.Published == nil {
		return
	}
	v := s.opt.Published()
	if err := s.Sync(v.HealthChecks(), v.NodePortAddrs()); err != nil {
		s.log.Warn("health check ports", zap.Error(err))
	}
}

// newPort makes a port that listens nowhere yet.
func (s *Server) newPort(n uint16) *port {
	p := &port{n: n, lns: map[netip.Addr]net.Listener{}}
	p.srv = s.opt.Limits.Server(s.handler(p))
	return p
}

// listen opens p's listeners on the addresses it lacks and closes those on
// addresses no longer given.
func (s *Server) listen(p *port, addrs []netip.Addr) error {
	var errs []error
	want := map[netip.Addr]bool{}
	for _, a := range addrs {
		want[a] = true
		if _, ok := p.lns[a]; ok {
			continue
		}
		at := netip.AddrPortFrom(a, p.n)
		raw, err := s.opt.Listen(at)
		if err != nil {
			errs = append(errs, fmt.Errorf("listen on health check port %s: %w", at, err))
			continue
		}
		ln := s.opt.Limits.Listener(raw)
		p.lns[a] = ln
		go func() {
			err := p.srv.Serve(ln)
			if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				s.log.Warn("health check listener stopped", zap.Stringer("at", at), zap.Error(err))
			}
		}()
		s.log.Info("health check port open", zap.Stringer("at", at))
	}
	for a, ln := range p.lns {
		if !want[a] {
			_ = ln.Close()
			delete(p.lns, a)
			s.log.Info("health check port closed", zap.Stringer("at", netip.AddrPortFrom(a, p.n)))
		}
	}
	return errors.Join(errs...)
}

func (p *port) set(name model.ServiceName, local int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.name, p.local = name, local
}

func (p *port) get() (model.ServiceName, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.name, p.local
}

func (p *port) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
}

// Body is the JSON a health-check port answers with (kube-proxy's shape).
type Body struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

// handler answers any path as kube-proxy's service health server does:
// 200 with local endpoints (and a healthy proxy), 503 otherwise; its
// headers, the local endpoint count as the load-balancing weight, and its
// body byte for byte (tab-indented JSON, no final newline).
func (s *Server) handler(p *port) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		name, local := p.get()
		var b Body
		b.Service.Namespace, b.Service.Name = name.Namespace, name.Name
		b.LocalEndpoints = local
		b.ServiceProxyHealthy = s.opt.Healthy()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(local))
		if local > 0 && b.ServiceProxyHealthy {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		body, _ := json.MarshalIndent(b, "", "\t") // strings, ints, bools: cannot fail
		_, _ = w.Write(body)
	})
}

// Close stops every port.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, p := range s.ports {
		p.close()
		delete(s.ports, n)
	}
}
