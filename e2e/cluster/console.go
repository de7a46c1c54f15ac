package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/kube-ipvs/kube-ipvs/e2e/ipvsdump"
)

// Console lines the guest scripts print (see daemonSetGuest, healthzLoop,
// snapshotLoop).
const (
	snapshotPrefix = "ipvs-snapshot: " // the whole `ipvsadm -Sn` table, rules joined by ';'
	agentPrefix    = "agent| "         // one line of the agent's log
	// healthzPrefix: the agent's /healthz on kube-proxy's port, when it
	// changes: the status code, nodeEligible and healthy.
	healthzPrefix = "healthz-state: "
)

// Table is one `ipvsadm -Sn` snapshot.
type Table = ipvsdump.Table

// Console follows the VM's serial console: the latest IPVS table, the
// agent's log and every line, for the failure report.
type Console struct {
	mu      sync.Mutex
	table   Table
	seen    bool          // a snapshot has arrived
	healthz string        // the latest healthz state
	changed chan struct{} // closed and replaced on every snapshot and healthz state
	grew    chan struct{} // closed and replaced on every line
	agent   []string
	all     []string
	done    chan struct{} // closed when the stream ends
}

func newConsole() *Console {
	return &Console{changed: make(chan struct{}), grew: make(chan struct{}), done: make(chan struct{})}
}

// follow reads r until it ends; echo, if set, gets every line too.
func (c *Console) follow(r io.Reader, echo func(string)) {
	defer close(c.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if echo != nil {
			echo(line)
		}
		c.mu.Lock()
		c.all = append(c.all, line)
		close(c.grew)
		c.grew = make(chan struct{})
		// The snapshot may follow kernel noise on the same console line.
		if i := strings.Index(line, snapshotPrefix); i >= 0 {
			c.table = ipvsdump.Parse(strings.Split(line[i+len(snapshotPrefix):], ";"))
			c.seen = true
			close(c.changed)
			c.changed = make(chan struct{})
		} else if i := strings.Index(line, healthzPrefix); i >= 0 {
			c.healthz = line[i+len(healthzPrefix):]
			close(c.changed)
			c.changed = make(chan struct{})
		} else if i := strings.Index(line, agentPrefix); i >= 0 {
			c.agent = append(c.agent, line[i+len(agentPrefix):])
		}
		c.mu.Unlock()
	}
}

// WaitTable waits until ok holds for the latest table, the stream ends, or
// ctx ends; it returns the table that satisfied ok.
func (c *Console) WaitTable(ctx context.Context, ok func(Table) bool) (Table, error) {
	for {
		c.mu.Lock()
		t, seen, ch := c.table, c.seen, c.changed
		c.mu.Unlock()
		if seen && ok(t) {
			return t, nil
		}
		select {
		case <-ch:
		case <-c.done:
			return t, fmt.Errorf("the VM console ended; last table:\n%s", t)
		case <-ctx.Done():
			return t, fmt.Errorf("%w; last table:\n%s", context.Cause(ctx), t)
		}
	}
}

// WaitHealthz waits until the latest /healthz state is want ("200
// eligible=true healthy=true"), the stream ends, or ctx ends.
func (c *Console) WaitHealthz(ctx context.Context, want string) error {
	for {
		c.mu.Lock()
		got, ch := c.healthz, c.changed
		c.mu.Unlock()
		if got == want {
			return nil
		}
		select {
		case <-ch:
		case <-c.done:
			return fmt.Errorf("the VM console ended; /healthz state %q", got)
		case <-ctx.Done():
			return fmt.Errorf("%w; /healthz state %q", context.Cause(ctx), got)
		}
	}
}

// WaitLine waits for a console line holding prefix and returns what
// follows the prefix on the first such line.
func (c *Console) WaitLine(ctx context.Context, prefix string) (string, error) {
	seen := 0
	find := func() (string, bool, chan struct{}) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, l := range c.all[seen:] {
			if i := strings.Index(l, prefix); i >= 0 {
				return l[i+len(prefix):], true, nil
			}
		}
		seen = len(c.all)
		return "", false, c.grew
	}
	for {
		rest, ok, grew := find()
		if ok {
			return rest, nil
		}
		select {
		case <-grew:
		case <-c.done:
			if rest, ok, _ := find(); ok {
				return rest, nil
			}
			return "", fmt.Errorf("the VM console ended without a line %q", prefix)
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for a line %q: %w", prefix, context.Cause(ctx))
		}
	}
}

// AgentLog is every agent log line so far.
func (c *Console) AgentLog() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.agent...)
}

// Tail is the last n console lines.
func (c *Console) Tail(n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.all) > n {
		return append([]string(nil), c.all[len(c.all)-n:]...)
	}
	return append([]string(nil), c.all...)
}

// Crash is the agent's crash report, if it printed one (a panic or a
// runtime fatal error): its first n lines from the message on, which a
// goroutine dump pushes out of Tail.
func (c *Console) Crash(n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, l := range c.all {
		if strings.Contains(l, "agent| panic:") || strings.Contains(l, "agent| fatal error:") {
			return append([]string(nil), c.all[i:min(len(c.all), i+n)]...)
		}
	}
	return nil
}
