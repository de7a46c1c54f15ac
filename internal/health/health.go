// Package health judges the agent's health the way kube-proxy does and
// answers kube-proxy's /healthz and /livez with its status codes, headers
// and JSON (pkg/proxy/healthcheck/proxy_health.go), so that probes and
// cloud load balancers set up for kube-proxy read kube-ipvs unchanged.
//
// The rule: the agent is unhealthy when a change it was told about has
// waited longer than the timeout (kube-proxy: twice the sync period)
// without a successful sync. A sync that fails with nothing queued, or a
// change that is merely slow, is not unhealthy. /healthz also reports the
// Node's eligibility for load-balancer traffic and fails when it is not
// eligible; /livez ignores it, so a draining node is not restarted.
package health

import (
	"sync/atomic"
	"time"
)

// Tracker follows queued changes and syncs. Its methods are safe from any
// goroutine and take no lock: a sync stuck in the kernel never stalls a
// probe. SyncBegan and SyncEnded are called by the one goroutine that
// syncs: the tracker listens to the syncs.
type Tracker struct {
	now      func() time.Time
	timeout  time.Duration
	families []string

	// Unix nanoseconds; 0 is unset.
	pending  atomic.Int64 // oldest change queued and not yet taken by a sync
	inflight atomic.Int64 // oldest change taken by a sync that has not succeeded
	updated  atomic.Int64 // when a sync last succeeded (or the agent started)
}

// Options configure a Tracker.
type Options struct {
	// Timeout is how long a queued change may wait for a successful sync;
	// kube-proxy uses twice its sync period.
	Timeout time.Duration
	// Families are the IP families the agent programs, as kube-proxy names
	// them ("IPv4", "IPv6"): each gets an entry in the answer's status,
	// as each of kube-proxy's per-family proxiers does. One sync programs
	// both, so both entries say the same.
	Families []string
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// New returns a tracker of an agent that has not started.
func New(opt Options) *Tracker {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return &Tracker{now: opt.Now, timeout: opt.Timeout, families: opt.Families}
}

// Start marks the agent's sync loop started. As kube-proxy's does, it
// counts as an update (so that an agent whose first sync never succeeds
// is judged from now), and the initial state the sources are loading
// counts as a queued change: if the first sync does not succeed within
// the timeout, the agent is unhealthy.
func (t *Tracker) Start() {
	t.updated.Store(t.now().UnixNano())
	t.Queued()
}

// Queued notes that a change arrived that a sync has yet to program. Only
// the oldest waiting change counts.
func (t *Tracker) Queued() {
	t.pending.CompareAndSwap(0, t.now().UnixNano())
}

// SyncBegan notes that a sync starts: it takes every change queued so
// far. Changes queued from now on wait for the next sync.
func (t *Tracker) SyncBegan() {
	p := t.pending.Load()
	if p == 0 {
		return
	}
	// inflight first, then clear pending: a reader in between sees the
	// change twice, never not at all.
	if i := t.inflight.Load(); i == 0 || p < i {
		t.inflight.Store(p)
	}
	t.pending.CompareAndSwap(p, 0) // only SyncBegan clears it: cannot fail
}

// SyncEnded notes that the sync begun last ended. When it succeeded, the
// changes it took are programmed; when it failed they still wait, and the
// next sync takes them again.
func (t *Tracker) SyncEnded(err error) {
	if err != nil {
		return
	}
	t.updated.Store(t.now().UnixNano())
	t.inflight.Store(0)
}

// Healthy is the agent's health ignoring the Node: what kube-proxy's
// health-check node ports report as serviceProxyHealthy.
func (t *Tracker) Healthy() bool { return t.Report().Healthy }

// Report is the body of /healthz and /livez: kube-proxy's ProxyHealth,
// field for field and in its order.
type Report struct {
	// LastUpdated is when a sync last succeeded; while healthy, kube-proxy
	// answers the current time instead (older releases' meaning).
	LastUpdated time.Time `json:"lastUpdated"`
	CurrentTime time.Time `json:"currentTime"`
	// NodeEligible is set on /healthz only.
	NodeEligible *bool             `json:"nodeEligible,omitempty"`
	Healthy      bool              `json:"healthy"`
	Status       map[string]Family `json:"status,omitempty"`
}

// Family is the health of one IP family's programming.
type Family struct {
	LastUpdated time.Time `json:"lastUpdated"`
	Healthy     bool      `json:"healthy"`
}

// Report judges the health now. Before Start it is healthy with no
// families, as kube-proxy is before its sync loop runs.
func (t *Tracker) Report() Report {
	now := t.now()
	r := Report{CurrentTime: now, Healthy: true}
	updated := t.updated.Load()
	if updated == 0 {
		return r
	}
	r.LastUpdated = time.Unix(0, updated)
	r.Healthy = !t.late(now)
	r.Status = make(map[string]Family, len(t.families))
	for _, f := range t.families {
		r.Status[f] = Family{LastUpdated: r.LastUpdated, Healthy: r.Healthy}
	}
	return r
}

// late tells whether the oldest change not yet programmed has waited the
// timeout or longer.
func (t *Tracker) late(now time.Time) bool {
	oldest := t.inflight.Load()
	if p := t.pending.Load(); p != 0 && (oldest == 0 || p < oldest) {
		oldest = p
	}
	return oldest != 0 && now.Sub(time.Unix(0, oldest)) >= t.timeout
}
