package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

// Annotations the agent reads.
const (
	annScheduler    = "kube-ipvs.io/scheduler"
	annDrainTimeout = "kube-ipvs.io/drain-timeout"
)

// startBackends starts n backends PREFIX-1..n at 10.244.GROUP.1..n. Each
// scenario has its own group, so addresses never collide.
func (s *suite) startBackends(t *testing.T, prefix string, group, n int) []*backend {
	t.Helper()
	var bs []*backend
	for i := 1; i <= n; i++ {
		bs = append(bs, s.startBackend(t, fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("10.244.%d.%d", group, i)))
	}
	return bs
}

// tcpService is a TCP Service on VIP:80 to the backends' TCP port, every
// backend ready.
func tcpService(name, vip string, bs []*backend) service {
	svc := service{name: name, vip: vip, port: 80, proto: "TCP", targetPort: backendTCPPort}
	for _, b := range bs {
		svc.endpoints = append(svc.endpoints, endpoint{addr: b.addr})
	}
	return svc
}

// allAt is the wanted table of a Service: every endpoint at weight w.
func allAt(svc service, w int, bs ...*backend) want {
	out := want{}
	for _, b := range bs {
		out[svc.real(b.addr)] = w
	}
	return out
}

// ready puts a Service and waits until the kernel holds every listed
// backend at weight 1; the file goes at the end of the test.
func (s *suite) ready(t *testing.T, svc service, bs ...*backend) {
	t.Helper()
	s.cleanupService(t, svc)
	s.put(t, svc)
	took := waitReals(t, svc, allAt(svc, 1, bs...))
	// The VIP is bound after the virtual server is filled (plan's stage
	// order), in the same sync: until then the node has no route to it.
	if _, err := waitFor(settle, func() (bool, string) { return vipBound(svc.vip) }); err != nil {
		t.Fatalf("VIP %s not bound on kube-ipvs0: %v", svc.vip, err)
	}
	t.Logf("%s programmed %s after the file was written", svc.vs(), took.Round(time.Millisecond))
}

// tally counts answers by backend name.
type tally map[string]int

func (c tally) String() string {
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s=%d", n, c[n]))
	}
	return strings.Join(parts, " ")
}

// askN opens n new connections from src and tallies who answered; any
// failure fails the test.
func (s *suite) askN(t *testing.T, src, dst string, n int) tally {
	t.Helper()
	got := tally{}
	for i := 0; i < n; i++ {
		name, err := s.client.ask(src, dst, 3*time.Second)
		if err != nil {
			t.Fatalf("connection %d of %d from %s to %s: %v (answers so far: %s)", i+1, n, orDefault(src), dst, err, got)
		}
		got[name]++
	}
	return got
}

func orDefault(src string) string {
	if src == "" {
		return clientAddrs[0]
	}
	return src
}

// backendOf maps a backend name to its backend.
func backendOf(bs []*backend, name string) *backend {
	for _, b := range bs {
		if b.name == name {
			return b
		}
	}
	return nil
}
