package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
)

// refusedFlags are kube-proxy's flags the agent refuses, and the hint its
// error gives: each asks for another action than running the proxy.
var refusedFlags = map[string]string{
	"cleanup":   `kube-ipvs cleanup --kube-proxy`,
	"init-only": "kube-ipvs prepares the node at every start",
}

// kubeProxyFlag is one line of testdata/kube-proxy-v1.37.2.flags.
type kubeProxyFlag struct{ name, typ, bare string }

func kubeProxyFlags(t *testing.T) []kubeProxyFlag {
	t.Helper()
	f, err := os.Open("testdata/kube-proxy-v1.37.2.flags")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []kubeProxyFlag
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") {
			fields := append(strings.Fields(line), "")
			out = append(out, kubeProxyFlag{fields[0], fields[1], fields[2]})
		}
	}
	if err := sc.Err(); err != nil || len(out) < 50 {
		t.Fatalf("read %d flags: %v", len(out), err)
	}
	return out
}

// Every flag kube-proxy v1.37.2 defines (testdata, read from kube-proxy's
// own flag set by scripts/kube-proxy-flags.sh) is the agent's, with
// kube-proxy's type and the same value when given bare (a boolean takes
// none, so it never swallows the next argument), or is refused with a hint.
func TestAgentTakesKubeProxysFlags(t *testing.T) {
	var f files
	c := config.Default()
	fs := newFlagSet("agent", func(fs *pflag.FlagSet) { agentFlags(fs, &c, &f) })
	ref := map[string]bool{}
	for _, kp := range kubeProxyFlags(t) {
		ref[kp.name] = true
		if kp.name == "help" {
			continue // pflag's own: TestHelpExitsZero
		}
		got := fs.Lookup(kp.name)
		if hint, ok := refusedFlags[kp.name]; ok {
			var out, errb bytes.Buffer
			_, code := parseAgent([]string{"--" + kp.name}, &out, &errb)
			if got != nil || code != 2 || !strings.Contains(errb.String(), hint) {
				t.Errorf("--%s: defined %v, exit %d, want refused with %q:\n%s", kp.name, got != nil, code, hint, errb.String())
			}
			continue
		}
		if got == nil {
			t.Errorf("--%s (%s): not accepted", kp.name, kp.typ)
			continue
		}
		if got.Value.Type() != kp.typ || got.NoOptDefVal != kp.bare {
			t.Errorf("--%s: type %s, bare value %q; kube-proxy's %s, %q", kp.name, got.Value.Type(), got.NoOptDefVal, kp.typ, kp.bare)
		}
	}
	for _, name := range append(slices.Clone(ignoredFlagNames), "bind-address") {
		if !ref[name] {
			t.Errorf("--%s is ignored as kube-proxy's, but kube-proxy has no such flag", name)
		}
	}
}

// kube-proxy command lines mean what they mean to kube-proxy.
func TestKubeProxyCommandLines(t *testing.T) {
	def := config.Default()
	for _, tc := range []struct {
		name    string
		args    []string
		check   func(agentOptions) any
		want    any
		ignored []string
	}{
		{"a boolean before a flag takes no value", []string{"--iptables-localhost-nodeports", "--masquerade-all"},
			func(o agentOptions) any { return o.MasqueradeAll }, true, []string{"--iptables-localhost-nodeports"}},
		{"a bare --profiling", []string{"--profiling"}, func(o agentOptions) any { return reflect.DeepEqual(o.Config, def) }, true, []string{"--profiling"}},
		{"a bare --log-json-split-stream", []string{"--log-json-split-stream", "--log-json-info-buffer-size=2Ki"},
			func(o agentOptions) any { return reflect.DeepEqual(o.Config, def) }, true, []string{"--log-json-split-stream", "--log-json-info-buffer-size"}},
		{"--healthz-port=0 turns the health server off", []string{"--healthz-port=0"},
			func(o agentOptions) any { return o.HealthzBindAddress + "|" + o.MetricsBindAddress }, "|127.0.0.1:10249", nil},
		{"--metrics-port=0 turns the metrics server off", []string{"--metrics-port", "0"},
			func(o agentOptions) any { return o.HealthzBindAddress + "|" + o.MetricsBindAddress }, "0.0.0.0:10256|", nil},
		{"a port completes a bare IP", []string{"--healthz-bind-address=10.0.0.1", "--healthz-port=1234"},
			func(o agentOptions) any { return o.HealthzBindAddress }, "10.0.0.1:1234", nil},
		{"a port leaves IP:PORT alone", []string{"--metrics-bind-address=10.0.0.1:9000", "--metrics-port=1234"},
			func(o agentOptions) any { return o.MetricsBindAddress }, "10.0.0.1:9000", nil},
		{"a string slice appends", []string{"--ipvs-exclude-cidrs=192.0.2.0/24", "--ipvs-exclude-cidrs=198.51.100.0/24,2001:db8::/64"},
			func(o agentOptions) any { return len(o.ExcludeCIDRs) }, 3, nil},
		{"nodeport addresses append", []string{"--nodeport-addresses=primary", "--nodeport-addresses=10.0.0.0/8"},
			func(o agentOptions) any { return strings.Join(o.NodePortAddresses, ",") }, "primary,10.0.0.0/8", nil},
		{"typed ignored flags", []string{"--feature-gates=A=true,B=false", "--vmodule=proxier=5", "--oom-score-adj=-500", "--config-sync-period=1m"},
			func(o agentOptions) any { return reflect.DeepEqual(o.Config, def) }, true, []string{"--feature-gates", "--vmodule", "--oom-score-adj", "--config-sync-period"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _ := parse(t, tc.args...)
			if got := tc.check(o); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			if !slices.Equal(o.ignored, tc.ignored) {
				t.Errorf("ignored %q, want %q", o.ignored, tc.ignored)
			}
		})
	}
}

// Values kube-proxy refuses for its typed flags are refused, naming the
// flag.
func TestKubeProxyFlagValuesRefused(t *testing.T) {
	for _, args := range [][]string{
		{"--feature-gates=A"}, {"--vmodule=proxier"}, {"--oom-score-adj=low"}, {"--log-text-info-buffer-size=lots"},
		{"--bind-address=node-a"}, {"--profiling=maybe"}, {"--healthz-port=http"},
	} {
		var out, errb bytes.Buffer
		if _, code := parseAgent(args, &out, &errb); code != 2 || !strings.Contains(errb.String(), strings.SplitN(args[0], "=", 2)[0]) {
			t.Errorf("%q: exit %d, want 2 naming the flag:\n%s", args, code, errb.String())
		}
	}
}

// --version prints the version and exits 0, as kube-proxy's does.
func TestAgentVersionFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"kube-ipvs", "agent", "--version"}, &out, &errb); code != 0 || out.String() != "kube-ipvs "+version+"\n" {
		t.Errorf("exit %d, printed %q\n%s", code, out.String(), errb.String())
	}
}

// A bindAddress naming a specific IP, kube-proxy's node IP, is warned
// about: kube-ipvs reads the Node's addresses. An unspecified one is not.
func TestBindAddressNodeIPWarned(t *testing.T) {
	file := t.TempDir() + "/config.conf"
	data, err := os.ReadFile(kubeadmFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, bytes.Replace(data, []byte("bindAddress: 0.0.0.0"), []byte("bindAddress: 192.0.2.7"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bind-address=192.0.2.8"}, "192.0.2.8"},
		{[]string{"--config", file}, "192.0.2.7"},
		{[]string{"--bind-address=::"}, ""},
		{[]string{"--config", kubeadmFile}, ""},
	} {
		o, _ := parse(t, tc.args...)
		core, logs := observer.New(zapcore.WarnLevel)
		o.warn(zap.New(core))
		got := ""
		if w := logs.FilterMessageSnippet("bindAddress").All(); len(w) == 1 {
			got = w[0].ContextMap()["bindAddress"].(string)
		}
		if got != tc.want {
			t.Errorf("%q: warned about %q, want %q", tc.args, got, tc.want)
		}
	}
}
