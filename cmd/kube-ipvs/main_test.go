package main

import (
	"bytes"
	"context"
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
		{[]string{"agent", "--scheduler", "fastest"}, []string{"--scheduler", `unknown scheduler "fastest"`}},
		{[]string{"agent", "--sync-period", "soon"}, []string{"sync-period", "soon"}},
		{[]string{"agent", "--min-sync-period", "1m", "--sync-period", "30s"}, []string{"--min-sync-period", "must be between"}},
		{[]string{"agent", "--nodeport-addresses", "10.0.0.0/33"}, []string{"--nodeport-addresses", "10.0.0.0/33"}},
		{[]string{"agent", "--exclude-cidrs", "banana"}, []string{"exclude-cidrs", `"banana" is not a CIDR`}},
		{[]string{"agent", "--udp-timeout", "1500ms"}, []string{"--udp-timeout", "whole number of seconds"}},
		{[]string{"agent", "--log-format", "xml"}, []string{"--log-format", "xml"}},
		{[]string{"agent", "--manifests", "x", "--kubeconfig", "y"}, []string{"--manifests", "--kubeconfig"}},
		{[]string{"agent", "--ipv4=false", "--ipv6=false"}, []string{"address family"}},
		{[]string{"agent", "--cluster-cidr", "10.244.0.0/16,10.245.0.0/16"}, []string{"--cluster-cidr", "same family"}},
		{[]string{"agent", "--iptables-backend", "bpf"}, []string{"--iptables-backend", `"bpf"`}},
		{[]string{"agent", "stray"}, []string{`unexpected argument "stray"`}},
		{[]string{"cleanup", "--nodeport-range", "3-1"}, []string{"nodeport-range", "FIRST-LAST"}},
		{[]string{"agent", "--nodeport-range", "30000-32767xyz"}, []string{"nodeport-range", `"30000-32767xyz"`}},
		{[]string{"agent", "--cluster-cidr", "10.244.0.0/16xyz"}, []string{"cluster-cidr", `"10.244.0.0/16xyz"`}},
		{[]string{"agent", "--debug-address", "127.0.0.1:10247xyz"}, []string{"--debug-address", `"127.0.0.1:10247xyz"`}},
		{[]string{"frobnicate"}, []string{`unknown command "frobnicate"`}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), append([]string{"kube-ipvs"}, tc.args...), &out, &errb)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, errb.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, errb.String())
				}
			}
		})
	}
}

func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"kube-ipvs", "version"}, &out, &errb); code != 0 || out.String() != "kube-ipvs dev\n" {
		t.Fatalf("exit %d, output %q", code, out.String())
	}
}
