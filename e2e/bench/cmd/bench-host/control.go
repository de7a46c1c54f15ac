package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/protocol"
	"github.com/kube-ipvs/kube-ipvs/e2e/bench/result"
)

// control answers bench-guest: the plan, changes written on request, and
// the results it reports.
type control struct {
	cl   *cluster
	roll *rolls
	mu   sync.Mutex // guards rec
	rec  *result.Run
	save func(*result.Run) error // after each tool: a run cut short keeps what it measured
}

func (c *control) mux(ctx context.Context) *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("GET "+protocol.PathPlan, func(w http.ResponseWriter, r *http.Request) {
		p := protocol.Plan{N: c.cl.n, Endpoints: c.cl.eps, Local: c.cl.local()}
		for i := 0; i < c.cl.n; i++ {
			p.VIPs = append(p.VIPs, protocol.VIP(i).String())
		}
		reply(w, p)
	})
	m.HandleFunc("POST "+protocol.PathChange, func(w http.ResponseWriter, r *http.Request) {
		ch, s := c.cl.next(trigger(r))
		if err := c.cl.apply(ctx, ch, s); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		reply(w, ch)
	})
	m.HandleFunc("POST "+protocol.PathBurst, func(w http.ResponseWriter, r *http.Request) {
		k, err := strconv.Atoi(r.URL.Query().Get("count"))
		if err != nil || k < 1 || k > c.cl.n {
			http.Error(w, fmt.Sprintf("count: want 1..%d", c.cl.n), http.StatusBadRequest)
			return
		}
		b := c.cl.burst(ctx, k, trigger(r))
		fmt.Printf("bench-host: burst of %d written in %.2f s (%d refused)\n", k, b.WriteSeconds, b.Errors)
		reply(w, b)
	})
	m.HandleFunc("POST "+protocol.PathZone, func(w http.ResponseWriter, r *http.Request) {
		zone := r.URL.Query().Get(protocol.ZoneParam)
		if err := c.cl.setZone(ctx, zone); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Printf("bench-host: Node %s: zone label %q\n", c.cl.node, zone)
		w.WriteHeader(http.StatusNoContent)
	})
	m.HandleFunc("POST "+protocol.PathRoll, func(w http.ResponseWriter, r *http.Request) {
		size, err := strconv.Atoi(r.URL.Query().Get("size"))
		if err != nil || size < 2*protocol.RollBatch {
			http.Error(w, fmt.Sprintf("size: want at least %d", 2*protocol.RollBatch), http.StatusBadRequest)
			return
		}
		ro, err := c.roll.create(ctx, size)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Printf("bench-host: %s created with %d endpoints\n", ro.Name, ro.Size)
		reply(w, ro)
	})
	m.HandleFunc("DELETE "+protocol.PathRoll, func(w http.ResponseWriter, r *http.Request) {
		if err := c.roll.remove(ctx, r.URL.Query().Get("name")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	m.HandleFunc("POST "+protocol.PathRollStep, func(w http.ResponseWriter, r *http.Request) {
		st, err := c.roll.step(ctx, r.URL.Query().Get("name"), trigger(r))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		reply(w, st)
	})
	m.HandleFunc("POST "+protocol.PathResult, func(w http.ResponseWriter, r *http.Request) {
		var t result.Tool
		if err := json.NewDecoder(r.Body).Decode(&t); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.rec.Tools = append(c.rec.Tools, t)
		err := c.save(c.rec)
		c.mu.Unlock()
		if err != nil {
			fmt.Println("bench-host:", err)
		}
		fmt.Printf("bench-host: result for %s received\n", t.Name)
		w.WriteHeader(http.StatusNoContent)
	})
	m.HandleFunc("POST "+protocol.PathGuest, func(w http.ResponseWriter, r *http.Request) {
		var g protocol.Guest
		if err := json.NewDecoder(r.Body).Decode(&g); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.rec.GuestKernel, c.rec.GuestCPUs, c.rec.GuestMemMB = g.Kernel, g.CPUs, g.MemMB
		if g.Notes != "" {
			c.rec.Notes = append(c.rec.Notes, g.Notes)
		}
		c.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	return m
}

// trigger is the guest's clock as it asked (protocol.TriggerParam), or the
// host's if it did not say.
func trigger(r *http.Request) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, r.URL.Query().Get(protocol.TriggerParam)); err == nil {
		return t
	}
	return time.Now()
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}
