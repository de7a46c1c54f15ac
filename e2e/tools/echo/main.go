// Command echo is the backend the demo and the end-to-end suite put behind a
// virtual server. It names itself in every answer, so a client can tell which
// real server IPVS picked, and it reports the peer address it saw, so a test
// can tell whether the source was masqueraded.
//
//	echo -name web-1 -tcp :8080 -udp :53
//
// TCP: on connect it writes "NAME from PEER\n" and keeps the connection open,
// answering each line it receives with "NAME LINE\n" (a long-lived connection
// can be probed while weights change). UDP: each datagram is answered with
// "NAME from PEER\n". -tcp and -udp may be repeated. SIGTERM or SIGINT closes
// the listeners and every open connection and exits 0.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
)

// addrList is a repeatable address flag.
type addrList []string

func (l *addrList) String() string     { return strings.Join(*l, ",") }
func (l *addrList) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("echo", flag.ContinueOnError)
	name := fs.String("name", "", "name to answer with (default: the hostname)")
	var tcps, udps addrList
	fs.Var(&tcps, "tcp", "TCP address to listen on, e.g. :8080 (repeatable)")
	fs.Var(&udps, "udp", "UDP address to listen on, e.g. :53 (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(tcps)+len(udps) == 0 {
		return errors.New("nothing to serve: give -tcp and/or -udp")
	}
	if *name == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("no -name and no hostname: %w", err)
		}
		*name = h
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	s := &server{name: *name, conns: map[net.Conn]struct{}{}}
	// Listen on everything before serving anything: a bad address fails
	// the start instead of leaving a half-working backend.
	for _, a := range tcps {
		if err := s.listenTCP(a); err != nil {
			s.close()
			return err
		}
	}
	for _, a := range udps {
		if err := s.listenUDP(a); err != nil {
			s.close()
			return err
		}
	}
	s.serve()
	<-ctx.Done()
	s.close()
	s.wg.Wait()
	return nil
}

// server owns every listener and open connection so that a signal can close
// them all; closing is what ends the serving goroutines.
type server struct {
	name string
	wg   sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	listeners []net.Listener
	packets   []net.PacketConn
	conns     map[net.Conn]struct{}
}

func (s *server) listenTCP(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on tcp %s: %w", addr, err)
	}
	s.listeners = append(s.listeners, l)
	return nil
}

func (s *server) listenUDP(addr string) error {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return fmt.Errorf("listening on udp %s: %w", addr, err)
	}
	s.packets = append(s.packets, pc)
	return nil
}

func (s *server) serve() {
	for _, l := range s.listeners {
		s.wg.Add(1)
		go s.acceptLoop(l)
	}
	for _, pc := range s.packets {
		s.wg.Add(1)
		go s.udpLoop(pc)
	}
}

func (s *server) acceptLoop(l net.Listener) {
	defer s.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			return // closed by close(); nothing else ends a listener here
		}
		if !s.track(c) {
			c.Close()
			return
		}
		s.wg.Add(1)
		go s.handleTCP(c)
	}
}

// track registers an open connection; false once the server is closing.
func (s *server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

func (s *server) handleTCP(c net.Conn) {
	defer s.wg.Done()
	defer s.untrack(c)
	if _, err := fmt.Fprintf(c, "%s from %s\n", s.name, c.RemoteAddr()); err != nil {
		return
	}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if _, err := fmt.Fprintf(c, "%s %s\n", s.name, sc.Text()); err != nil {
			return
		}
	}
}

func (s *server) udpLoop(pc net.PacketConn) {
	defer s.wg.Done()
	buf := make([]byte, 64*1024)
	for {
		_, peer, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) {
				return
			}
			continue // e.g. an ICMP error surfaced on the socket: keep serving
		}
		// A lost answer is the client's to notice; the server just goes on.
		_, _ = fmt.Fprintf(writerTo{pc, peer}, "%s from %s\n", s.name, peer)
	}
}

// writerTo lets fmt write one datagram to a fixed peer.
type writerTo struct {
	pc   net.PacketConn
	peer net.Addr
}

func (w writerTo) Write(p []byte) (int, error) { return w.pc.WriteTo(p, w.peer) }

// close stops every listener and connection; the serving goroutines then end.
func (s *server) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, l := range s.listeners {
		l.Close()
	}
	for _, pc := range s.packets {
		pc.Close()
	}
	for c := range s.conns {
		c.Close()
	}
}
