package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const tunedFile = "../../internal/config/testdata/kubeadm-v1.37.2-ipvs-tuned.conf"

// cleanup reads the agent's --config, so that it leaves alone what the
// agent leaves alone: the file's ipvs.excludeCIDRs apply, flags given
// explicitly override them, and the file's mode is not cleanup's business.
func TestCleanupReadsTheConfigFile(t *testing.T) {
	data, err := os.ReadFile(tunedFile)
	if err != nil {
		t.Fatal(err)
	}
	emptyMode := filepath.Join(t.TempDir(), "config.conf")
	if err := os.WriteFile(emptyMode, bytes.Replace(data, []byte("mode: ipvs"), []byte(`mode: ""`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"the file's", []string{"--config", tunedFile}, "[192.0.2.0/24]"},
		{"a flag over the file", []string{"--config", tunedFile, "--ipvs-exclude-cidrs=203.0.113.0/24"}, "[203.0.113.0/24]"},
		{"an empty mode", []string{"--config", emptyMode}, "[192.0.2.0/24]"},
		{"no file", nil, "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			o, code := parseCleanup(tc.args, &out, &errb)
			if code != -1 {
				t.Fatalf("exit %d\n%s", code, errb.String())
			}
			if got := fmt.Sprint(o.ExcludeCIDRs); got != tc.want {
				t.Errorf("exclude %s, want %s", got, tc.want)
			}
		})
	}
}

// A file cleanup cannot read stops it before it touches the kernel,
// naming the file and the field.
func TestCleanupRefusesABadConfigFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.conf")
	if err := os.WriteFile(file, []byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\nipvs:\n  excludeCIDRs: [nope]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"kube-ipvs", "cleanup", "--config", file}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "--config "+file+": ipvs.excludeCIDRs") {
		t.Errorf("exit %d, want 2 naming the file and the field:\n%s", code, errb.String())
	}
}
