// Package httplimit bounds what one client may hold of the agent's HTTP
// listeners: the health server, the metrics server, the debug views and
// the health-check node ports. The health-check ports answer on the node's
// addresses, so anyone who can reach the node can connect; without these
// bounds an idle keep-alive connection, or a request whose body never
// ends, holds a connection and a goroutine for good, and enough of them
// exhaust the agent's file descriptors.
package httplimit

import (
	"net"
	"net/http"
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
	// IdleTimeout closes a keep-alive connection that sends no request;
	// load balancers probe every few seconds and scrapers every 15 to
	// 60 seconds, and those that keep a connection open reconnect at once.
	IdleTimeout = 30 * time.Second
	// MaxHeaderBytes caps request headers; the agent reads none but the
	// request line.
	MaxHeaderBytes = 16 << 10
	// MaxConns caps the connections one listener serves at once; more
	// wait in the listen backlog until one closes. Load balancers,
	// probes and scrapers need a handful.
	MaxConns = 128
)

// Limits are the bounds of one listener; a zero field takes its default.
type Limits struct {
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	MaxConns          int
}

// Defaults are the package's defaults.
func Defaults() Limits {
	return Limits{
		ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout,
		WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout, MaxConns: MaxConns,
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

// Listener caps the connections ln hands out at once: Accept waits while
// the cap is reached, and the connections beyond it wait in the kernel's
// backlog (or are refused when that is full), so a flood of connections
// costs no more than the cap.
func (l Limits) Listener(ln net.Listener) net.Listener {
	return netutil.LimitListener(ln, l.orDefaults().MaxConns)
}
