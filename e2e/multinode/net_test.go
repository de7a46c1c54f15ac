package multinode

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/vishvananda/netns"
)

// Addressing. The underlay is one bridge in the VM's root namespace; every
// node and the outside namespace have a veth on it. Node i has the underlay
// address 172.20.0.(10+i) and the pod CIDR 10.244.i.0/24, its pods' gateway
// is 10.244.i.1 (on every pod veth of the node, as /32).
const (
	bridgeName   = "br0"
	bridgeAddr   = "172.20.0.1"
	underlayCIDR = "172.20.0.0/24"
	outsideNS    = "outside"
	outsideAddr  = "172.20.0.200"
	clusterCIDR  = "10.244.0.0/16"
	apiServerIP  = "10.0.2.100" // the host's API server, as the VM sees it
	podTCPPort   = 8080
	podUDPPort   = 5353
)

func nodeAddr(i int) string   { return fmt.Sprintf("172.20.0.%d", 10+i) }
func podCIDR(i int) string    { return fmt.Sprintf("10.244.%d.0/24", i) }
func podGateway(i int) string { return fmt.Sprintf("10.244.%d.1", i) }

// ip runs iproute2's ip (first on PATH for exec in the VM).
func ip(args ...string) error {
	_, err := run("ip", args...)
	return err
}

// run executes a command and returns its combined output; the error names
// the command and carries the output.
func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// inNS runs a command in a network namespace.
func inNS(ns, name string, args ...string) (string, error) {
	return run("ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

func steps(what string, cmds [][]string) error {
	for _, c := range cmds {
		if err := ip(c...); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

func writeFile(path, content string) error {
	return os.WriteFile(path, []byte(content), 0o644)
}

// setupUnderlay makes the bridge and lets the nodes reach the API server:
// the root namespace forwards and masquerades to eth0's 10.0.2.15, the only
// source the VM's user-mode network answers.
func setupUnderlay() error {
	if _, err := run("modprobe", "bridge"); err != nil {
		return err
	}
	if err := steps("underlay bridge", [][]string{
		{"link", "add", bridgeName, "type", "bridge"},
		{"addr", "add", bridgeAddr + "/24", "dev", bridgeName},
		{"link", "set", bridgeName, "up"},
	}); err != nil {
		return err
	}
	if err := writeFile("/proc/sys/net/ipv4/ip_forward", "1"); err != nil {
		return err
	}
	_, err := run("iptables", "-w", "-t", "nat", "-A", "POSTROUTING", "-s", underlayCIDR, "-o", "eth0", "-j", "MASQUERADE")
	return err
}

// addOnUnderlay makes namespace ns with eth0 on the bridge at addr, default
// route via the root namespace.
func addOnUnderlay(ns, hostEnd, addr string) error {
	return steps("namespace "+ns, [][]string{
		{"netns", "add", ns},
		{"link", "add", hostEnd, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"link", "set", hostEnd, "master", bridgeName},
		{"link", "set", hostEnd, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "addr", "add", addr + "/24", "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "route", "add", "default", "via", bridgeAddr},
	})
}

// setupNode makes node i's namespace with routes to the other nodes' pod
// CIDRs over the underlay (a host-gateway pod network), forwarding on, and
// a FORWARD rule matching on connection state as every real node has one
// (the kernel tracks connections only once a rule needs it).
func setupNode(i, nodes int) error {
	ns := nodeName(i)
	if err := addOnUnderlay(ns, fmt.Sprintf("n%d", i), nodeAddr(i)); err != nil {
		return err
	}
	var routes [][]string
	for j := 1; j <= nodes; j++ {
		if j != i {
			routes = append(routes, []string{"-n", ns, "route", "add", podCIDR(j), "via", nodeAddr(j)})
		}
	}
	if err := steps("routes of "+ns, routes); err != nil {
		return err
	}
	if _, err := inNS(ns, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
		return err
	}
	_, err := inNS(ns, "iptables", "-w", "-A", "FORWARD", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT")
	return err
}

// addPodNS makes a pod namespace behind node i: veth "p-NAME" in the node
// holding the gateway /32, the pod's /32 on its eth0, default route via
// the gateway.
func addPodNS(name string, node int, addr string) error {
	ns, host, gw := nodeName(node), "p-"+name, podGateway(node)
	return steps("pod "+name, [][]string{
		{"netns", "add", name},
		{"-n", ns, "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", name},
		{"-n", ns, "addr", "add", gw + "/32", "dev", host},
		{"-n", ns, "link", "set", host, "up"},
		{"-n", ns, "route", "add", addr + "/32", "dev", host, "src", gw},
		{"-n", name, "link", "set", "lo", "up"},
		{"-n", name, "addr", "add", addr + "/32", "dev", "eth0"},
		{"-n", name, "link", "set", "eth0", "up"},
		{"-n", name, "route", "add", gw + "/32", "dev", "eth0", "scope", "link"},
		{"-n", name, "route", "add", "default", "via", gw, "dev", "eth0", "src", addr},
	})
}

// dialIn opens a connection from inside network namespace ns. The socket is
// made on a thread of its own switched into ns; the thread is never
// switched back, so it ends with its goroutine instead of returning to the
// runtime's pool in the wrong namespace. The socket stays in ns.
func dialIn(ctx context.Context, ns, network, addr string, timeout time.Duration) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns)
		if err != nil {
			ch <- result{nil, fmt.Errorf("open namespace %s: %w", ns, err)}
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			ch <- result{nil, fmt.Errorf("enter namespace %s: %w", ns, err)}
			return
		}
		d := net.Dialer{Timeout: timeout}
		c, err := d.DialContext(ctx, network, addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
