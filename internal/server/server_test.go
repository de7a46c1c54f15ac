package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/status"
)

type inspector struct {
	rep   status.Report
	drift []string
	err   error
}

func (i inspector) LastSync() status.Sync                   { return i.rep.LastSync }
func (i inspector) Status() status.Report                   { return i.rep }
func (i inspector) Drift(context.Context) ([]string, error) { return i.drift, i.err }

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

func TestHealthFollowsLastSync(t *testing.T) {
	for _, tc := range []struct {
		name string
		sync status.Sync
		code int
	}{
		{"never synced", status.Sync{}, 503},
		{"last sync failed", status.Sync{Time: time.Now(), Error: "boom"}, 503},
		{"last sync ok", status.Sync{Time: time.Now()}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := Handler(inspector{rep: status.Report{LastSync: tc.sync}}, nil)
			if got := get(t, h, PathHealth).Code; got != tc.code {
				t.Fatalf("healthz %d, want %d", got, tc.code)
			}
			if got := get(t, h, PathLive).Code; got != 200 {
				t.Fatalf("livez %d", got)
			}
		})
	}
}

func TestDiffAndStatus(t *testing.T) {
	h := Handler(inspector{rep: status.Report{Node: "node-a"}, drift: []string{"-D -t 10.96.0.1:80"}}, nil)
	var d DiffResponse
	if err := json.NewDecoder(get(t, h, PathDiff).Body).Decode(&d); err != nil || len(d.Ops) != 1 {
		t.Fatalf("diff %+v %v", d, err)
	}
	var rep status.Report
	if err := json.NewDecoder(get(t, h, PathStatus).Body).Decode(&rep); err != nil || rep.Node != "node-a" {
		t.Fatalf("status %+v %v", rep, err)
	}
	if got := get(t, Handler(inspector{err: errors.New("dump failed")}, nil), PathDiff).Code; got != 500 {
		t.Fatalf("failed drift answered %d", got)
	}
}

func TestMetricsServedOnlyWhenGiven(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("kube_ipvs_virtual_servers 2\n"))
	})
	rec := get(t, Handler(inspector{}, metrics), PathMetrics)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "kube_ipvs_virtual_servers 2") {
		t.Fatalf("metrics answered %d: %q", rec.Code, rec.Body.String())
	}
	if got := get(t, Handler(inspector{}, nil), PathMetrics).Code; got != 404 {
		t.Fatalf("metrics without a handler answered %d", got)
	}
}
