package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/server"
	"github.com/kube-ipvs/kube-ipvs/internal/status"
)

// streamOps answers a diff of n bytes or more, in chunks, as an agent
// gone wrong (or another server on the address) could.
func streamOps(n int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"ops": [`)
		line := strings.Repeat(`"-a -t 10.96.0.1:80 -r 10.244.1.2:8080 -m -w 1",`, 1000)
		for sent := 0; sent < n; sent += len(line) {
			if _, err := io.WriteString(w, line); err != nil {
				return
			}
		}
		io.WriteString(w, `"-D -t 10.96.0.1:80"]}`)
	})
}

// The status and diff commands read a bounded answer: one over the cap is
// refused, not read to its end.
func TestDiffReadsABoundedAnswer(t *testing.T) {
	tests := []struct {
		name   string
		size   int
		code   int
		stderr string
	}{
		{"an answer under the cap is printed", 1 << 20, 1, ""},
		{"an answer over the cap is refused", maxAnswerBytes + 1<<20, 2, fmt.Sprintf("over the %d bytes read", maxAnswerBytes)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(streamOps(tt.size))
			defer srv.Close()
			var stdout, stderr bytes.Buffer
			addr := strings.TrimPrefix(srv.URL, "http://")
			code := runDiff(context.Background(), []string{"--address", addr}, &stdout, &stderr)
			if code != tt.code || !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr.String(), tt.code, tt.stderr)
			}
			if tt.code == 1 && !strings.HasSuffix(stdout.String(), "-D -t 10.96.0.1:80\n") {
				t.Errorf("printed %d bytes not ending in the last op", stdout.Len())
			}
			if tt.code == 2 && stdout.Len() != 0 {
				t.Errorf("printed %d bytes of a refused answer", stdout.Len())
			}
		})
	}
}

// statusAgent answers /status as an agent with two Services would.
func statusAgent(t *testing.T) string {
	t.Helper()
	rep := status.Report{
		Node: "node-a",
		VIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("10.96.0.100")},
		VirtualServers: []status.VirtualServer{
			{Key: "-u 10.96.0.10:53", Service: "kube-system/kube-dns", Port: "dns", Kind: "ClusterIP", Scheduler: "rr", InKernel: true, Wanted: true,
				Reals: []status.Real{{Addr: netip.MustParseAddrPort("10.244.1.3:53"), Weight: 1, Pod: "coredns-1", Node: "node-a", State: status.Ready}}},
			{Key: "-t 10.96.0.100:80", Service: "default/web", Port: "http", Kind: "ClusterIP", Scheduler: "rr", InKernel: true, Wanted: true,
				Reals: []status.Real{
					{Addr: netip.MustParseAddrPort("10.244.1.2:8080"), Weight: 1, Pod: "web-1", Node: "node-a", State: status.Ready},
					{Addr: netip.MustParseAddrPort("10.244.2.2:8080"), Weight: -1, Pod: "web-2", Node: "node-b", State: status.NotReady},
				}},
			{Key: "-t 192.0.2.1:8080", Scheduler: "wlc", InKernel: true},
		},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != server.PathStatus {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(rep)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// status takes kubectl's -o (text, wide, json, yaml) and names Services
// to show, as arguments or --service; a Service nothing serves exits 1.
func TestStatusOutputsAndFilter(t *testing.T) {
	addr := statusAgent(t)
	for _, tc := range []struct {
		args []string
		code int
		want []string // in stdout, in order
		not  []string
	}{
		{[]string{"-o", "json"}, 0, []string{`"node": "node-a"`, `"service": "kube-system/kube-dns"`, `"service": "default/web"`, `"key": "-t 192.0.2.1:8080"`}, nil},
		{[]string{"-o", "yaml", "default/web"}, 0, []string{"node: node-a\n", "- 10.96.0.100\n", "pod: web-2\n", "service: default/web\n"},
			[]string{"kube-dns", "10.96.0.10\n", "192.0.2.1"}},
		{[]string{"--output=wide", "--service", "kube-system/kube-dns"}, 0, []string{"VIRTUAL SERVER", "REAL SERVER", "POD", "-u 10.96.0.10:53", "kube-system/kube-dns", "10.244.1.3:53", "coredns-1"},
			[]string{"default/web"}},
		{[]string{"-o", "wide"}, 0, []string{"-u 10.96.0.10:53", "-t 10.96.0.100:80", "10.244.2.2:8080  -       not-ready", "-t 192.0.2.1:8080", "foreign"}, nil},
		{[]string{"web"}, 0, []string{"VIPs on kube-ipvs0: 10.96.0.100\n", "-t 10.96.0.100:80 rr  default/web port http (ClusterIP)"}, []string{"kube-dns"}},
		{[]string{"default/nothing"}, 1, []string{"node node-a"}, []string{"-t 10.96.0.100:80"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append([]string{"kube-ipvs", "status", "--address", addr}, tc.args...), &stdout, &stderr)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s", code, tc.code, stderr.String())
			}
			out := stdout.String()
			rest := out
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("stdout lacks %q (in order):\n%s", w, out)
				}
				rest = rest[i+len(w):]
			}
			for _, n := range tc.not {
				if strings.Contains(out, n) {
					t.Errorf("stdout has %q:\n%s", n, out)
				}
			}
		})
	}
}

// Every command answers -h and --help with its flags on stdout and exits
// 0, "kube-ipvs help" and "kube-ipvs help COMMAND" too; status and diff
// take pflag's flags like the others, and say what is wrong with one.
func TestEveryCommandHelps(t *testing.T) {
	for _, args := range [][]string{
		{"help"}, {"--help"}, {"-h"},
		{"agent", "--help"}, {"agent", "-h"}, {"cleanup", "-h"}, {"status", "-h"}, {"status", "--help"},
		{"diff", "-h"}, {"diff", "--help"}, {"help", "status"}, {"help", "diff"}, {"help", "agent"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), append([]string{"kube-ipvs"}, args...), &stdout, &stderr); code != 0 || stdout.Len() == 0 {
			t.Errorf("%q: exit %d, %d bytes on stdout, want 0 and the help\n%s", args, code, stdout.Len(), stderr.String())
		}
		if (args[0] == "status" || args[1%len(args)] == "status") && !strings.Contains(stdout.String(), "--output") {
			t.Errorf("%q: the help lacks --output:\n%s", args, stdout.String())
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "-o", "xml"}, "kube-ipvs status: --output=xml: want text, wide, json or yaml"},
		{[]string{"status", "-address", "x"}, "(long flags take two dashes: --address)"},
		{[]string{"diff", "--frob"}, "kube-ipvs diff: unknown flag: --frob"},
		{[]string{"diff", "stray"}, `kube-ipvs diff: unexpected argument "stray"`},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), append([]string{"kube-ipvs"}, tc.args...), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}
