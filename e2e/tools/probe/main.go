// Command probe asks a virtual server who answers: it opens n new connections
// (TCP) or flows (UDP) to one address, prints the name of the backend that
// answered each (the first word of the echo tool's greeting), one per line,
// then a summary line:
//
//	probe -tcp 10.96.0.100:80 -n 9
//	web-1
//	web-2
//	...
//	web-1=3 web-2=3 web-3=3 failures=0
//
// A try that gets no answer prints "FAIL <reason>" in its place. The exit
// status is 1 if any try failed, 2 on a usage error.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"time"
)

type options struct {
	network string // "tcp" or "udp"
	addr    string
	n       int
	timeout time.Duration
	sport   int // fixed UDP source port; 0 picks a new one per try
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(2)
	}
	if failures := probe(o, os.Stdout); failures > 0 {
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	tcp := fs.String("tcp", "", "TCP address to probe, VIP:PORT")
	udp := fs.String("udp", "", "UDP address to probe, VIP:PORT")
	fs.IntVar(&o.n, "n", 10, "number of new connections (TCP) or flows (UDP)")
	fs.DurationVar(&o.timeout, "timeout", time.Second, "time allowed for each answer")
	fs.IntVar(&o.sport, "sport", 0, "UDP only: send every flow from this source port (same flow each time)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case (*tcp == "") == (*udp == ""):
		return o, errors.New("give exactly one of -tcp and -udp")
	case *tcp != "":
		o.network, o.addr = "tcp", *tcp
	default:
		o.network, o.addr = "udp", *udp
	}
	if o.sport != 0 && o.network != "udp" {
		return o, errors.New("-sport is for -udp only")
	}
	if o.n < 1 {
		return o, errors.New("-n must be at least 1")
	}
	return o, nil
}

// probe runs the tries, writes one line per try and the summary, and returns
// the number of failed tries.
func probe(o options, out io.Writer) int {
	counts := map[string]int{}
	failures := 0
	for i := 0; i < o.n; i++ {
		name, err := try(o)
		if err != nil {
			failures++
			fmt.Fprintf(out, "FAIL %v\n", err)
			continue
		}
		counts[name]++
		fmt.Fprintln(out, name)
	}
	fmt.Fprintln(out, summary(counts, failures))
	return failures
}

func try(o options) (string, error) {
	if o.network == "tcp" {
		return tryTCP(o.addr, o.timeout)
	}
	return tryUDP(o.addr, o.sport, o.timeout)
}

// tryTCP opens a new connection and reads the greeting. A new connection per
// try is what makes IPVS schedule again.
func tryTCP(addr string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", fmt.Errorf("setting a deadline: %w", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("reading the greeting: %w", err)
	}
	return nameOf(line)
}

// tryUDP sends one datagram from a fresh socket and reads the answer. With
// sport 0 every try is a new flow (new source port); with a fixed sport every
// try reuses the same flow, which IPVS keeps on one real server.
func tryUDP(addr string, sport int, timeout time.Duration) (string, error) {
	raddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return "", err
	}
	var laddr *net.UDPAddr
	if sport != 0 {
		laddr = &net.UDPAddr{Port: sport}
	}
	c, err := net.DialUDP("udp", laddr, raddr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", fmt.Errorf("setting a deadline: %w", err)
	}
	if _, err := c.Write([]byte("probe\n")); err != nil {
		return "", err
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return "", fmt.Errorf("reading the answer: %w", err)
	}
	return nameOf(string(buf[:n]))
}

// nameOf takes the backend's name from "NAME from PEER\n".
func nameOf(line string) (string, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return "", errors.New("empty answer")
	}
	return f[0], nil
}

// summary prints "a=1 b=2 failures=0", names sorted so output is stable.
func summary(counts map[string]int, failures int) string {
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s=%d ", n, counts[n])
	}
	fmt.Fprintf(&b, "failures=%d", failures)
	return b.String()
}
