// Package server is the agent's local HTTP endpoint: liveness and health,
// Prometheus metrics, and the debug views `kube-ipvs status` and
// `kube-ipvs diff` read.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/status"
)

// Paths served.
const (
	PathLive    = "/livez"
	PathHealth  = "/healthz"
	PathStatus  = "/debug/status"
	PathDiff    = "/debug/diff"
	PathMetrics = "/metrics"
)

// Inspector is what the agent exposes to the server. Its methods are
// called from request goroutines while syncs run; none may wait for one.
type Inspector interface {
	// LastSync is the outcome of the last sync.
	LastSync() status.Sync
	// Status is the annotated view of the node.
	Status() status.Report
	// Drift is what the agent would change now, one ipvsadm-style line each.
	Drift(ctx context.Context) ([]string, error)
}

// Handler serves the endpoints for an inspector, and metrics (a Prometheus
// handler; nil: not served) at PathMetrics.
func Handler(in Inspector, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	if metrics != nil {
		mux.Handle("GET "+PathMetrics, metrics)
	}
	mux.HandleFunc("GET "+PathLive, func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET "+PathHealth, func(w http.ResponseWriter, _ *http.Request) {
		last := in.LastSync()
		if last.Time.IsZero() || last.Error != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		writeJSON(w, last)
	})
	mux.HandleFunc("GET "+PathStatus, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, in.Status())
	})
	mux.HandleFunc("GET "+PathDiff, func(w http.ResponseWriter, r *http.Request) {
		lines, err := in.Drift(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, DiffResponse{Ops: lines})
	})
	return mux
}

// DiffResponse is the body of PathDiff.
type DiffResponse struct {
	Ops []string `json:"ops"`
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// Serve listens on addr and serves h until ctx ends.
func Serve(ctx context.Context, addr string, h http.Handler, log *zap.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	log.Info("serving", zap.String("address", ln.Addr().String()))
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
