package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// Addressing. Every backend namespace is joined to the node by its own veth
// pair; both ends hold a /32 with a route to the other, so all backends can
// share one node-side address. Backends route everything via the node: the
// IPVS NAT replies must return through it.
const (
	backendNodeAddr = "10.244.0.1"
	clientNodeAddr  = "10.0.0.1"
	clientNS        = "client"
	backendTCPPort  = 8080
	backendUDPPort  = 5353
)

// clientAddrs are the client namespace's addresses; the first is its
// primary. Several, so that source-hashing schedulers can be seen to spread
// clients while keeping each on one backend.
var clientAddrs = []string{"10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.0.7", "10.0.0.8", "10.0.0.9"}

// ip runs iproute2's ip (first on PATH for exec, unlike in busybox sh).
func ip(args ...string) error {
	_, err := run("ip", args...)
	return err
}

// addNS creates namespace name with addrs on its eth0, joined to the node by
// veth "v-NAME" holding nodeAddr, with a default route via the node.
func addNS(name, nodeAddr string, addrs ...string) error {
	host := "v-" + name
	steps := [][]string{
		{"netns", "add", name},
		{"link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", name},
		{"addr", "add", nodeAddr + "/32", "dev", host},
		{"link", "set", host, "up"},
	}
	for _, a := range addrs {
		steps = append(steps, []string{"route", "add", a + "/32", "dev", host, "src", nodeAddr})
	}
	steps = append(steps,
		[]string{"-n", name, "link", "set", "lo", "up"},
		[]string{"-n", name, "link", "set", "eth0", "up"})
	for _, a := range addrs {
		steps = append(steps, []string{"-n", name, "addr", "add", a + "/32", "dev", "eth0"})
	}
	steps = append(steps,
		[]string{"-n", name, "route", "add", nodeAddr + "/32", "dev", "eth0", "scope", "link"},
		[]string{"-n", name, "route", "add", "default", "via", nodeAddr, "dev", "eth0", "src", addrs[0]})
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return fmt.Errorf("setting up namespace %s: %w", name, err)
		}
	}
	return nil
}

// delNS removes a namespace; its veth pair goes with it.
func delNS(name string) error {
	if err := ip("netns", "del", name); err != nil {
		return fmt.Errorf("removing namespace %s: %w", name, err)
	}
	return nil
}

// backend is one "pod": a namespace running the echo tool on TCP and UDP.
type backend struct {
	name, addr string
	cmd        *exec.Cmd
	done       chan struct{}
}

// startBackend creates the namespace, starts the echo server and waits
// until it answers the client directly (not through IPVS, so the test's
// virtual servers see no connection the test did not make). Cleanup stops
// it and removes the namespace.
func (s *suite) startBackend(t *testing.T, name, addr string) *backend {
	t.Helper()
	b, err := s.tryStartBackend(name, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.stop(); err != nil {
			t.Errorf("stopping backend %s: %v", name, err)
		}
		if err := delNS(name); err != nil {
			t.Error(err)
		}
	})
	return b
}

func (s *suite) tryStartBackend(name, addr string) (*backend, error) {
	if err := addNS(name, backendNodeAddr, addr); err != nil {
		return nil, err
	}
	cmd := exec.Command("ip", "netns", "exec", name, echoBin(), "-name", name,
		"-tcp", fmt.Sprintf(":%d", backendTCPPort), "-udp", fmt.Sprintf(":%d", backendUDPPort))
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the echo server in %s: %w", name, err)
	}
	b := &backend{name: name, addr: addr, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(b.done) }()
	target := fmt.Sprintf("%s:%d", addr, backendTCPPort)
	_, err := waitFor(settle, func() (bool, string) {
		got, err := s.client.ask("", target, time.Second)
		if err != nil {
			return false, err.Error()
		}
		return got == name, "answered as " + got
	})
	if err != nil {
		_ = b.stop()
		return nil, fmt.Errorf("backend %s does not answer on %s: %w", name, target, err)
	}
	return b, nil
}

// stop ends the echo server with SIGTERM (it closes its connections and
// exits); stopping twice is fine.
func (b *backend) stop() error {
	select {
	case <-b.done:
		return nil
	default:
	}
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-b.done:
		return nil
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
		return errors.New("did not exit within 10s of SIGTERM")
	}
}

// client opens connections from inside the client namespace. Sockets are
// made on one OS thread switched into that namespace; once made, a socket
// stays in its namespace and can be used from any goroutine.
type client struct {
	ns   string
	reqs chan func()
}

func newClient() (*client, error) { return newClientIn(clientNS, clientNodeAddr, clientAddrs...) }

// newClientIn makes namespace ns (see addNS) and a client in it.
func newClientIn(ns, nodeAddr string, addrs ...string) (*client, error) {
	if err := addNS(ns, nodeAddr, addrs...); err != nil {
		return nil, err
	}
	c := &client{ns: ns, reqs: make(chan func())}
	errc := make(chan error)
	go c.loop(errc)
	if err := <-errc; err != nil {
		return nil, err
	}
	return c, nil
}

// loop runs requests on a thread in the client namespace. The thread is
// never unlocked: it must not go back to the runtime's pool in the wrong
// namespace, so it ends with this goroutine.
func (c *client) loop(errc chan<- error) {
	runtime.LockOSThread()
	h, err := netns.GetFromName(c.ns)
	if err != nil {
		errc <- fmt.Errorf("opening namespace %s: %w", c.ns, err)
		return
	}
	err = netns.Set(h)
	h.Close()
	if err != nil {
		errc <- fmt.Errorf("entering namespace %s: %w", c.ns, err)
		return
	}
	errc <- nil
	for f := range c.reqs {
		f()
	}
}

// dial opens a connection from the client namespace; src is the source
// address ("" for the primary).
func (c *client) dial(network, src, dst string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	if src != "" {
		a := net.ParseIP(src)
		if network == "udp" {
			d.LocalAddr = &net.UDPAddr{IP: a}
		} else {
			d.LocalAddr = &net.TCPAddr{IP: a}
		}
	}
	return c.dialWith(d, network, dst)
}

func (c *client) dialWith(d net.Dialer, network, dst string) (net.Conn, error) {
	var conn net.Conn
	var err error
	done := make(chan struct{})
	c.reqs <- func() {
		conn, err = d.Dial(network, dst)
		close(done)
	}
	<-done
	return conn, err
}

// ask opens a new TCP connection, reads the backend's greeting and closes:
// the name of the backend IPVS picked.
func (c *client) ask(src, dst string, timeout time.Duration) (string, error) {
	conn, err := c.dial("tcp", src, dst, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return greeting(conn, timeout)
}

// askReset is ask closing with a reset: IPVS then forgets the connection
// after 10s (its CLOSE state) instead of the two minutes of TIME_WAIT that
// an orderly close costs, which tests that wait for connections to end need.
func (c *client) askReset(src, dst string, timeout time.Duration) (string, error) {
	conn, err := c.dial("tcp", src, dst, timeout)
	if err != nil {
		return "", err
	}
	defer closeReset(conn)
	return greeting(conn, timeout)
}

func closeReset(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// greeting reads "NAME from PEER" and returns NAME.
func greeting(conn net.Conn, timeout time.Duration) (string, error) {
	if err := conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("reading the greeting: %w", err)
	}
	f := strings.Fields(line)
	if len(f) < 3 || f[1] != "from" {
		return "", fmt.Errorf("unexpected greeting %q", line)
	}
	return f[0], nil
}

// longConn is a long-lived TCP connection through a virtual server.
type longConn struct {
	conn    net.Conn
	r       *bufio.Reader
	backend string // who greeted it
}

func (c *client) openLong(src, dst string) (*longConn, error) {
	conn, err := c.dial("tcp", src, dst, 5*time.Second)
	if err != nil {
		return nil, err
	}
	l := &longConn{conn: conn, r: bufio.NewReader(conn)}
	if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		conn.Close()
		return nil, err
	}
	line, err := l.r.ReadString('\n')
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("reading the greeting: %w", err)
	}
	l.backend = strings.Fields(line)[0]
	return l, nil
}

// ping sends a line and requires the same backend to echo it.
func (l *longConn) ping(msg string) error {
	if err := l.conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(l.conn, "%s\n", msg); err != nil {
		return fmt.Errorf("writing on the connection to %s: %w", l.backend, err)
	}
	line, err := l.r.ReadString('\n')
	if err != nil {
		return fmt.Errorf("reading on the connection to %s: %w", l.backend, err)
	}
	if want := l.backend + " " + msg + "\n"; line != want {
		return fmt.Errorf("the connection to %s answered %q, want %q", l.backend, line, want)
	}
	return nil
}
