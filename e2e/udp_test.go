package e2e

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Scenario 5: UDP never black-holes. A client keeps sending from one fixed
// source port (one flow, as a resolver does); its backend is removed and its
// process stops. The agent removes the real server at once and deletes the
// flow's conntrack entry, so the same flow gets answers from the remaining
// backend after a short gap.
func TestUDPNeverBlackHoles(t *testing.T) {
	s := setup(t)
	bs := s.startBackends(t, "udp", 5, 2)
	svc := service{name: "udp", vip: "10.96.5.1", port: 53, proto: "UDP", targetPort: backendUDPPort}
	for _, b := range bs {
		svc.endpoints = append(svc.endpoints, endpoint{addr: b.addr})
	}
	s.ready(t, svc, bs...)

	src := &net.UDPAddr{IP: net.ParseIP(clientAddrs[0]), Port: 40053}
	conn, err := s.client.dialWith(net.Dialer{LocalAddr: src}, "udp", svc.target())
	if err != nil {
		t.Fatalf("opening the UDP flow from %s: %v", src, err)
	}
	defer conn.Close()
	f := &flow{conn: conn}

	first, err := f.until(10*time.Second, func(string) bool { return true })
	if err != nil {
		t.Fatalf("the flow from %s got no answer: %v", src, err)
	}
	// A few more answers: one flow stays on one backend.
	for i := 0; i < 5; i++ {
		got, err := f.until(5*time.Second, func(string) bool { return true })
		if err != nil || got.name != first.name {
			t.Fatalf("the flow moved or stopped before any change: %q, %v", got.name, err)
		}
	}
	x := backendOf(bs, first.name)
	rest := without(bs, x)
	t.Logf("the flow from %s is on %s", src, x.name)

	if n, out := flowEntries(t, src.Port, x.addr); n == 0 {
		t.Fatalf("no conntrack entry of the flow toward %s before the removal, so the check below would prove nothing; conntrack -L says:\n%s", x.name, out)
	}

	removed := time.Now()
	s.put(t, svc.with(endpoint{addr: rest[0].addr}))
	if err := x.stop(); err != nil {
		t.Fatalf("stopping %s: %v", x.name, err)
	}
	next, err := f.until(20*time.Second, func(n string) bool { return n == rest[0].name })
	if err != nil {
		t.Fatalf("black hole: the flow from %s got no answer from %s within 20s of removing %s: %v (tries: %s)",
			src, rest[0].name, x.name, err, f.summary())
	}
	gone := waitReals(t, svc, allAt(svc, 1, rest[0]))
	t.Logf("UDP: %s removed and stopped; the same flow was answered by %s %s later, after %d unanswered tries (%s); real server gone from the kernel %s after the check",
		x.name, next.name, next.at.Sub(removed).Round(time.Millisecond), f.lostSince(removed), f.summary(), gone.Round(time.Millisecond))
	if n, out := flowEntries(t, src.Port, x.addr); n != 0 {
		t.Errorf("%d conntrack entries of the flow still lead to the removed %s:\n%s", n, x.name, out)
	} else {
		t.Logf("conntrack: %s", out)
	}
	if d := next.at.Sub(removed); d > 10*time.Second {
		t.Errorf("the flow was without answers for %s after the removal", d)
	}
	for i := 0; i < 5; i++ {
		got, err := f.until(5*time.Second, func(string) bool { return true })
		if err != nil || got.name != rest[0].name {
			t.Fatalf("after the move the flow is not steady on %s: %q, %v", rest[0].name, got.name, err)
		}
	}
}

// flowEntries counts the conntrack entries of the UDP flow from sport whose
// reply comes from backend addr (IPVS NAT: the reply source is the real
// server).
func flowEntries(t *testing.T, sport int, addr string) (int, string) {
	t.Helper()
	out, err := run("conntrack", "-L", "-p", "udp", "--orig-port-src", strconv.Itoa(sport))
	if err != nil {
		t.Fatalf("listing conntrack entries: %v", err)
	}
	n := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		// The second src= is the reply direction's source.
		srcs := 0
		for _, w := range f {
			if strings.HasPrefix(w, "src=") {
				srcs++
				if srcs == 2 && w == "src="+addr {
					n++
				}
			}
		}
	}
	return n, strings.TrimSpace(out)
}

// flow sends one datagram at a time on a connected UDP socket and records
// every try.
type flow struct {
	conn  net.Conn
	tries []try
}

type try struct {
	at   time.Time
	name string // "" when unanswered
	err  error
}

// until sends a query every 100ms (answer wait 300ms) until an answer
// satisfies ok, and returns that answer.
func (f *flow) until(timeout time.Duration, ok func(string) bool) (try, error) {
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 512)
	for time.Now().Before(deadline) {
		tr := try{at: time.Now()}
		if _, err := f.conn.Write([]byte("q\n")); err != nil {
			tr.err = err
		} else if err := f.conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
			tr.err = err
		} else if n, err := f.conn.Read(buf); err != nil {
			tr.err = err
		} else {
			tr.name = strings.Fields(string(buf[:n]) + " ?")[0]
		}
		f.tries = append(f.tries, tr)
		if tr.err == nil && ok(tr.name) {
			return tr, nil
		}
		if tr.err != nil {
			// A refused datagram (ICMP port unreachable) returns at once.
			time.Sleep(time.Until(tr.at.Add(100 * time.Millisecond)))
		}
	}
	return try{}, fmt.Errorf("no fitting answer within %s", timeout)
}

// lostSince counts unanswered tries after t.
func (f *flow) lostSince(t time.Time) int {
	n := 0
	for _, tr := range f.tries {
		if tr.at.After(t) && tr.err != nil {
			n++
		}
	}
	return n
}

// summary tallies the tries: answers by backend, and errors by kind.
func (f *flow) summary() string {
	c := tally{}
	for _, tr := range f.tries {
		switch {
		case tr.err == nil:
			c[tr.name]++
		case strings.Contains(tr.err.Error(), "refused"):
			c["refused"]++
		case strings.Contains(tr.err.Error(), "timeout"):
			c["timeout"]++
		default:
			c["error"]++
		}
	}
	return c.String()
}
