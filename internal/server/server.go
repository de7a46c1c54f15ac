// Package server runs the agent's HTTP listeners: kube-proxy's health
// server (package health answers it) and metrics server, and the debug
// pages `kube-ipvs status` and `kube-ipvs diff` read, each on its own
// address, started, retried and failed the way kube-proxy does.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/kube-ipvs/kube-ipvs/internal/status"
)

// Paths of the debug pages.
const (
	PathStatus = "/debug/status"
	PathDiff   = "/debug/diff"
)

// Inspector is what the agent exposes to the debug pages. Its methods are
// called from request goroutines while syncs run; none may wait for one.
type Inspector interface {
	// Status is the annotated view of the node.
	Status() status.Report
	// Diff is what the agent would change now, one ipvsadm-style line each.
	Diff(ctx context.Context) ([]string, error)
}

// DebugHandler serves the debug pages of an inspector, and nothing else:
// health and metrics have their own addresses, as in kube-proxy.
//
// A diff reads the whole kernel, which costs the node as much as a full
// sync's read; one runs at a time, and the requests that come while it
// runs wait for it (or until their client gives up) and share its answer,
// so a flood of requests costs one read at a time, not one per request.
func DebugHandler(in Inspector) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathStatus, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, in.Status())
	})
	diffs := &sharedRead{read: in.Diff}
	mux.HandleFunc("GET "+PathDiff, func(w http.ResponseWriter, r *http.Request) {
		lines, err := diffs.do(r.Context())
		if errors.Is(err, errGaveUp) {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, DiffResponse{Ops: lines})
	})
	return mux
}

// errGaveUp is the answer of a request whose client left before the read
// it waited for ended.
var errGaveUp = errors.New("gave up waiting for the diff")

// sharedRead runs one read at a time, and gives its answer to every
// caller that asked while it ran.
type sharedRead struct {
	read func(context.Context) ([]string, error)
	mu   sync.Mutex
	cur  *readCall // the read running now, nil when none
}

// readCall is one read; lines and err are set before done closes.
type readCall struct {
	done  chan struct{}
	lines []string
	err   error
}

// do joins the read running now, or runs one in the caller's goroutine
// (so that net/http recovers a panic in it, as in any handler).
func (s *sharedRead) do(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	if c := s.cur; c != nil {
		s.mu.Unlock()
		select {
		case <-c.done:
			return c.lines, c.err
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", errGaveUp, ctx.Err())
		}
	}
	c := &readCall{done: make(chan struct{}), err: errors.New("the diff read panicked")}
	s.cur = c
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.cur = nil
		s.mu.Unlock()
		close(c.done)
	}()
	// The read is the waiters' too: the client that started it leaving
	// must not cancel it for them.
	lines, err := s.read(context.WithoutCancel(ctx))
	c.lines, c.err = lines, err
	return lines, err
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
