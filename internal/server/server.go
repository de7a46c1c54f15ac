// Package server runs the agent's HTTP listeners: kube-proxy's health
// server (package health answers it) and metrics server, and the debug
// views `kube-ipvs status` and `kube-ipvs diff` read, each on its own
// address, started, retried and failed the way kube-proxy does.
package server

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/kube-ipvs/kube-ipvs/internal/status"
)

// Paths of the debug views.
const (
	PathStatus = "/debug/status"
	PathDiff   = "/debug/diff"
)

// Inspector is what the agent exposes to the debug views. Its methods are
// called from request goroutines while syncs run; none may wait for one.
type Inspector interface {
	// Status is the annotated view of the node.
	Status() status.Report
	// Drift is what the agent would change now, one ipvsadm-style line each.
	Drift(ctx context.Context) ([]string, error)
}

// DebugHandler serves the debug views of an inspector, and nothing else:
// health and metrics have their own addresses, as in kube-proxy.
//
// A diff reads the whole kernel, which costs the node as much as a full
// sync's read; diffs run one at a time, and a request that comes while
// one runs waits for its turn (or until its client gives up).
func DebugHandler(in Inspector) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathStatus, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, in.Status())
	})
	turn := make(chan struct{}, 1)
	mux.HandleFunc("GET "+PathDiff, func(w http.ResponseWriter, r *http.Request) {
		select {
		case turn <- struct{}{}:
		case <-r.Context().Done():
			http.Error(w, "gave up waiting for the diff before it", http.StatusServiceUnavailable)
			return
		}
		lines, err := func() ([]string, error) {
			defer func() { <-turn }() // even if Drift panics: net/http recovers it
			return in.Drift(r.Context())
		}()
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
