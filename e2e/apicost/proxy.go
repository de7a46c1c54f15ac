package main

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// proxy relays TCP connections from a loopback port to the API server,
// untouched (TLS passes through), and counts what it relays: connections
// opened and payload bytes each way. TCP/IP headers are not counted.
type proxy struct {
	ln     net.Listener
	target string
	conns  atomic.Int64 // connections accepted so far
	open   atomic.Int64 // connections open now
	up     atomic.Int64 // client -> server bytes
	down   atomic.Int64 // server -> client bytes
	wg     sync.WaitGroup
	mu     sync.Mutex
	live   map[net.Conn]struct{}
	closed bool
}

// traffic is a reading of the proxy's counters.
type traffic struct {
	Conns, Open, Up, Down int64
}

func (t traffic) minus(o traffic) traffic {
	return traffic{Conns: t.Conns - o.Conns, Open: t.Open, Up: t.Up - o.Up, Down: t.Down - o.Down}
}

func startProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, live: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) read() traffic {
	return traffic{Conns: p.conns.Load(), Open: p.open.Load(), Up: p.up.Load(), Down: p.down.Load()}
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.conns.Add(1)
		p.wg.Add(1)
		go p.relay(c)
	}
}

// track adds or removes a connection from the live set; false when the
// proxy is closing and the connection must not start.
func (p *proxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		if p.closed {
			return false
		}
		p.live[c] = struct{}{}
	} else {
		delete(p.live, c)
	}
	return true
}

func (p *proxy) relay(client net.Conn) {
	defer p.wg.Done()
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	if !p.track(client, true) {
		return
	}
	p.track(server, true)
	p.open.Add(1)
	defer func() {
		p.open.Add(-1)
		p.track(client, false)
		p.track(server, false)
	}()
	done := make(chan struct{}, 2)
	go func() { pump(server, client, &p.up); done <- struct{}{} }()
	go func() { pump(client, server, &p.down); done <- struct{}{} }()
	<-done
	<-done
}

// pump copies src to dst, counting, and passes the end of src on as a
// half-close, as a direct connection would.
func pump(dst, src net.Conn, n *atomic.Int64) {
	buf := make([]byte, 64<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			n.Add(int64(k))
			if _, werr := dst.Write(buf[:k]); werr != nil {
				src.Close()
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
					return
				}
			}
			dst.Close()
			return
		}
	}
}

// close stops accepting, cuts every relayed connection and waits for the
// relays to end.
func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.live {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
