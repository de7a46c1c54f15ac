package server

import (
	"fmt"
	"net/http"
)

// Paths of kube-proxy's metrics server that the agent serves.
const (
	PathMetrics     = "/metrics"
	PathProxyMode   = "/proxyMode"
	PathHealthz     = "/healthz"
	PathHealthzPing = "/healthz/ping"
)

// MetricsHandler serves what kube-proxy's metrics server does that means
// something here: the Prometheus registry at /metrics, the proxy mode at
// /proxyMode (scripts ask it which mode a node runs), and the API-server
// style /healthz that only says the server answers. Not /configz, /flagz,
// /statusz, /metrics/slis or pprof.
func MetricsHandler(metrics http.Handler, proxyMode string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(PathMetrics, metrics)
	mux.HandleFunc(PathProxyMode, func(w http.ResponseWriter, _ *http.Request) {
		plainText(w)
		fmt.Fprint(w, proxyMode)
	})
	// k8s.io/apiserver's healthz with its one default check, ping.
	mux.HandleFunc(PathHealthz, func(w http.ResponseWriter, r *http.Request) {
		plainText(w)
		if _, verbose := r.URL.Query()["verbose"]; verbose {
			fmt.Fprint(w, "[+]ping ok\nhealthz check passed\n")
			return
		}
		fmt.Fprint(w, "ok")
	})
	mux.HandleFunc(PathHealthzPing, func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "ok")
	})
	return mux
}

func plainText(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
}
