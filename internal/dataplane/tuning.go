package dataplane

import (
	"strconv"
	"time"
)

// ConntrackTuning is the nf_conntrack tuning kube-proxy applies at start (its
// conntrack.* settings); zero leaves a value as the kernel has it.
type ConntrackTuning struct {
	// MaxPerCore scales nf_conntrack_max with the CPUs, never below Min;
	// zero leaves the limit (and Min) alone.
	MaxPerCore, Min int
	TCPEstablished  time.Duration
	TCPCloseWait    time.Duration
	TCPBeLiberal    bool
	UDP, UDPStream  time.Duration
}

// Sysctl is one value to write under /proc/sys.
type Sysctl struct{ Key, Value string }

// Max is the nf_conntrack_max kube-proxy asks for on a node with cpus CPUs:
// MaxPerCore × cpus, at least Min; zero when MaxPerCore is zero.
func (c ConntrackTuning) Max(cpus int) int {
	if c.MaxPerCore <= 0 {
		return 0
	}
	return max(c.MaxPerCore*cpus, c.Min)
}

// Sysctls lists what c writes, in kube-proxy's order (cmd/kube-proxy's
// conntrack setup): the table size, then the timeouts it was given.
// Timeouts are whole seconds, as the kernel takes them.
func (c ConntrackTuning) Sysctls(cpus int) []Sysctl {
	var out []Sysctl
	add := func(name string, v int) {
		out = append(out, Sysctl{Key: "net/netfilter/" + name, Value: strconv.Itoa(v)})
	}
	if m := c.Max(cpus); m > 0 {
		add("nf_conntrack_max", m)
	}
	for _, t := range []struct {
		name string
		d    time.Duration
	}{
		{"nf_conntrack_tcp_timeout_established", c.TCPEstablished},
		{"nf_conntrack_tcp_timeout_close_wait", c.TCPCloseWait},
	} {
		if t.d > 0 {
			add(t.name, int(t.d/time.Second))
		}
	}
	if c.TCPBeLiberal {
		add("nf_conntrack_tcp_be_liberal", 1)
	}
	if c.UDP > 0 {
		add("nf_conntrack_udp_timeout", int(c.UDP/time.Second))
	}
	if c.UDPStream > 0 {
		add("nf_conntrack_udp_timeout_stream", int(c.UDPStream/time.Second))
	}
	return out
}
