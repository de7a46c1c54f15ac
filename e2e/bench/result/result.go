// Package result holds what one `make bench` run measures: the guest fills
// it in per tool, the host driver adds the run's context, and the report
// reads it back. JSON, so a run's raw numbers can be kept next to the doc.
package result

import (
	"math"
	"sort"
	"time"
)

// Tools, in the order a run measures them.
const (
	KubeProxyIPVS = "kube-proxy-ipvs"
	KubeProxyNFT  = "kube-proxy-nftables"
	KubeIPVS      = "kube-ipvs"
)

// Variants: where the endpoints are (Run.Variant; "1 in K on the node"
// for a share).
const (
	VariantNoNode   = "no node named"
	VariantAllLocal = "all on the node"
)

// Run is one VM boot at one N and one variant: every tool, one after the
// other, RunsRequested times (the order alternating).
type Run struct {
	N                int       `json:"n"`
	EndpointsPerSvc  int       `json:"endpoints_per_service"`
	Started          time.Time `json:"started"`
	WallSeconds      float64   `json:"wall_seconds"`         // host: fill + boot + every tool
	FillSeconds      float64   `json:"fill_seconds"`         // host: Services and EndpointSlices written
	Machine          Machine   `json:"machine"`              // the host
	Versions         Versions  `json:"versions"`             // host and guest
	ChangesRequested int       `json:"changes_requested"`    // per tool
	ChangeSpacing    float64   `json:"change_spacing_s"`     // start to start
	BurstRequested   int       `json:"burst_requested"`      // changes in the burst
	IdleSeconds      float64   `json:"idle_window_s"`        // the idle window
	ChangeBudget     float64   `json:"change_budget_s"`      // a tool's change series stops after this (0: none)
	ChangeTimeout    float64   `json:"change_timeout_s"`     // a change not seen by then is a timeout (0: not recorded)
	ColdTimeout      float64   `json:"cold_timeout_s"`       // a tool not serving by then is recorded as not serving (0: not recorded)
	Variant          string    `json:"variant"`              // where the endpoints are
	LocalEvery       int       `json:"local_every"`          // one endpoint in this many names the node (0: none)
	RunsRequested    int       `json:"runs_requested"`       // runs of every tool
	SampleRequested  int       `json:"sample_requested"`     // Services asked from a pod before serving counts
	RollSizes        []int     `json:"roll_sizes,omitempty"` // the rolled Services' endpoints, each rolled in turn
	RollFor          float64   `json:"roll_for_s,omitempty"` // how long each rolling update went on
	RollRest         float64   `json:"roll_rest,omitempty"`  // the observer's wait after each read of the rolled Service, in reads
	Tools            []Tool    `json:"tools"`                // in the order measured, every run
	Notes            []string  `json:"notes,omitempty"`      // anything that went wrong around the tools
	GuestKernel      string    `json:"guest_kernel"`         // uname -r in the VM
	GuestCPUs        int       `json:"guest_cpus"`           // in the VM
	GuestMemMB       int       `json:"guest_mem_mb"`         // in the VM
}

// Machine is the host the VM ran on.
type Machine struct {
	NProc    int    `json:"nproc"`
	CPUModel string `json:"cpu_model"`
	Load1    string `json:"load_at_start"` // /proc/loadavg when the run began: how shared the machine was
}

// Versions of everything in the comparison.
type Versions struct {
	KubeIPVS      string `json:"kube_ipvs"`
	KubeProxy     string `json:"kube_proxy"`
	KubeAPIServer string `json:"kube_apiserver"`
	Nft           string `json:"nft"`
	Go            string `json:"go"`
}

// Tool is everything measured for one tool at one N.
type Tool struct {
	Name      string   `json:"name"`
	Error     string   `json:"error,omitempty"` // the measurement could not finish
	Log       []string `json:"log_tail,omitempty"`
	LogErrors int      `json:"log_errors"` // error lines in the tool's log
	Run       int      `json:"run"`        // 1..RunsRequested
	Order     int      `json:"order"`      // 1: measured first in its run

	// Time to serve: process start until every Service serves (the kernel
	// table whole, every ClusterIP bound on kube-ipvs0 for the IPVS tools,
	// their sets and nat rules in place) and every Service of the sample
	// has answered through its ClusterIP from a pod. -1: not within the
	// cold-start bound. Each part's own time beside it (-1: never whole).
	ServeSeconds  float64 `json:"serve_s"`
	ServeCPU      float64 `json:"serve_cpu_s"` // not serving: the CPU at the bound, a lower bound
	AddrsSeconds  float64 `json:"addrs_s"`     // every ClusterIP bound (IPVS tools; 0 for nftables mode)
	SetsSeconds   float64 `json:"sets_s"`      // sets and rules in place (IPVS tools; 0 for nftables mode)
	SampleSeconds float64 `json:"sample_s"`    // the last of the sample answered
	SampleSize    int     `json:"sample_size"` // Services in the sample
	SampleOK      int     `json:"sample_ok"`   // of them, answered
	ServeMissing  string  `json:"serve_missing,omitempty"`

	// kubernetes.default: process start until a pod completes a TLS
	// handshake with the API server through 10.96.0.1:443 (-1: never);
	// SyncSeconds: process start until the tool's log says its informers
	// have synced (-1: not in its log; SyncFrom says which lines).
	KubernetesSeconds float64 `json:"kubernetes_s"`
	SyncSeconds       float64 `json:"sync_s"`
	SyncFrom          string  `json:"sync_from"`

	// Cold start: process start to the full table in the kernel.
	ColdSeconds float64 `json:"cold_s"`
	ColdCPU     float64 `json:"cold_cpu_s"`    // utime+stime, children included
	ColdRSSMB   float64 `json:"cold_rss_mb"`   // VmHWM when the table was full
	ColdPolls   int     `json:"cold_polls"`    // kernel reads while waiting
	ColdPollMax float64 `json:"cold_poll_max"` // slowest single read: the resolution

	// Start work done: from process start until the tool went quiet
	// (under 10% of a CPU over 5 s) after the full table; -1: never did
	// within the limit. SettleCPU is its CPU by then.
	SettleSeconds float64 `json:"settle_s"`
	SettleCPU     float64 `json:"settle_cpu_s"`

	// Idle: CPU over a window with no change at all, once quiet.
	IdleCPU float64 `json:"idle_cpu_s"`
	// IdleSlices is the idle window's CPU in consecutive 10 s slices:
	// whether it was spread or one piece of work (a periodic read) in it.
	IdleSlices []float64 `json:"idle_slices_cpu_s,omitempty"`
	// IdleWindow is the window's length: twice the tool's period of whole
	// reads of the kernel (DriftPeriod, from its flags or, for kube-ipvs,
	// the longer wait its log announces), at least the run's idle setting,
	// at most its bound (IdleShort then: fewer than two periods).
	IdleWindow  float64 `json:"idle_window_s"`
	DriftPeriod float64 `json:"drift_period_s"`
	IdleShort   bool    `json:"idle_short,omitempty"`

	// One endpoint change at a time, spaced; latency = API write sent to
	// the change seen in the kernel. A change not seen within the timeout
	// counts as a timeout (not in Latencies).
	Latencies     []float64 `json:"latencies_s"`
	Timeouts      int       `json:"timeouts"`
	ChangesCPU    float64   `json:"changes_cpu_s"`   // over the whole series
	ChangesWall   float64   `json:"changes_wall_s"`  // the series' duration
	OpsPerChange  float64   `json:"ops_per_change"`  // kube-ipvs: kernel operations per change (-1: not known)
	ObservePollMs float64   `json:"observe_poll_ms"` // median time of one single-service kernel read
	// kube-proxy's own view of the change series (its /metrics, the
	// series' delta): kubeproxy_sync_proxy_rules_duration_seconds and
	// kubeproxy_network_programming_duration_seconds. Nil when absent.
	SyncRules  *Histogram `json:"sync_rules,omitempty"`
	NetProgram *Histogram `json:"network_programming,omitempty"`

	// A burst of changes written concurrently: first write sent to all seen.
	BurstCount   int     `json:"burst_count"`
	BurstWrite   float64 `json:"burst_write_s"` // host: all writes acknowledged
	BurstSeconds float64 `json:"burst_s"`       // -1: not converged within the timeout
	BurstCPU     float64 `json:"burst_cpu_s"`
	BurstOps     float64 `json:"burst_ops"` // kube-ipvs: kernel operations for the burst (-1: not known)
	BurstPollMax float64 `json:"burst_poll_max_s"`
	PeakRSSMB    float64 `json:"peak_rss_mb"` // VmHWM at the end, before the full sync below

	// One full sync at rest, kube-proxy's nftables mode only, its last
	// step: that mode repairs what someone else changed only by a full
	// sync once an hour, which no idle window holds, so the sync is
	// brought forward (its own Node's topology.kubernetes.io/zone label
	// changed, which makes it do one at once) and measured apart. CPU and
	// wall time from the label's change until its
	// kubeproxy_sync_full_proxy_rules_duration_seconds count grew in
	// every IP family; FullSyncOwn is that histogram's sum over them (its
	// own duration) and FullSyncs its count. FullSyncSeconds ≤ 0: not
	// measured (-1, or absent from a result written before).
	FullSyncCPU     float64 `json:"full_sync_cpu_s"`
	FullSyncSeconds float64 `json:"full_sync_s"`
	FullSyncOwn     float64 `json:"full_sync_own_s"`
	FullSyncs       int     `json:"full_syncs"`

	// Rolling updates of one large Service, the IPVS tools' last step:
	// one per size asked for, in that order.
	Rolls []Roll `json:"rolls,omitempty"`
}

// Roll is one rolling update of a Service of Size endpoints (slices of
// 100): pods replaced 10 at a time every 100 ms, each step asked of the
// host at a fixed rate whether or not the ones before were seen. A step's
// lag is from when the guest asked for it until the kernel showed all of
// it (its new pods at a weight above 0, its terminating and removed ones
// at 0 or gone); one not seen within the run's change timeout counts in
// Timeouts instead. CPU is the tool's over exactly the steps' period.
type Roll struct {
	Size            int       `json:"size"`
	ServeSeconds    float64   `json:"serve_s"` // created until every endpoint is live in the kernel; -1: not within the timeout
	Steps           int       `json:"steps"`
	EndpointChanges int       `json:"endpoint_changes"` // over every step
	Lags            []float64 `json:"lags_s"`
	Timeouts        int       `json:"timeouts"`
	CPU             float64   `json:"cpu_s"`
	// System is the part of CPU spent in the kernel on the tool's behalf:
	// for the IPVS tools mostly IPVS itself, which finds a virtual
	// server's real server by walking its list on every add, change and
	// delete, and lists them all for every read of its counters.
	System   float64 `json:"system_cpu_s"`
	Wall     float64 `json:"wall_s"`
	WriteMax float64 `json:"write_max_s"` // the host's slowest step (every slice write acknowledged)
	PollMs   float64 `json:"poll_ms"`     // median time of one read of the Service's real servers
}

// CPUPerChange is the roll's CPU per endpoint change, in seconds (NaN if
// not measured).
func (r Roll) CPUPerChange() float64 {
	if r.EndpointChanges == 0 || r.Wall <= 0 {
		return math.NaN()
	}
	return r.CPU / float64(r.EndpointChanges)
}

// UserPerChange is CPUPerChange without the system time: the tool's own
// work per endpoint change.
func (r Roll) UserPerChange() float64 {
	return r.CPUPerChange() - r.System/float64(max(r.EndpointChanges, 1))
}

// Histogram is a Prometheus histogram's delta over a window: the count,
// the sum and the cumulative buckets of its finite upper bounds (the
// count is the +Inf bucket).
type Histogram struct {
	Count   float64   `json:"count"`
	Sum     float64   `json:"sum"`
	Bounds  []float64 `json:"bounds"`
	Buckets []float64 `json:"buckets"` // cumulative, per bound
}

// Quantile is the upper bound of the bucket holding quantile q (0..1):
// the histogram says no more precisely. NaN when empty; +Inf when it falls
// past the largest finite bound.
func (h *Histogram) Quantile(q float64) float64 {
	if h == nil || h.Count == 0 {
		return math.NaN()
	}
	rank := q * h.Count
	for i, c := range h.Buckets {
		if c >= rank {
			return h.Bounds[i]
		}
	}
	return math.Inf(1)
}

// QuantileAbove is the lower bound of the bucket holding quantile q: the
// histogram says the quantile is above it (0 in the first bucket). NaN
// when empty.
func (h *Histogram) QuantileAbove(q float64) float64 {
	if h == nil || h.Count == 0 {
		return math.NaN()
	}
	rank, below := q*h.Count, 0.0
	for i, c := range h.Buckets {
		if c >= rank {
			return below
		}
		below = h.Bounds[i]
	}
	return below
}

// Mean is the sum over the count (NaN when empty).
func (h *Histogram) Mean() float64 {
	if h == nil || h.Count == 0 {
		return math.NaN()
	}
	return h.Sum / h.Count
}

// CPUPerMinute of the change series: its CPU over its wall time, per
// minute (the changes come at a fixed rate, so this is what that rate
// costs, whatever the tool kept up with). NaN if not measured.
func (t Tool) CPUPerMinute() float64 {
	if t.ChangesWall <= 0 {
		return math.NaN()
	}
	return t.ChangesCPU / t.ChangesWall * 60
}

// IdlePerMinute is the idle window's CPU per minute (NaN if not measured).
func (t Tool) IdlePerMinute() float64 {
	if t.IdleWindow <= 0 {
		return math.NaN()
	}
	return t.IdleCPU / t.IdleWindow * 60
}

// HourPerMinute is the tool's CPU a minute at rest averaged over an hour,
// its drift repair included. kube-proxy's nftables mode repairs drift by
// one full sync an hour: the idle window's rate over the hour but the
// sync's wall time, plus that sync's CPU, per minute. The other tools read the whole kernel
// every DriftPeriod, and their idle window holds at least two of those
// reads: the window's minute is already the hour's. NaN when not measured:
// no idle window, nftables mode's full sync missing, or another tool's
// window shorter than two of its periods.
func (t Tool) HourPerMinute() float64 {
	idle := t.IdlePerMinute()
	if t.Name == KubeProxyNFT {
		if t.FullSyncSeconds <= 0 {
			return math.NaN()
		}
		return idle*(1-t.FullSyncSeconds/3600) + t.FullSyncCPU/60
	}
	if t.IdleShort {
		return math.NaN()
	}
	return idle
}

// Percentile is the nearest-rank percentile (p in 0..100) of xs; NaN if empty.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	if rank < 1 {
		rank = 1
	}
	if rank > len(s) {
		rank = len(s)
	}
	return s[rank-1]
}

// CensoredPercentile is the nearest-rank percentile over every change,
// seen or not, where each of the timeouts is known only to have taken at
// least timeout (a change not seen in time is slower than every one seen).
// atLeast says the rank fell on a timeout, so the value is a lower bound:
// a tool that saw none of its changes still has a p99, "at least the
// timeout", which is what it showed. NaN if there is nothing to rank, or
// if the rank falls on a timeout whose bound was not recorded.
func CensoredPercentile(xs []float64, timeouts int, timeout, p float64) (v float64, atLeast bool) {
	n := len(xs) + timeouts
	if n == 0 {
		return math.NaN(), false
	}
	rank := min(max(int(math.Ceil(p/100*float64(n))), 1), n)
	if rank <= len(xs) {
		s := append([]float64(nil), xs...)
		sort.Float64s(s)
		return s[rank-1], false
	}
	if timeout <= 0 {
		return math.NaN(), false
	}
	return timeout, true
}

// Max of xs; NaN if empty.
func Max(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	m := xs[0]
	for _, x := range xs[1:] {
		m = math.Max(m, x)
	}
	return m
}

// All returns every run of the tool named name, in run order.
func (r Run) All(name string) []Tool {
	var out []Tool
	for _, t := range r.Tools {
		if t.Name == name {
			out = append(out, t)
		}
	}
	return out
}

// Find returns the tool named name, if measured (its first run).
func (r Run) Find(name string) (Tool, bool) {
	for _, t := range r.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}
