package dataplane

import (
	"fmt"
	"testing"
	"time"
)

func TestConntrackSysctls(t *testing.T) {
	kubeProxyDefaults := ConntrackTuning{MaxPerCore: 32768, Min: 131072, TCPEstablished: 24 * time.Hour, TCPCloseWait: time.Hour}
	for _, tc := range []struct {
		name string
		c    ConntrackTuning
		cpus int
		want string
	}{
		{"kube-proxy's defaults, 2 CPUs: Min wins", kubeProxyDefaults, 2,
			"[{net/netfilter/nf_conntrack_max 131072} {net/netfilter/nf_conntrack_tcp_timeout_established 86400} {net/netfilter/nf_conntrack_tcp_timeout_close_wait 3600}]"},
		{"kube-proxy's defaults, 8 CPUs: scaled", kubeProxyDefaults, 8,
			"[{net/netfilter/nf_conntrack_max 262144} {net/netfilter/nf_conntrack_tcp_timeout_established 86400} {net/netfilter/nf_conntrack_tcp_timeout_close_wait 3600}]"},
		{"MaxPerCore 0 leaves the limit and Min alone", ConntrackTuning{Min: 500000}, 8, "[]"},
		{"every setting", ConntrackTuning{MaxPerCore: 10, Min: 1, TCPEstablished: 90 * time.Second, TCPCloseWait: 61 * time.Second,
			TCPBeLiberal: true, UDP: 30 * time.Second, UDPStream: 2 * time.Minute}, 4,
			"[{net/netfilter/nf_conntrack_max 40} {net/netfilter/nf_conntrack_tcp_timeout_established 90} {net/netfilter/nf_conntrack_tcp_timeout_close_wait 61} {net/netfilter/nf_conntrack_tcp_be_liberal 1} {net/netfilter/nf_conntrack_udp_timeout 30} {net/netfilter/nf_conntrack_udp_timeout_stream 120}]"},
		{"zero: nothing", ConntrackTuning{}, 4, "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fmt.Sprint(tc.c.Sysctls(tc.cpus)); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}
