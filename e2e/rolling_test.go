package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// Scenario 4: a rolling update with zero failed requests. A client opens
// connections without pause while the three backends are replaced one by
// one, the way a Deployment does it: the new pod becomes ready, the old one
// turns terminating, leaves the slice, and its process stops after a grace
// delay.
func TestRollingUpdate(t *testing.T) {
	s := setup(t)
	old := s.startBackends(t, "ra", 4, 3)
	// The drain timeout bounds how long removed backends linger at weight
	// 0 (the client's closed connections sit in TIME_WAIT for two minutes).
	svc := tcpService("roll", "10.96.4.1", old).annotated(map[string]string{annDrainTimeout: "10s"})
	s.ready(t, svc, old...)

	load := startLoad(s, svc.target())
	defer load.stop()

	const grace = 2 * time.Second
	current := append([]*backend(nil), old...)
	var fresh []*backend
	for i, o := range old {
		n := s.startBackend(t, fmt.Sprintf("rb-%d", i+1), fmt.Sprintf("10.244.4.%d", 11+i))
		fresh = append(fresh, n)
		step := func(what string, eps []endpoint, w want) {
			t.Helper()
			s.put(t, svc.with(eps...))
			// Backends removed earlier may still drain at weight 0.
			took := waitTable(t, fmt.Sprintf("%s to hold %v", svc.vs(), w),
				func(tab table) bool { return tab.holds(svc.vs(), w) }, svc.vs())
			t.Logf("step %d: %s (%s; %d requests so far)", i+1, what, took.Round(time.Millisecond), load.count())
		}
		// 1. the new endpoint joins, ready.
		current = append(current, n)
		step(n.name+" ready", endpointsOf(current, nil), allAt(svc, 1, current...))
		// 2. the old one turns terminating: weight 0.
		w := allAt(svc, 1, current...)
		w[svc.real(o.addr)] = 0
		step(o.name+" terminating", endpointsOf(current, o), w)
		// 3. it leaves the slice; the agent keeps it at weight 0 to drain.
		current = without(current, o)
		s.put(t, svc.with(endpointsOf(current, nil)...))
		// 4. its process stops after the grace delay (a pod's
		// terminationGracePeriod; not a wait for the agent).
		time.Sleep(grace)
		if err := o.stop(); err != nil {
			t.Fatalf("stopping %s: %v", o.name, err)
		}
		t.Logf("step %d: %s removed from the slice and stopped %s later (%d requests so far)", i+1, o.name, grace, load.count())
	}
	took := waitReals(t, svc, allAt(svc, 1, fresh...))
	t.Logf("the old backends left the kernel %s after the last step", took.Round(time.Millisecond))
	// Some more requests against the new set only.
	load.waitMore(50)
	load.stop()

	got, failures := load.result()
	total := 0
	for _, c := range got {
		total += c
	}
	t.Logf("rolling update: %d requests, %d failed; answered by: %s", total+len(failures), len(failures), got)
	for i, f := range failures {
		if i == 10 {
			t.Logf("... %d more", len(failures)-10)
			break
		}
		t.Logf("failure: %s", f)
	}
	if len(failures) > 0 {
		t.Errorf("%d of %d requests failed during the rolling update", len(failures), total+len(failures))
	}
	for _, b := range fresh {
		if got[b.name] == 0 {
			t.Errorf("the new backend %s never answered (%s)", b.name, got)
		}
	}
}

// endpointsOf lists bs as ready endpoints, except term, which is terminating.
func endpointsOf(bs []*backend, term *backend) []endpoint {
	var eps []endpoint
	for _, b := range bs {
		e := endpoint{addr: b.addr}
		if b == term {
			e.state = terminating
		}
		eps = append(eps, e)
	}
	return eps
}

// load is a client opening one connection after another until stopped.
type load struct {
	stopOnce sync.Once
	quit     chan struct{}
	done     chan struct{}

	mu       sync.Mutex
	got      tally
	failures []string
}

func startLoad(s *suite, dst string) *load {
	l := &load{quit: make(chan struct{}), done: make(chan struct{}), got: tally{}}
	start := time.Now()
	go func() {
		defer close(l.done)
		for {
			select {
			case <-l.quit:
				return
			default:
			}
			t0 := time.Now()
			name, err := s.client.ask("", dst, 5*time.Second)
			l.mu.Lock()
			if err != nil {
				l.failures = append(l.failures, fmt.Sprintf("at %s after %s: %v",
					t0.Sub(start).Round(time.Millisecond), time.Since(t0).Round(time.Millisecond), err))
			} else {
				l.got[name]++
			}
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *load) stop() {
	l.stopOnce.Do(func() { close(l.quit) })
	<-l.done
}

func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.failures)
	for _, c := range l.got {
		n += c
	}
	return n
}

// waitMore waits until n more requests have been made (bounded).
func (l *load) waitMore(n int) {
	target := l.count() + n
	_, _ = waitFor(settle, func() (bool, string) { return l.count() >= target, "" })
}

func (l *load) result() (tally, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.got, l.failures
}
