package main

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

const (
	kubeadmFile   = "../../internal/config/testdata/kubeadm-v1.37.2-ipvs.conf"
	kubeProxyFile = "../../internal/config/testdata/kube-proxy-v1.37.2-ipvs-flags.yaml"
)

func parse(t *testing.T, args ...string) (agentOptions, string) {
	t.Helper()
	var out, errb bytes.Buffer
	o, code := parseAgent(args, &out, &errb)
	if code != -1 {
		t.Fatalf("parseAgent %q: exit %d\n%s", args, code, errb.String())
	}
	return o, errb.String()
}

// Flags given explicitly override the file; flags left out do not, even
// where their default differs from the file's value.
func TestFlagsOverrideTheFile(t *testing.T) {
	o, _ := parse(t, "--config", kubeProxyFile, "--ipvs-scheduler", "wrr", "--hostname-override", "node-b",
		"--ipvs-tcp-timeout=1h", "--masquerade-all=false", "--drain-timeout", "10s",
		"--max-frontends-per-service", "100")
	c := o.Config
	for _, check := range []struct {
		what      string
		got, want any
	}{
		{"scheduler (flag)", c.Scheduler, model.Scheduler("wrr")},
		{"hostname (flag)", c.HostnameOverride, "node-b"},
		{"tcp timeout (flag)", c.Timeouts.TCP, time.Hour},
		{"masquerade all (flag, back to false)", c.MasqueradeAll, false},
		{"drain timeout (kube-ipvs only)", c.DrainTimeout, 10 * time.Second},
		{"frontends per Service (kube-ipvs only)", c.MaxFrontends, 100},
		{"tcpfin timeout (file)", c.Timeouts.TCPFin, 120 * time.Second},
		{"sync period (file; the flag's default is 30s)", c.SyncPeriod, time.Minute},
		{"kubeconfig (file)", c.Kubeconfig, "/var/lib/kube-proxy/kubeconfig.conf"},
		{"log format (file)", c.LogFormat, "json"},
	} {
		if !reflect.DeepEqual(check.got, check.want) {
			t.Errorf("%s: got %v, want %v", check.what, check.got, check.want)
		}
	}
	if want := []string{"--ipvs-scheduler", "--ipvs-tcp-timeout", "--masquerade-all"}; !slices.Equal(o.overridden, want) {
		t.Errorf("overridden %q, want %q", o.overridden, want)
	}
}

// Without --config, the flags apply onto kube-proxy's defaults.
func TestFlagsWithoutFile(t *testing.T) {
	o, _ := parse(t, "--ipvs-sync-period=10s", "--master", "https://192.0.2.10:6443", "--kube-api-qps", "20",
		"--healthz-bind-address", "10.0.0.1", "--metrics-bind-address", "", "-v", "4", "--conntrack-max-per-core=0")
	want := config.Default()
	want.SyncPeriod, want.Master, want.Client.QPS = 10*time.Second, "https://192.0.2.10:6443", 20
	want.HealthzBindAddress, want.MetricsBindAddress, want.LogLevel = "10.0.0.1:10256", "", "debug"
	want.Conntrack.MaxPerCore = 0
	if !reflect.DeepEqual(o.Config, want) {
		t.Errorf("got  %+v\nwant %+v", o.Config, want)
	}
	if len(o.overridden) > 0 {
		t.Errorf("overridden %q without a file", o.overridden)
	}
}

// Today's names keep working, each saying once that it is deprecated.
func TestDeprecatedAliases(t *testing.T) {
	o, stderr := parse(t, "--scheduler", "lc", "--sync-period", "10s", "--min-sync-period", "2s", "--exclude-cidrs", "192.0.2.0/24",
		"--strict-arp", "--tcp-timeout", "900s", "--tcpfin-timeout", "60s", "--udp-timeout", "30s", "--log-format", "json")
	want := config.Default()
	want.Scheduler, want.SyncPeriod, want.MinSyncPeriod = "lc", 10*time.Second, 2*time.Second
	want.ExcludeCIDRs = prefixesOf("192.0.2.0/24")
	want.StrictARP, want.Timeouts.TCP, want.Timeouts.TCPFin, want.Timeouts.UDP = true, 900*time.Second, time.Minute, 30*time.Second
	want.LogFormat = "json"
	if !reflect.DeepEqual(o.Config, want) {
		t.Errorf("got  %+v\nwant %+v", o.Config, want)
	}
	for old, name := range map[string]string{"scheduler": "ipvs-scheduler", "sync-period": "ipvs-sync-period", "min-sync-period": "ipvs-min-sync-period",
		"exclude-cidrs": "ipvs-exclude-cidrs", "strict-arp": "ipvs-strict-arp", "tcp-timeout": "ipvs-tcp-timeout", "tcpfin-timeout": "ipvs-tcpfin-timeout",
		"udp-timeout": "ipvs-udp-timeout", "log-format": "logging-format"} {
		line := "Flag --" + old + " has been deprecated, use --" + name + "\n"
		if n := strings.Count(stderr, line); n != 1 {
			t.Errorf("%q printed %d times:\n%s", line, n, stderr)
		}
	}
}

func prefixesOf(ss ...string) []netip.Prefix {
	ps, err := config.ParsePrefixes(ss)
	if err != nil {
		panic(err)
	}
	return ps
}

// -h and --help list kube-proxy's names, not the deprecated aliases nor
// the ignored kube-proxy flags, and exit 0.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"agent", "-h"}, {"agent", "--help"}, {"cleanup", "-h"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), append([]string{"kube-ipvs"}, args...), &out, &errb); code != 0 {
			t.Fatalf("%q: exit %d\n%s", args, code, errb.String())
		}
		if !strings.Contains(out.String(), "--ipvs-exclude-cidrs") || strings.Contains(out.String(), "--exclude-cidrs ") ||
			strings.Contains(out.String(), "--iptables-sync-period") {
			t.Errorf("%q: usage\n%s", args, out.String())
		}
	}
}

// kube-proxy flags with no meaning here are accepted and, with the file's
// such fields, named in one warning line.
func TestIgnoredSettingsOneWarning(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.conf")
	data, err := os.ReadFile(kubeadmFile)
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte("oomScoreAdj: null"), []byte("oomScoreAdj: -500"), 1)
	data = bytes.Replace(data, []byte("  enableDSR: false"), []byte("  enableDSR: true"), 1)
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	o, _ := parse(t, "--config", file, "--iptables-sync-period", "10s", "--feature-gates", "A=true")
	core, logs := observer.New(zapcore.WarnLevel)
	o.warn(zap.New(core))
	warned := logs.FilterMessageSnippet("no meaning in kube-ipvs").All()
	if len(warned) != 1 {
		t.Fatalf("%d warnings about ignored settings, want 1: %v", len(warned), logs.All())
	}
	want := []any{"oomScoreAdj", "winkernel", "--iptables-sync-period", "--feature-gates"}
	if got := warned[0].ContextMap()["ignored"]; !reflect.DeepEqual(got, want) {
		t.Errorf("ignored %v, want %v", got, want)
	}
	if n := logs.FilterMessageSnippet("nodePortAddresses is unset").Len(); n != 1 {
		t.Errorf("%d warnings about unset nodePortAddresses, want 1", n)
	}
}

// --write-config-to writes the effective configuration and exits 0; the
// file reads back as the same configuration.
func TestWriteConfigTo(t *testing.T) {
	for name, args := range map[string][]string{
		"flags":        {"--ipvs-scheduler", "lc", "--ipvs-tcp-timeout", "900s", "--cluster-cidr", "10.244.0.0/16", "--nodeport-addresses", "primary"},
		"kubeadm file": {"--config", kubeadmFile, "--ipvs-strict-arp"},
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "out.yaml")
			want, _ := parse(t, args...)
			var out, errb bytes.Buffer
			if code := run(context.Background(), append([]string{"kube-ipvs", "agent", "--write-config-to", file}, args...), &out, &errb); code != 0 {
				t.Fatalf("exit %d\n%s", code, errb.String())
			}
			got, _ := parse(t, "--config", file)
			want.ProxyMode = config.ProxyModeIPVS
			if !reflect.DeepEqual(got.Config, want.Config) {
				t.Errorf("read back\n got %+v\nwant %+v", got.Config, want.Config)
			}
		})
	}
}

// A config file with a field kube-proxy v1.37 does not know (a newer
// kubeadm's) starts the agent, read leniently as kube-proxy reads it, and
// one warning names the field.
func TestConfigFileWithAnUnknownFieldStarts(t *testing.T) {
	data, err := os.ReadFile(kubeadmFile)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "config.conf")
	data = append(bytes.Replace(data, []byte("ipvs:\n"), []byte("ipvs:\n  futureKnob: 3\n"), 1), "futureSection: {}\n"...)
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	o, _ := parse(t, "--config", file)
	want, _ := parse(t, "--config", kubeadmFile)
	if !reflect.DeepEqual(o.Config, want.Config) {
		t.Errorf("config\n got %+v\nwant %+v", o.Config, want.Config)
	}
	core, logs := observer.New(zapcore.WarnLevel)
	o.warn(zap.New(core))
	warned := logs.FilterMessageSnippet("does not know").All()
	if len(warned) != 1 {
		t.Fatalf("%d warnings about unknown fields, want 1: %v", len(warned), logs.All())
	}
	if got, want := fmt.Sprint(warned[0].ContextMap()["unknown"]), `[unknown field "futureSection" unknown field "ipvs.futureKnob"]`; got != want {
		t.Errorf("unknown %s, want %s", got, want)
	}
}

// The migration pre-check (--config with --write-config-to) refuses a file
// whose mode kube-proxy runs as iptables, empty included; --proxy-mode=ipvs
// on the command line says the node is ready for IPVS.
func TestPreCheckRefusesAnEmptyMode(t *testing.T) {
	data, err := os.ReadFile(kubeadmFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, mode string
		flags      []string
		code       int
	}{
		{"empty", `mode: ""`, nil, 2},
		{"iptables", "mode: iptables", nil, 2},
		{"nftables", "mode: nftables", nil, 2},
		{"absent", "", nil, 2},
		{"ipvs", "mode: ipvs", nil, 0},
		{"empty, with --proxy-mode=ipvs", `mode: ""`, []string{"--proxy-mode=ipvs"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "config.conf")
			if err := os.WriteFile(file, bytes.Replace(data, []byte("mode: ipvs"), []byte(tc.mode), 1), 0o600); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"kube-ipvs", "agent", "--config", file, "--write-config-to", filepath.Join(dir, "out.conf")}, tc.flags...)
			var out, errb bytes.Buffer
			if code := run(context.Background(), args, &out, &errb); code != tc.code {
				t.Errorf("exit %d, want %d\n%s", code, tc.code, errb.String())
			}
			if tc.code == 2 && !strings.Contains(errb.String(), "--proxy-mode (mode)") {
				t.Errorf("the refusal does not name the field:\n%s", errb.String())
			}
		})
	}
}

// The agent talks to its API server as client-go and kube-proxy do by
// default, HTTP/2 with gzip, whether or not a kube-proxy file is given (it
// has no such settings); each flag turns its half off.
func TestAPITransportDefaults(t *testing.T) {
	for _, tc := range []struct {
		args              []string
		http2, compressed bool
	}{
		{nil, true, true},
		{[]string{"--config", kubeProxyFile}, true, true},
		{[]string{"--kube-api-http2=false"}, false, true},
		{[]string{"--kube-api-compression=false"}, true, false},
	} {
		o, _ := parse(t, tc.args...)
		if c := o.Config.Client; c.HTTP2 != tc.http2 || c.Compression != tc.compressed {
			t.Errorf("%q: HTTP2 %v Compression %v, want %v %v", tc.args, c.HTTP2, c.Compression, tc.http2, tc.compressed)
		}
	}
}
