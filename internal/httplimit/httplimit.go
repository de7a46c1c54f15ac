// Package httplimit bounds what one client may hold of the agent's HTTP
// listeners: the health server, the metrics server, the debug pages and
// the health-check node ports. The health-check ports answer on the node's
// addresses, so anyone who can reach the node can connect; without these
// bounds an idle keep-alive connection, or a request whose body never
// ends, holds a connection and a goroutine for good, and enough of them
// exhaust the agent's file descriptors. The connection caps are per
// client as well as per listener, so that one client filling its share
// never keeps the kubelet's probe or a load balancer's health check out.
package httplimit

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/netutil"
)

// The defaults. Every answer the agent gives is small and quick to make,
// except a debug diff, a full kernel read that takes seconds at tens of
// thousands of Services; the write bound leaves room for it and for a
// metrics scrape of such a table.
const (
	// ReadHeaderTimeout bounds the request line and headers.
	ReadHeaderTimeout = 5 * time.Second
	// ReadTimeout bounds the whole request, body included: no handler
	// reads a body, so one that trickles in is cut.
	ReadTimeout = 10 * time.Second
	// WriteTimeout bounds the answer, from the end of the headers read.
	WriteTimeout = 60 * time.Second
	// IdleTimeout closes a keep-alive connection that sends no request.
	// Kubelet probes and load balancers' health checks open a connection
	// per probe or reuse one within seconds, and scrapers reconnect at
	// once, so a short bound costs them nothing and frees a slot that a
	// client holds only to hold it.
	IdleTimeout = 5 * time.Second
	// MaxHeaderBytes caps request headers; the agent reads none but the
	// request line.
	MaxHeaderBytes = 16 << 10
	// MaxConns caps the connections one listener serves at once, from
	// all clients; more wait in the listen backlog until one closes. It
	// bounds the agent's file descriptors and goroutines, and is
	// MaxConnsPerClient for 128 clients at once, far more than the
	// kubelet, scrapers and load balancers' checkers of a node, so that
	// filling it takes that many source addresses.
	MaxConns = 1024
	// MaxConnsPerClient caps the connections one remote address holds
	// on a listener at once; a connection beyond it is closed as soon
	// as it is accepted. A prober or scraper needs one or two, so a
	// client that holds more is holding slots, and closing its extras
	// at once keeps it from queueing ahead of anyone else.
	MaxConnsPerClient = 8
)

// Limits are the bounds of one listener; a zero field takes its default.
type Limits struct {
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	MaxConns          int
	MaxConnsPerClient int
}

// Defaults are the package's defaults.
func Defaults() Limits {
	return Limits{
		ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout,
		WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout,
		MaxConns: MaxConns, MaxConnsPerClient: MaxConnsPerClient,
	}
}

// orDefaults fills the zero fields of l.
func (l Limits) orDefaults() Limits {
	d := Defaults()
	if l.ReadHeaderTimeout > 0 {
		d.ReadHeaderTimeout = l.ReadHeaderTimeout
	}
	if l.ReadTimeout > 0 {
		d.ReadTimeout = l.ReadTimeout
	}
	if l.WriteTimeout > 0 {
		d.WriteTimeout = l.WriteTimeout
	}
	if l.IdleTimeout > 0 {
		d.IdleTimeout = l.IdleTimeout
	}
	if l.MaxConns > 0 {
		d.MaxConns = l.MaxConns
	}
	if l.MaxConnsPerClient > 0 {
		d.MaxConnsPerClient = l.MaxConnsPerClient
	}
	return d
}

// Server is an HTTP server for h with the limits of l.
func (l Limits) Server(h http.Handler) *http.Server {
	l = l.orDefaults()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}

// Listener caps the connections ln hands out at once, per remote address
// and in all. A connection that would take its address over
// MaxConnsPerClient is closed as soon as it is accepted, so a client's
// extra connections never wait ahead of another client's. Beyond MaxConns
// in all, Accept waits and connections wait in the kernel's backlog (or
// are refused when that is full), so a flood costs no more than the cap.
func (l Limits) Listener(ln net.Listener) net.Listener {
	l = l.orDefaults()
	// The per-client check takes the kernel's connection itself, so that
	// it can reset the ones it refuses.
	return netutil.LimitListener(&perClient{Listener: ln, max: l.MaxConnsPerClient, open: map[netip.Addr]int{}}, l.MaxConns)
}

// perClient closes the connections that would take one remote address
// over max open at once.
type perClient struct {
	net.Listener
	max  int
	mu   sync.Mutex
	open map[netip.Addr]int // only addresses with a connection open
}

func (l *perClient) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		a := clientOf(c)
		if l.take(a) {
			return &clientConn{Conn: c, release: sync.OnceFunc(func() { l.release(a) })}, nil
		}
		reset(c)
	}
}

func (l *perClient) take(a netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[a] >= l.max {
		return false
	}
	l.open[a]++
	return true
}

func (l *perClient) release(a netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[a]--; l.open[a] <= 0 {
		delete(l.open, a)
	}
}

// clientOf is the remote address of c, without port or zone, an IPv4
// client of a dual-stack listener as IPv4. Connections that are not TCP
// share the zero address.
func clientOf(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap().WithZone("")
	}
	return netip.Addr{}
}

// reset closes c with a reset rather than a close handshake, so that a
// connection refused over the cap leaves no TIME_WAIT socket behind.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// clientConn gives its slot back once, however often it is closed.
type clientConn struct {
	net.Conn
	release func()
}

func (c *clientConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}
