package multinode

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// balancer is the outside load balancer of a Service with
// externalTrafficPolicy Local, as a cloud's would be: it polls every node's
// healthCheckNodePort from the outside namespace and sends traffic only to
// the nodes that answer 200, on the Service's node port.
type balancer struct {
	c                *cluster
	hcPort, nodePort int
	mu               sync.Mutex
	healthy          map[int]bool // node index -> last answer was 200
	codes            map[int]int  // node index -> last HTTP status (0: no answer)
	transitions      []string
	cancel           context.CancelFunc
	done             chan struct{}
}

func newBalancer(c *cluster, svc string, hcPort, nodePort int) *balancer {
	return &balancer{c: c, hcPort: hcPort, nodePort: nodePort, healthy: map[int]bool{}, codes: map[int]int{}}
}

// checkAll asks every node once and records the answers.
func (b *balancer) checkAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, n := range b.c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _, err := httpIn(ctx, outsideNS, fmt.Sprintf("http://%s:%d/healthz", nodeAddr(n.i), b.hcPort))
			if err != nil {
				code = 0
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if prev, seen := b.codes[n.i]; !seen || prev != code {
				b.transitions = append(b.transitions, fmt.Sprintf("%s %s: %d", time.Now().Format("15:04:05.0"), n.name, code))
			}
			b.codes[n.i] = code
			b.healthy[n.i] = code == 200
		}()
	}
	wg.Wait()
}

// run polls every 500ms until stop.
func (b *balancer) run() {
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel, b.done = cancel, make(chan struct{})
	go func() {
		defer close(b.done)
		for ctx.Err() == nil {
			b.checkAll(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
}

func (b *balancer) stop() {
	if b.cancel != nil {
		b.cancel()
		<-b.done
		b.cancel = nil
	}
}

// statuses is each node's last health-check answer, by node index.
func (b *balancer) statuses() map[int]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[int]int{}
	for k, v := range b.codes {
		out[k] = v
	}
	return out
}

// pick sends request seq to the next healthy node ("" when none is).
func (b *balancer) pick(seq int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var up []int
	for _, n := range b.c.nodes {
		if b.healthy[n.i] {
			up = append(up, n.i)
		}
	}
	if len(up) == 0 {
		return ""
	}
	return fmt.Sprintf("%s:%d", nodeAddr(up[seq%len(up)]), b.nodePort)
}

func (b *balancer) takeTransitions() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.transitions
	b.transitions = nil
	return t
}
