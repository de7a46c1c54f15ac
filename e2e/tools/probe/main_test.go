package main

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    options
		wantErr bool
	}{
		{args: []string{"-tcp", "10.96.0.100:80", "-n", "9"}, want: options{network: "tcp", addr: "10.96.0.100:80", n: 9, timeout: time.Second}},
		{args: []string{"-udp", "10.96.0.10:53", "-sport", "5353", "-timeout", "2s"}, want: options{network: "udp", addr: "10.96.0.10:53", n: 10, timeout: 2 * time.Second, sport: 5353}},
		{args: []string{}, wantErr: true},
		{args: []string{"-tcp", "a:1", "-udp", "b:2"}, wantErr: true},
		{args: []string{"-tcp", "a:1", "-sport", "1"}, wantErr: true},
		{args: []string{"-tcp", "a:1", "-n", "0"}, wantErr: true},
	} {
		got, err := parseFlags(tc.args)
		if (err != nil) != tc.wantErr {
			t.Errorf("%q: err = %v, wantErr %v", tc.args, err, tc.wantErr)
			continue
		}
		if err == nil && got != tc.want {
			t.Errorf("%q: got %+v, want %+v", tc.args, got, tc.want)
		}
	}
}

// TestProbeTCPCountsNamesAndFailures serves alternating names, then closes the
// listener so the remaining tries fail.
func TestProbeTCPCountsNamesAndFailures(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := 0; i < 3; i++ {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "web-%d from %s\n", i%2+1, c.RemoteAddr())
			c.Close()
		}
		l.Close()
	}()
	var out bytes.Buffer
	failures := probe(options{network: "tcp", addr: l.Addr().String(), n: 4, timeout: time.Second}, &out)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if failures != 1 || len(lines) != 5 || strings.Join(lines[:3], ",") != "web-1,web-2,web-1" ||
		!strings.HasPrefix(lines[3], "FAIL ") || lines[4] != "web-1=2 web-2=1 failures=1" {
		t.Fatalf("failures=%d, output:\n%s", failures, out.String())
	}
}

func TestProbeUDPFixedSourcePort(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	peers := make(chan string, 3)
	go func() {
		buf := make([]byte, 64)
		for {
			_, peer, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			peers <- peer.String()
			pc.WriteTo([]byte("dns-1 from "+peer.String()+"\n"), peer)
		}
	}()
	// Pick a free port for the client by binding and releasing it.
	free, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sport := free.LocalAddr().(*net.UDPAddr).Port
	free.Close()

	var out bytes.Buffer
	if f := probe(options{network: "udp", addr: pc.LocalAddr().String(), n: 3, timeout: time.Second, sport: sport}, &out); f != 0 {
		t.Fatalf("failures=%d, output:\n%s", f, out.String())
	}
	if got := strings.TrimSpace(out.String()); got != "dns-1\ndns-1\ndns-1\ndns-1=3 failures=0" {
		t.Fatalf("output:\n%s", got)
	}
	for i := 0; i < 3; i++ {
		if p := <-peers; !strings.HasSuffix(p, fmt.Sprintf(":%d", sport)) {
			t.Fatalf("datagram %d came from %s, want source port %d", i, p, sport)
		}
	}
}
