package multinode

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// answer is what one request got: the backend's name and the peer address
// it saw (the client's own, or a masquerading node's).
type answer struct {
	backend, peer, target string
}

// ask makes one request from namespace ns: TCP opens a connection and reads
// the echo tool's greeting "NAME from PEER"; UDP sends a datagram from a new
// source port and reads the answer.
func ask(ctx context.Context, from, network, target string, timeout time.Duration) (answer, error) {
	c, err := dialIn(ctx, from, network, target, timeout)
	if err != nil {
		return answer{}, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return answer{}, err
	}
	if network == "udp" {
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return answer{}, err
		}
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: reading the answer: %w", network, target, err)
	}
	f := strings.Fields(line)
	if len(f) < 3 || f[1] != "from" {
		return answer{}, fmt.Errorf("%s %s: unexpected answer %q", network, target, line)
	}
	return answer{backend: f[0], peer: f[2], target: target}, nil
}

// stream is steady load: one request every interval from a namespace to
// the next of its targets (chosen by pick), counting failures and the
// longest time without a successful answer.
type stream struct {
	name, from, network string
	interval            time.Duration
	pick                func(seq int) string // target of request seq ("" skips it)

	mu        sync.Mutex
	requests  int
	failures  int
	errs      []string
	lastOK    time.Time
	longest   time.Duration
	backends  map[string]int
	peers     map[string]int
	failedAt  map[string]int // target -> failures
	firstFail time.Time
	lastFail  time.Time
	started   time.Time
	cancel    context.CancelFunc
	done      chan struct{}
	inflights sync.WaitGroup
}

func newStream(name, from, network string, interval time.Duration, pick func(int) string) *stream {
	return &stream{name: name, from: from, network: network, interval: interval, pick: pick,
		backends: map[string]int{}, peers: map[string]int{}, failedAt: map[string]int{}}
}

// start sends requests until stop; each request runs on its own so a slow
// one does not delay the next (a gap is then seen as a gap, not hidden).
func (s *stream) start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	s.started, s.lastOK = time.Now(), time.Now()
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.interval)
		defer t.Stop()
		for seq := 0; ; seq++ {
			if target := s.pick(seq); target != "" {
				s.inflights.Add(1)
				go func() { defer s.inflights.Done(); s.one(ctx, target) }()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

func (s *stream) one(ctx context.Context, target string) {
	// Generous: the VM's CPU is emulated and shared, and a slow answer is
	// not a failed one. A TCP request fails when refused, reset or not
	// answered at all within 10 s (a SYN lost more than twice); a UDP one
	// when its datagram or the answer is lost.
	timeout := 10 * time.Second
	if s.network == "udp" {
		timeout = 3 * time.Second
	}
	a, err := ask(ctx, s.from, s.network, target, timeout)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx.Err() != nil && err != nil {
		return // cut short by stop, not by the network
	}
	s.requests++
	if err != nil {
		s.failures++
		s.failedAt[target]++
		if s.firstFail.IsZero() {
			s.firstFail = now
		}
		s.lastFail = now
		if len(s.errs) < 3 {
			s.errs = append(s.errs, fmt.Sprintf("%s %s", now.Format("15:04:05.000"), err))
		}
		return
	}
	if gap := now.Sub(s.lastOK); gap > s.longest {
		s.longest = gap
	}
	s.lastOK = now
	s.backends[a.backend]++
	// The peer's address only: its port differs per connection.
	host, _, err := net.SplitHostPort(a.peer)
	if err != nil {
		host = a.peer
	}
	s.peers[host]++
}

// stop ends the stream and waits for its requests in flight.
func (s *stream) stop() {
	s.cancel()
	<-s.done
	s.inflights.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if gap := time.Since(s.lastOK); gap > s.longest && s.requests > 0 {
		s.longest = gap
	}
}

// result is a stream's numbers, for the report.
type result struct {
	Name, Network       string
	Requests, Failures  int
	Longest             time.Duration
	Errors              []string
	Backends, Peers     map[string]int
	FailedAt            map[string]int
	FirstFail, LastFail time.Time
}

func (s *stream) result() result {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, p, f := map[string]int{}, map[string]int{}, map[string]int{}
	for k, v := range s.failedAt {
		f[k] = v
	}
	for k, v := range s.backends {
		b[k] = v
	}
	for k, v := range s.peers {
		p[k] = v
	}
	return result{Name: s.name, Network: s.network, Requests: s.requests, Failures: s.failures,
		Longest: s.longest, Errors: append([]string(nil), s.errs...), Backends: b, Peers: p,
		FailedAt: f, FirstFail: s.firstFail, LastFail: s.lastFail}
}

// roundRobin picks targets in turn.
func roundRobin(targets ...string) func(int) string {
	return func(seq int) string { return targets[seq%len(targets)] }
}
