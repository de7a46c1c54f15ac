package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/protocol"
	"github.com/kube-ipvs/kube-ipvs/e2e/bench/result"
)

// serve polls until every Service serves: the kernel table whole (the
// first time it is, the cold start's table time), then every ClusterIP
// bound and the sets and rules in place (IPVS tools), and the sample
// answering from the pod. Each part's time is taken when the read that
// found it whole ended; a part once whole is not read again. Not serving
// within the cold-start bound is a result (-1 and what was missing), not
// an error; a table never whole is an error, as before.
func serve(t *result.Tool, s settings, plan protocol.Plan, name string, obs observer, pn *podNet, pid int, start time.Time, exited chan error) error {
	ipvsTool := name != result.KubeProxyNFT
	want := wantNetfilter(name, plan)
	smp := newSampler(pn.client, plan.VIPs, protocol.Port, s.sample)
	t.SampleSize = len(smp.targets)
	tableAt, addrsAt, setsAt, sampleAt := -1.0, -1.0, -1.0, -1.0
	if !ipvsTool {
		addrsAt, setsAt = 0, 0
	}
	var missing []string
	for {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("exited before every Service served: %v", err)
		default:
		}
		missing = missing[:0]
		if tableAt < 0 {
			r0 := time.Now()
			ok, now, err := obs.full()
			t.ColdPolls++
			t.ColdPollMax = max(t.ColdPollMax, now.Sub(r0).Seconds())
			if err != nil {
				return fmt.Errorf("read the kernel table: %w", err)
			}
			if ok {
				tableAt = now.Sub(start).Seconds()
				t.ColdSeconds = tableAt
				if t.ColdCPU, err = cpuSeconds(pid); err != nil {
					return err
				}
				if t.ColdRSSMB, err = peakRSSMB(pid); err != nil {
					return err
				}
			} else {
				missing = append(missing, "the table is not whole: "+obs.notFull())
			}
		}
		if addrsAt < 0 {
			m, err := addrsMissing(plan.VIPs)
			if err != nil {
				return err
			}
			if m == "" {
				addrsAt = time.Since(start).Seconds()
			} else {
				missing = append(missing, m)
			}
		}
		// The sets, the rules and the sample once the table is whole: each
		// read of them is long at a large N, and reading them earlier would
		// only coarsen the table's time.
		if tableAt >= 0 && setsAt < 0 {
			m, err := netfilterReady(want)
			if err != nil {
				return err
			}
			if m == "" {
				setsAt = time.Since(start).Seconds()
			} else {
				missing = append(missing, m)
			}
		}
		if tableAt >= 0 && sampleAt < 0 {
			t.SampleOK = smp.poll(500 * time.Millisecond)
			if t.SampleOK == t.SampleSize {
				sampleAt = time.Since(start).Seconds()
			} else {
				missing = append(missing, fmt.Sprintf("%d of %d sampled Services answer from a pod", t.SampleOK, t.SampleSize))
			}
		}
		t.AddrsSeconds, t.SetsSeconds, t.SampleSeconds = addrsAt, setsAt, sampleAt
		if tableAt >= 0 && addrsAt >= 0 && setsAt >= 0 && sampleAt >= 0 {
			t.ServeSeconds = max(tableAt, addrsAt, setsAt, sampleAt)
			cpu, err := cpuSeconds(pid)
			if err != nil {
				return err
			}
			t.ServeCPU = cpu
			return nil
		}
		if time.Since(start) > s.coldTimeout {
			t.ServeMissing = strings.Join(missing, "; ")
			if cpu, err := cpuSeconds(pid); err == nil {
				t.ServeCPU = cpu // what not serving cost: a lower bound
			}
			if tableAt < 0 {
				return fmt.Errorf("table not full within %s", s.coldTimeout)
			}
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// kubeWatch follows kubernetes.default and the tool's informer sync from
// the start, beside the cold-start polling.
type kubeWatch struct {
	mu             sync.Mutex
	kube, sync     float64
	from           string
	done, finished chan struct{}
}

// syncLines: the log lines that say a tool's informers have synced, all of
// which must be there. kube-ipvs logs "source synced" once per source
// (Services, EndpointSlices, its Node, the Nodes); kube-proxy logs
// client-go's "Caches are synced" for each config it waits for before its
// first sync (service config, endpoint slice config).
func syncLines(tool string) (contains string, each []string) {
	if tool == result.KubeIPVS {
		return "source synced", []string{`"services"`, `"endpointslices"`, `"node"`, `"nodes"`}
	}
	return "Caches are synced", []string{"service config", "endpoint slice config"}
}

// logSynced: every line syncLines asks for is in log.
func logSynced(log, tool string) bool {
	contains, each := syncLines(tool)
	found := make([]bool, len(each))
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, contains) {
			continue
		}
		for i, e := range each {
			if strings.Contains(l, e) {
				found[i] = true
			}
		}
	}
	for _, f := range found {
		if !f {
			return false
		}
	}
	return true
}

// watchKubernetes polls, every 100 ms from the start: a TLS handshake from
// the pod with kubernetes.default (10.96.0.1:443, the API server behind
// it), and the tool's log for its informers' sync.
func watchKubernetes(d *nsDialer, logPath, tool string, start time.Time, limit time.Duration) *kubeWatch {
	w := &kubeWatch{kube: -1, sync: -1, done: make(chan struct{}), finished: make(chan struct{})}
	contains, each := syncLines(tool)
	w.from = fmt.Sprintf("its log: %q for %s", contains, strings.Join(each, ", "))
	addr := net.JoinHostPort(protocol.KubernetesVIP, fmt.Sprint(protocol.KubernetesPort))
	go func() {
		defer close(w.finished)
		for time.Since(start) < limit {
			w.mu.Lock()
			kube, synced := w.kube, w.sync
			w.mu.Unlock()
			if kube < 0 {
				if err := d.tlsHandshake(addr, 250*time.Millisecond, 3*time.Second); err == nil {
					kube = time.Since(start).Seconds()
				}
			}
			if synced < 0 {
				if data, err := os.ReadFile(logPath); err == nil && logSynced(string(data), tool) {
					synced = time.Since(start).Seconds()
				}
			}
			w.mu.Lock()
			w.kube, w.sync = kube, synced
			w.mu.Unlock()
			if kube >= 0 && synced >= 0 {
				return
			}
			select {
			case <-w.done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return w
}

// wait: the times so far once serving is settled; a watch still without
// both stops (what it never saw stays -1).
func (w *kubeWatch) wait() (kube, synced float64, from string) {
	close(w.done)
	<-w.finished
	w.mu.Lock()
	defer w.mu.Unlock()
	from = w.from
	if w.sync < 0 {
		from = "not in its log (" + from + ")"
	}
	return w.kube, w.sync, from
}

// syncPeriod is every tool's default period of whole syncs or reads of
// the kernel: kube-proxy's --ipvs-sync-period and --nftables-sync-period,
// kube-ipvs's --ipvs-sync-period (its rescan). kube-proxy's nftables
// mode rewrites what someone else changed only in its hourly full sync;
// that is not what its idle window can hold.
const syncPeriod = 30 * time.Second

// reDriftNext: kube-ipvs announces a rescan spaced wider than its
// period ("... waits longer than the sync period" with its "next" wait:
// seconds in its default text format, "next": 610.5, a duration string in
// its JSON format, "next": "10m10.5s").
var reDriftNext = regexp.MustCompile(`waits longer than the sync period.*"next": ?(?:"([^"]+)"|([0-9][0-9.e+-]*))`)

// driftNext is the wait one announcement names, false if unreadable.
func driftNext(g []string) (time.Duration, bool) {
	if g[1] != "" {
		d, err := time.ParseDuration(g[1])
		return d, err == nil
	}
	secs, err := strconv.ParseFloat(g[2], 64)
	return time.Duration(secs * float64(time.Second)), err == nil
}

// driftPeriod is the tool's period of whole reads: the flag's default, or
// for kube-ipvs the longest wait its log has announced.
func driftPeriod(tool, logPath string) time.Duration {
	p := syncPeriod
	if tool != result.KubeIPVS {
		return p
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		return p
	}
	for _, g := range reDriftNext.FindAllStringSubmatch(string(data), -1) {
		if d, ok := driftNext(g); ok && d > p {
			p = d
		}
	}
	return p
}

// metricsURL is /metrics of every tool (kube-proxy's default
// --metrics-bind-address, which kube-ipvs keeps).
const metricsURL = "http://127.0.0.1:10249/metrics"

// scrape reads /metrics (empty when unreadable).
func scrape() string {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(metricsURL)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return string(data)
}

// parseHistogram sums a histogram over its label sets: bucket bound ->
// cumulative count, the count and the sum. ok is false if absent.
func parseHistogram(text, name string) (buckets map[float64]float64, count, sum float64, ok bool) {
	buckets = map[float64]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name+"_") {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(l, name+"_bucket{"):
			i := strings.Index(l, `le="`)
			if i < 0 {
				continue
			}
			le := l[i+4:]
			le = le[:strings.IndexByte(le, '"')]
			b, err := strconv.ParseFloat(le, 64) // "+Inf" parses
			if err != nil {
				continue
			}
			buckets[b] += v
			ok = true
		case strings.HasPrefix(l, name+"_count"):
			count += v
			ok = true
		case strings.HasPrefix(l, name+"_sum"):
			sum += v
		}
	}
	return buckets, count, sum, ok
}

// histDelta is histogram name's change from before to after (nil if after
// lacks it: kube-proxy shows a vector metric only once observed).
func histDelta(before, after, name string) *result.Histogram {
	b1, c1, s1, ok := parseHistogram(after, name)
	if !ok {
		return nil
	}
	b0, c0, s0, _ := parseHistogram(before, name)
	h := &result.Histogram{Count: c1 - c0, Sum: s1 - s0}
	for b := range b1 {
		if !math.IsInf(b, 1) { // JSON has no infinity; the count holds the +Inf bucket
			h.Bounds = append(h.Bounds, b)
		}
	}
	sort.Float64s(h.Bounds)
	for _, b := range h.Bounds {
		h.Buckets = append(h.Buckets, b1[b]-b0[b])
	}
	return h
}

func countOf(h *result.Histogram) float64 {
	if h == nil {
		return math.NaN()
	}
	return h.Count
}
