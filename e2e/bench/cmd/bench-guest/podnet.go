package main

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The guest's pod network: what a CNI would give a node, made with
// iproute2. A client "pod" (its own network namespace, a veth into the
// node, a default route via the node) connects to ClusterIPs. Every
// Service's endpoints are pod-like addresses routed to a few echo servers
// in namespaces of their own, each holding a whole block of addresses as
// local (a local route on lo: it answers for every address in it), so that
// N × 10 endpoints need neither N × 10 namespaces nor N × 10 addresses.
const (
	podNS       = "bench-pod"
	podAddr     = "10.244.0.2"
	podNodeAddr = "10.244.0.1" // the node's side of every veth
	echoPort    = 8080         // protocol.TargetPort
	echoPrefix  = "bench-echo-"
)

// echoBlocks: which echo server holds which endpoint block. The first
// two split the endpoints the host creates (protocol.Endpoint), the third
// holds those changes bring in (protocol.Fresh).
var echoBlocks = []string{"10.128.0.0/13", "10.136.0.0/13", "10.64.0.0/11"}

// echoBin is e2e/tools/echo in the VM.
const echoBin = "/usr/local/bin/bench-echo"

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// addPodNS makes namespace name with addr on its eth0, joined to the node
// by veth "v-NAME", the node routing to routes (addr's /32 if none) through
// it, and a default route via the node.
func addPodNS(name, addr string, routes ...string) error {
	host := "v-" + name
	if len(routes) == 0 {
		routes = []string{addr + "/32"}
	}
	steps := [][]string{
		{"netns", "add", name},
		{"link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", name},
		{"addr", "add", podNodeAddr + "/32", "dev", host},
		{"link", "set", host, "up"},
		{"-n", name, "link", "set", "lo", "up"},
		{"-n", name, "link", "set", "eth0", "up"},
		{"-n", name, "addr", "add", addr + "/32", "dev", "eth0"},
		{"-n", name, "route", "add", podNodeAddr + "/32", "dev", "eth0", "scope", "link"},
		{"-n", name, "route", "add", "default", "via", podNodeAddr, "dev", "eth0", "src", addr},
	}
	for _, r := range routes {
		steps = append(steps, []string{"route", "add", r, "dev", host, "src", podNodeAddr})
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return fmt.Errorf("pod network %s: %w", name, err)
		}
	}
	return nil
}

// podNet is the client pod and the echo servers behind every endpoint.
type podNet struct {
	client *nsDialer
	echos  []*exec.Cmd
}

// setupPodNet builds the pod network once per boot: the namespaces and
// routes outlive every tool (cleanKernel leaves them alone).
func setupPodNet() (*podNet, error) {
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return nil, fmt.Errorf("enable forwarding: %w", err)
	}
	if err := addPodNS(podNS, podAddr); err != nil {
		return nil, err
	}
	p := &podNet{}
	for k, block := range echoBlocks {
		name := fmt.Sprintf("%s%d", echoPrefix, k)
		if err := addPodNS(name, fmt.Sprintf("10.244.1.%d", k+1), block); err != nil {
			return nil, err
		}
		if err := ipCmd("-n", name, "route", "add", "local", block, "dev", "lo"); err != nil {
			return nil, err
		}
		cmd := exec.Command("ip", "netns", "exec", name, echoBin, "-name", name, "-tcp", fmt.Sprintf(":%d", echoPort))
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start echo server %s: %w", name, err)
		}
		p.echos = append(p.echos, cmd)
	}
	var err error
	if p.client, err = newNSDialer(podNS, 16); err != nil {
		return nil, err
	}
	// Each echo server answers directly (no Service in between) before
	// anything is measured.
	for k, block := range echoBlocks {
		ip, _, _ := net.ParseCIDR(block)
		ip[len(ip)-1] += 5
		addr := net.JoinHostPort(ip.String(), fmt.Sprint(echoPort))
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := p.client.ask(addr, time.Second)
			if err == nil && got == fmt.Sprintf("%s%d", echoPrefix, k) {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("echo server %s%d does not answer at %s: %q %v", echoPrefix, k, addr, got, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return p, nil
}

// cniMasquerade is what a CNI does for pod traffic leaving the node (the
// bridge plugin's ipMasq, ip-masq-agent): masquerade it. Here it lets a pod
// reach kubernetes.default, whose endpoint is the API server outside the
// VM. A table of its own, remade after each cleanKernel.
func cniMasquerade() error {
	rules := `table ip bench-cni {
	chain postrouting {
		type nat hook postrouting priority srcnat + 10; policy accept;
		ip saddr 10.244.0.0/16 oifname "eth0" masquerade
	}
}
`
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: the pod network's masquerade: %w: %s", err, out)
	}
	return nil
}

// nsDialer dials from inside a network namespace: each worker goroutine
// holds an OS thread moved into it (a socket is made in its thread's
// namespace; the connection keeps it whatever thread uses it after).
type nsDialer struct {
	jobs chan func()
}

func newNSDialer(ns string, workers int) (*nsDialer, error) {
	f, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return nil, fmt.Errorf("open namespace %s: %w", ns, err)
	}
	defer f.Close()
	d := &nsDialer{jobs: make(chan func())}
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			// Never unlocked: the thread is in another namespace for good.
			runtime.LockOSThread()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				errs <- fmt.Errorf("enter namespace %s: %w", ns, err)
				return
			}
			errs <- nil
			for j := range d.jobs {
				j()
			}
		}()
	}
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil {
			return nil, err
		}
	}
	return d, nil
}

func (d *nsDialer) dial(addr string, timeout time.Duration) (net.Conn, error) {
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	d.jobs <- func() {
		c, err := net.DialTimeout("tcp", addr, timeout)
		ch <- res{c, err}
	}
	r := <-ch
	return r.c, r.err
}

// ask connects to addr and returns the echo server's name (its first
// line is "NAME from PEER").
func (d *nsDialer) ask(addr string, timeout time.Duration) (string, error) {
	c, err := d.dial(addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read from %s: %w", addr, err)
	}
	name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
	return name, nil
}

// tlsHandshake connects to addr and completes a TLS handshake: a server
// speaking TLS (the API server) answered, not just some socket.
func (d *nsDialer) tlsHandshake(addr string, dial, total time.Duration) error {
	c, err := d.dial(addr, dial)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(total))
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true}) // the serving certificate names 127.0.0.1
	return tc.Handshake()
}

// sampler asks a sample of Services through their ClusterIP from the pod
// until each has answered once from an echo server.
type sampler struct {
	d        *nsDialer
	targets  []string // VIP:port
	answered []bool
	left     int
}

func newSampler(d *nsDialer, vips []string, port, size int) *sampler {
	s := &sampler{d: d}
	n := len(vips)
	if size > n {
		size = n
	}
	for k := 0; k < size; k++ {
		// Evenly spread, the first and the last Service included.
		i := 0
		if size > 1 {
			i = k * (n - 1) / (size - 1)
		}
		s.targets = append(s.targets, net.JoinHostPort(vips[i], fmt.Sprint(port)))
	}
	s.answered = make([]bool, len(s.targets))
	s.left = len(s.targets)
	return s
}

// poll asks every Service that has not answered yet, concurrently; it
// returns how many have answered so far.
func (s *sampler) poll(timeout time.Duration) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for k, t := range s.targets {
		if s.answered[k] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			name, err := s.d.ask(t, timeout)
			if err == nil && strings.HasPrefix(name, echoPrefix) {
				mu.Lock()
				s.answered[k] = true
				s.left--
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return len(s.targets) - s.left
}
