package main

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"sort"
	"syscall"
	"time"

	"github.com/moby/ipvs"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/protocol"
	"github.com/kube-ipvs/kube-ipvs/e2e/bench/result"
)

// rollInterval spaces the steps: a batch of protocol.RollBatch pods every
// 100 ms is 100 pods a second.
const rollInterval = 100 * time.Millisecond

// rolls rolls one Service of each size in s.rollSizes in turn, each
// created for it and deleted after.
func rolls(t *result.Tool, s settings, o *ipvsObserver, pid int, name string) error {
	for _, size := range s.rollSizes {
		r, err := roll(s, o, pid, size)
		t.Rolls = append(t.Rolls, r)
		if err != nil {
			return err
		}
		fmt.Printf("bench-guest: %s: rolling update of %d endpoints (live after %.1f s): %d steps, lag p50 %.3f s, p99 %.3f s, max %.3f s, %d not seen; %.2f CPU-s (%.2f of it system) over %.0f s, %.0f µs per endpoint change; host writes ≤ %.3f s, reads %.1f ms\n",
			name, size, r.ServeSeconds, r.Steps, result.Percentile(r.Lags, 50), result.Percentile(r.Lags, 99), result.Max(r.Lags), r.Timeouts,
			r.CPU, r.System, r.Wall, r.CPUPerChange()*1e6, r.WriteMax, r.PollMs)
	}
	return nil
}

// roll creates a Service of size endpoints, waits until all of them are
// live, rolls it for s.rollFor and deletes it.
func roll(s settings, o *ipvsObserver, pid, size int) (r result.Roll, err error) {
	r = result.Roll{Size: size, ServeSeconds: -1}
	var ro protocol.Roll
	created := time.Now()
	if err := call("POST", fmt.Sprintf("%s%s?size=%d", s.ctl, protocol.PathRoll, size), nil, &ro); err != nil {
		return r, err
	}
	defer func() {
		if derr := call("DELETE", s.ctl+protocol.PathRoll+"?name="+url.QueryEscape(ro.Name), nil, nil); derr != nil && err == nil {
			err = derr
		}
		// The next one starts on a table without this one.
		waitGone(o, ro.VIP, s.changeTimeout)
	}()
	for time.Since(created) < s.coldTimeout {
		reals, err := o.reals(ro.VIP)
		if err != nil {
			return r, err
		}
		if live(reals) == size {
			r.ServeSeconds = time.Since(created).Seconds()
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r.ServeSeconds < 0 {
		return r, nil
	}
	err = steps(&r, s, o, pid, ro)
	return r, err
}

// pendingStep is a step asked for and not yet seen.
type pendingStep struct {
	st    protocol.RollStep
	start time.Time
}

// steps asks for a step every rollInterval for s.rollFor, whether or not
// the ones before were seen, reading the Service's real servers between
// asks, then waits for the ones still unseen up to the change timeout.
func steps(r *result.Roll, s settings, o *ipvsObserver, pid int, ro protocol.Roll) error {
	u0, s0, err := cpuSplit(pid)
	if err != nil {
		return err
	}
	want := int(s.rollFor / rollInterval)
	series := time.Now()
	var wait []pendingStep
	var polls []float64
	var nextRead time.Time // the observer rests until then (s.rollRest)
	cpuTaken := false
	end := series.Add(time.Duration(want) * rollInterval)
	for {
		now := time.Now()
		issuing := r.Steps < want
		if !issuing && !cpuTaken && !now.Before(end) {
			u1, s1, err := cpuSplit(pid)
			if err != nil {
				return err
			}
			r.CPU, r.System, r.Wall, cpuTaken = u1-u0+s1-s0, s1-s0, now.Sub(series).Seconds(), true
		}
		if issuing && !now.Before(series.Add(time.Duration(r.Steps)*rollInterval)) {
			var st protocol.RollStep
			q := url.Values{"name": {ro.Name}, protocol.TriggerParam: {now.UTC().Format(time.RFC3339Nano)}}
			if err := call("POST", s.ctl+protocol.PathRollStep+"?"+q.Encode(), nil, &st); err != nil {
				return err
			}
			wait = append(wait, pendingStep{st: st, start: now})
			r.Steps++
			r.EndpointChanges += st.EndpointChanges()
			r.WriteMax = max(r.WriteMax, st.WriteSeconds)
			continue // catch up on the schedule before reading
		}
		if !issuing && cpuTaken && len(wait) == 0 {
			break
		}
		if len(wait) > 0 && !now.Before(nextRead) {
			r0 := time.Now()
			reals, err := o.reals(ro.VIP)
			if err != nil {
				return err
			}
			at := time.Now()
			polls = append(polls, at.Sub(r0).Seconds()*1000)
			wait = seenSteps(r, wait, reals, at, s.changeTimeout)
			nextRead = restUntil(r0, at, s.rollRest)
		}
		// Until the next step is due, or, all asked, the steps' period
		// ends; after it, the reads are spaced as the single changes' are.
		if d := time.Until(series.Add(time.Duration(r.Steps) * rollInterval)); d > 0 {
			time.Sleep(min(d, 20*time.Millisecond))
		} else if !issuing {
			time.Sleep(10 * time.Millisecond)
		}
	}
	sort.Float64s(polls)
	if len(polls) > 0 {
		r.PollMs = polls[len(polls)/2]
	}
	return nil
}

// restUntil is when the observer may read the rolled Service again after
// a read from start to end: rest times the read's own time later. A read
// of a large Service holds the kernel's IPVS lock for every datagram it
// fills and a CPU for all of it, so reads back to back (rest 0) take a
// share of the machine the tool under test then lacks; a rest of 1 holds
// the observer to about half of one CPU, at the cost of seeing a step up to
// one more read's time late.
func restUntil(start, end time.Time, rest float64) time.Time {
	return end.Add(time.Duration(rest * float64(end.Sub(start))))
}

// seen records the steps the kernel shows at time at, and those waited
// for longer than timeout, and returns the rest.
func seenSteps(r *result.Roll, wait []pendingStep, reals map[netip.Addr]int, at time.Time, timeout time.Duration) []pendingStep {
	left := wait[:0]
	for _, p := range wait {
		switch {
		case stepSeen(reals, p.st):
			r.Lags = append(r.Lags, at.Sub(p.start).Seconds())
		case at.Sub(p.start) > timeout:
			r.Timeouts++
		default:
			left = append(left, p)
		}
	}
	return left
}

// stepSeen: every new pod takes traffic, and none of the pods that turned
// terminating or left does (weight 0, or gone).
func stepSeen(reals map[netip.Addr]int, st protocol.RollStep) bool {
	for _, a := range st.Add {
		if reals[netip.MustParseAddr(a)] <= 0 {
			return false
		}
	}
	for _, list := range [][]string{st.Terminating, st.Removed} {
		for _, a := range list {
			if reals[netip.MustParseAddr(a)] > 0 {
				return false
			}
		}
	}
	return true
}

// live counts the real servers at a weight above 0.
func live(reals map[netip.Addr]int) int {
	n := 0
	for _, w := range reals {
		if w > 0 {
			n++
		}
	}
	return n
}

// waitGone waits up to limit for the virtual server of vip to leave the
// kernel.
func waitGone(o *ipvsObserver, vip string, limit time.Duration) {
	for start := time.Now(); time.Since(start) < limit; time.Sleep(200 * time.Millisecond) {
		if reals, err := o.reals(vip); err == nil && reals == nil {
			return
		}
	}
}

// reals reads the real servers of the virtual server vip:protocol.Port
// over netlink: address -> weight; nil when there is no such virtual
// server.
func (o *ipvsObserver) reals(vip string) (map[netip.Addr]int, error) {
	vs := &ipvs.Service{AddressFamily: syscall.AF_INET, Protocol: syscall.IPPROTO_TCP, Address: net.ParseIP(vip), Port: protocol.Port}
	if !o.h.IsServicePresent(vs) {
		return nil, nil
	}
	dests, err := o.h.GetDestinations(vs)
	if err != nil {
		return nil, fmt.Errorf("read the real servers of %s: %w", vip, err)
	}
	reals := make(map[netip.Addr]int, len(dests))
	for _, d := range dests {
		if a, ok := netip.AddrFromSlice(d.Address.To4()); ok {
			reals[a] = d.Weight
		}
	}
	return reals, nil
}
