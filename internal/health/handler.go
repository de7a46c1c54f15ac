package health

import (
	"encoding/json"
	"net/http"
)

// Paths kube-proxy's health server answers.
const (
	PathHealthz = "/healthz"
	PathLivez   = "/livez"
)

// HandlerOptions configure Handler.
type HandlerOptions struct {
	// NodeEligible tells whether this node may take load-balancer traffic
	// (see NodeEligible); nil means always.
	NodeEligible func() bool
	// Answered, when set, is told the path and status code of every
	// answer (kube-proxy counts them in kubeproxy_healthz_total and
	// kubeproxy_livez_total).
	Answered func(path string, code int)
}

// Handler serves /healthz and /livez from t, on any method, as kube-proxy
// does.
func Handler(t *Tracker, opt HandlerOptions) http.Handler {
	if opt.NodeEligible == nil {
		opt.NodeEligible = func() bool { return true }
	}
	if opt.Answered == nil {
		opt.Answered = func(string, int) {}
	}
	mux := http.NewServeMux()
	mux.HandleFunc(PathHealthz, func(w http.ResponseWriter, _ *http.Request) {
		r := t.Report()
		eligible := opt.NodeEligible()
		r.NodeEligible = &eligible
		opt.Answered(PathHealthz, answer(w, r, r.Healthy && eligible))
	})
	mux.HandleFunc(PathLivez, func(w http.ResponseWriter, _ *http.Request) {
		r := t.Report()
		opt.Answered(PathLivez, answer(w, r, r.Healthy))
	})
	return mux
}

// answer writes r with kube-proxy's headers: 200 when ok, else 503. It
// returns the code written.
func answer(w http.ResponseWriter, r Report, ok bool) int {
	code := http.StatusServiceUnavailable
	if ok {
		code = http.StatusOK
		// kube-proxy answers "now" while healthy, as its releases before
		// per-family health did; the real time is in status.
		r.LastUpdated = r.CurrentTime
	}
	body, _ := json.Marshal(r) // times, bools and strings: cannot fail
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(body)
	return code
}
