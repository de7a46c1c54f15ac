// Package httplimittest checks, against a real listener, that an HTTP
// server holds the bounds of package httplimit: it is shared by the tests
// of every package that runs a listener, as a client from the network
// would try it.
package httplimittest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// request is one keep-alive request any of the agent's handlers answers.
const request = "GET / HTTP/1.1\r\nHost: agent\r\n\r\n"

// IdleClosed checks that the server at addr closes a keep-alive
// connection that sends nothing after its first answer, within within.
func IdleClosed(t *testing.T, addr string, within time.Duration) {
	t.Helper()
	c, br := dial(t, addr)
	roundTrip(t, c, br)
	if !closedWithin(c, br, within) {
		t.Errorf("%s: an idle keep-alive connection is still open after %s", addr, within)
	}
}

// SlowBodyCut checks that the server at addr ends a connection whose
// request body trickles in a byte at a time, within within.
func SlowBodyCut(t *testing.T, addr string, within time.Duration) {
	t.Helper()
	c, br := dial(t, addr)
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: agent\r\nContent-Length: 100000\r\n\r\nx"); err != nil {
		t.Fatalf("%s: write request: %v", addr, err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	}()
	if !closedWithin(c, br, within) {
		t.Errorf("%s: a request body trickling in is still read after %s", addr, within)
	}
}

// CapWaits checks that the server at addr serves at most max connections
// at once: with max connections open, one more gets no answer until one
// of them closes, and then gets it.
func CapWaits(t *testing.T, addr string, max int) {
	t.Helper()
	held := make([]net.Conn, max)
	for i := range held {
		c, br := dial(t, addr)
		roundTrip(t, c, br) // accepted, and now idle on keep-alive
		held[i] = c
	}
	c, br := dial(t, addr) // the kernel completes the handshake; the server does not take it
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatalf("%s: write request: %v", addr, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := br.Peek(1); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: connection %d of at most %d was served (%v)", addr, max+1, max, err)
	}
	held[0].Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: connection %d not served once another closed: %v", addr, max+1, err)
	}
	resp.Body.Close()
}

// ClientsApart checks that one client cannot keep another out of the
// server at addr. A client opens many connections from 127.0.0.1, every
// other one idle on keep-alive after its request and the rest sending
// headers that never end; then a client from 127.0.0.2 must get its
// answer within a second, and the first client must hold at most
// perClient connections open: the server closed the others at once.
func ClientsApart(t *testing.T, addr string, perClient, many int) {
	t.Helper()
	var greedy []net.Conn
	for i := range many {
		c, err := dialFrom(t, "127.0.0.1", addr)
		if err != nil {
			// The server reset it before the dial returned: closed.
			continue
		}
		greedy = append(greedy, c)
		// The server may already have closed c; a failed write says so
		// no better than the count below.
		if i%2 == 0 {
			_, _ = io.WriteString(c, request)
		} else {
			_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: ag")
		}
	}
	c, err := dialFrom(t, "127.0.0.2", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatalf("%s: write request: %v", addr, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Errorf("%s: another client got no answer within a second: %v", addr, err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusOK {
		t.Errorf("%s: another client got %s", addr, resp.Status)
	}
	if open := stillOpen(greedy, 500*time.Millisecond); open > perClient {
		t.Errorf("%s: one client holds %d connections open, want at most %d", addr, open, perClient)
	}
}

// stillOpen counts the connections the server has not ended within d.
func stillOpen(cs []net.Conn, d time.Duration) int {
	var (
		wg   sync.WaitGroup
		open atomic.Int32
	)
	for _, c := range cs {
		wg.Go(func() {
			if !closedWithin(c, bufio.NewReader(c), d) {
				open.Add(1)
			}
		})
	}
	wg.Wait()
	return int(open.Load())
}

// dialFrom connects to addr from the local address from.
func dialFrom(t *testing.T, from, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s from %s: %w", addr, from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c, nil
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip sends one request on c and reads its whole answer.
func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatalf("write request: %v", err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		t.Fatalf("the server closed the connection after one answer: not keep-alive")
	}
}

// closedWithin reads (and drops) what the server sends on c until it
// ends the connection, and reports whether that happened within d.
func closedWithin(c net.Conn, br *bufio.Reader, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, br)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}
