package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/httplimit"
)

// RetryInterval is how long kube-proxy waits before it tries again to
// serve on an address it could not listen on, or whose server stopped.
const RetryInterval = 5 * time.Second

// Endpoint is one HTTP listener of the agent.
type Endpoint struct {
	Name    string // for logs and errors: "healthz", "metrics", "debug"
	Addr    string // IP:PORT
	Handler http.Handler
	// HardFail makes a failure to listen (or a server that stops) fatal:
	// kube-proxy's bindAddressHardFail. Otherwise it is logged and tried
	// again every Retry.
	HardFail bool
	// Retry overrides RetryInterval (tests).
	Retry time.Duration
	// Limits bound what a client may hold; zero fields take httplimit's
	// defaults.
	Limits httplimit.Limits
}

// Run serves e until ctx ends, then shuts it down. It returns nil when ctx
// ends, or, for a HardFail endpoint, the first error, which names the
// address.
func Run(ctx context.Context, e Endpoint, log *zap.Logger) error {
	if e.Retry == 0 {
		e.Retry = RetryInterval
	}
	log = log.With(zap.String("server", e.Name), zap.String("address", e.Addr))
	for {
		err := serve(ctx, e, log)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New("server stopped")
		}
		err = fmt.Errorf("%s server on %s: %w", e.Name, e.Addr, err)
		if e.HardFail {
			return err
		}
		log.Error("cannot serve; trying again", zap.Error(err), zap.Duration("retry_in", e.Retry))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(e.Retry):
		}
	}
}

// serve listens on e.Addr and serves until ctx ends or the server fails.
func serve(ctx context.Context, e Endpoint, log *zap.Logger) error {
	ln, err := net.Listen("tcp", e.Addr)
	if err != nil {
		return err
	}
	srv := e.Limits.Server(e.Handler)
	stop := context.AfterFunc(ctx, func() {
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	})
	defer stop()
	log.Info("serving")
	if err := srv.Serve(e.Limits.Listener(ln)); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
