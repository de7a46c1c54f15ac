// Package httplimittest checks, against a real listener, that an HTTP
// server holds the bounds of package httplimit: it is shared by the tests
// of every package that runs a listener, as a client from the network
// would try it.
package httplimittest

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
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
