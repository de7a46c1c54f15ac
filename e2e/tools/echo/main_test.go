package main

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

// startServer serves name on loopback TCP and UDP and returns both addresses.
func startServer(t *testing.T, name string) (*server, string, string) {
	t.Helper()
	s := &server{name: name, conns: map[net.Conn]struct{}{}}
	if err := s.listenTCP("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := s.listenUDP("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	s.serve()
	t.Cleanup(func() { s.close(); s.wg.Wait() })
	return s, s.listeners[0].Addr().String(), s.packets[0].LocalAddr().String()
}

func TestTCPGreetsThenEchoesLines(t *testing.T) {
	_, tcpAddr, _ := startServer(t, "web-1")
	c, err := net.Dial("tcp", tcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)

	want := []string{"web-1 from " + c.LocalAddr().String() + "\n"}
	got := []string{readLine(t, r)}
	for _, msg := range []string{"ping", "still there"} {
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			t.Fatal(err)
		}
		want = append(want, "web-1 "+msg+"\n")
		got = append(got, readLine(t, r))
	}
	if strings.Join(got, "") != strings.Join(want, "") {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestUDPAnswersEachDatagramWithPeer(t *testing.T) {
	_, _, udpAddr := startServer(t, "dns-1")
	c, err := net.Dial("udp", udpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	for i := 0; i < 2; i++ {
		if _, err := c.Write([]byte("q")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 256)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(buf[:n]), "dns-1 from "+c.LocalAddr().String()+"\n"; got != want {
			t.Fatalf("answer %d: got %q, want %q", i, got, want)
		}
	}
}

func TestCloseEndsOpenConnections(t *testing.T) {
	s, tcpAddr, _ := startServer(t, "web-1")
	c, err := net.Dial("tcp", tcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	readLine(t, r) // the greeting: the connection is tracked by now
	s.close()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("serving goroutines still running after close")
	}
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("connection still open after close")
	}
}

func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	l, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading a line: %v", err)
	}
	return l
}
