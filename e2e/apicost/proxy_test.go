package main

import (
	"bytes"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// The proxy relays both ways untouched and counts every payload byte and
// every connection.
func TestProxyCounts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The server answers each connection with what it read, doubled.
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				c.Write(append(b, b...))
			}()
		}
	}()
	p, err := startProxy(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	for _, size := range []int{1, 100_000, 300_001} {
		c, err := net.Dial("tcp", p.addr())
		if err != nil {
			t.Fatal(err)
		}
		msg := bytes.Repeat([]byte{'x'}, size)
		c.Write(msg)
		c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || len(got) != 2*size {
			t.Fatalf("size %d: read %d bytes, %v", size, len(got), err)
		}
	}
	want := traffic{Conns: 3, Up: 400_002, Down: 800_004}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := p.read()
		got.Open = 0
		if got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("counted %+v, want %+v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestProcCPU(t *testing.T) {
	cpu, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if cpu < 0 || cpu > cpuSeconds()+0.1 {
		t.Fatalf("procCPU %v, getrusage %v", cpu, cpuSeconds())
	}
}
