package main

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"
)

// Bad flags are refused before anything touches the kernel, with a message
// that names the flag and the problem.
func TestBadFlagsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"agent", "--ipvs-scheduler", "fastest"}, []string{"--ipvs-scheduler", `unknown scheduler "fastest"`}},
		{[]string{"agent", "--scheduler", "fastest"}, []string{"--scheduler has been deprecated, use --ipvs-scheduler", `unknown scheduler "fastest"`}},
		{[]string{"agent", "--ipvs-sync-period", "soon"}, []string{`--ipvs-sync-period=soon: want a duration such as 30s, 5m or 1h30m, got "soon"`}},
		{[]string{"agent", "--ipvs-tcp-timeout=900"}, []string{`--ipvs-tcp-timeout=900: a duration needs a unit, e.g. "900s"`}},
		{[]string{"agent", "--ipvs-min-sync-period", "1m", "--ipvs-sync-period", "30s"}, []string{"--ipvs-min-sync-period", "must be between"}},
		{[]string{"agent", "--nodeport-addresses", "10.0.0.0/33"}, []string{"--nodeport-addresses=10.0.0.0/33", `neither "primary" nor a CIDR (or "all")`}},
		{[]string{"agent", "--ipvs-exclude-cidrs", "banana"}, []string{`--ipvs-exclude-cidrs=banana: "banana" is not a CIDR`}},
		{[]string{"agent", "--ipvs-udp-timeout", "1500ms"}, []string{"--ipvs-udp-timeout", "whole number of seconds"}},
		{[]string{"agent", "--logging-format", "xml"}, []string{"--logging-format=xml: want text or json"}},
		{[]string{"agent", "--manifests", "x", "--kubeconfig", "y"}, []string{"--manifests", "--kubeconfig"}},
		{[]string{"agent", "--ipv4=false", "--ipv6=false"}, []string{"address family"}},
		{[]string{"agent", "--cluster-cidr", "10.244.0.0/16,10.245.0.0/16"}, []string{"--cluster-cidr", "same family"}},
		{[]string{"agent", "--iptables-backend", "bpf"}, []string{"--iptables-backend", `"bpf"`}},
		{[]string{"agent", "--vip-binding", "addresses"}, []string{"--vip-binding", `"addresses"`}},
		{[]string{"agent", "--proxy-mode", "iptables"}, []string{`kube-ipvs programs IPVS only, it cannot act as kube-proxy's "iptables" mode`}},
		{[]string{"agent", "--kube-api-burst", "lots"}, []string{"--kube-api-burst=lots: want a whole number"}},
		{[]string{"agent", "--kube-api-qps", "fast"}, []string{"--kube-api-qps=fast: want a number"}},
		{[]string{"agent", "--ipvs-strict-arp=maybe"}, []string{"--ipvs-strict-arp=maybe: want true or false"}},
		{[]string{"agent", "--masquerade-all", "true"}, []string{`unexpected argument "true" (a boolean takes its value with =: --masquerade-all=true)`}},
		{[]string{"agent", "-kubeconfig", "x"}, []string{"(long flags take two dashes: --kubeconfig)"}},
		{[]string{"agent", "--cleanup"}, []string{`unknown flag: --cleanup (kube-proxy's --cleanup is "kube-ipvs cleanup --kube-proxy")`}},
		{[]string{"agent", "--init-only"}, []string{"unknown flag: --init-only (kube-ipvs prepares the node at every start: run the agent)"}},
		{[]string{"agent", "--frobnicate"}, []string{"unknown flag: --frobnicate; see --help"}},
		{[]string{"agent", "--healthz-bind-address", "nowhere"}, []string{"--healthz-bind-address=nowhere: want IP:PORT or IP (port 10256), or empty to turn it off"}},
		{[]string{"agent", "-v", "loud"}, []string{"--v=loud: want a whole number from 0 to 127"}},
		{[]string{"agent", "--detect-local-mode", "InterfaceNamePrefix"}, []string{"--pod-interface-name-prefix (detectLocal.interfaceNamePrefix): the pods' interface name must not be empty"}},
		{[]string{"agent", "--iptables-masquerade-bit", "32"}, []string{"--iptables-masquerade-bit (iptables.masqueradeBit): must be within the range [0, 31], got 32"}},
		{[]string{"agent", "--config", "/nonexistent/config.conf"}, []string{"--config /nonexistent/config.conf: open /nonexistent/config.conf: no such file or directory"}},
		{[]string{"agent", "stray"}, []string{`unexpected argument "stray"; see --help`}},
		{[]string{"cleanup", "--nodeport-range", "3-1"}, []string{"nodeport-range", "FIRST-LAST"}},
		{[]string{"agent", "--nodeport-range", "30000-32767xyz"}, []string{"nodeport-range", `"30000-32767xyz"`}},
		{[]string{"agent", "--cluster-cidr", "10.244.0.0/16xyz"}, []string{"cluster-cidr", `"10.244.0.0/16xyz"`}},
		{[]string{"agent", "--debug-address", "127.0.0.1:10247xyz"}, []string{"--debug-address", `"127.0.0.1:10247xyz"`}},
		{[]string{"cleanup", "--kube-proxy-only", "--shim-only"}, []string{"--kube-proxy-only and --shim-only exclude each other"}},
		{[]string{"cleanup", "--exclude-cidrs", "banana"}, []string{`--exclude-cidrs=banana: "banana" is not a CIDR`}},
		{[]string{"frobnicate"}, []string{`unknown command "frobnicate"`}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), append([]string{"kube-ipvs"}, tc.args...), &out, &errb)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, errb.String())
			}
			if n := strings.Count(strings.TrimSpace(errb.String()), "\n"); n > 1 && tc.args[0] != "frobnicate" {
				t.Errorf("want one line (two with a deprecation), got %d:\n%s", n+1, errb.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, errb.String())
				}
			}
		})
	}
}

// TestVersion: the version and the platform the binary was built for, which
// the image check compares with the platform of the image that carries it.
func TestVersion(t *testing.T) {
	want := "kube-ipvs dev " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	for _, arg := range []string{"version", "--version"} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"kube-ipvs", arg}, &out, &errb); code != 0 || out.String() != want {
			t.Errorf("%s: exit %d, output %q, want %q", arg, code, out.String(), want)
		}
	}
}
