package source

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRestConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kubeconfig := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://192.0.2.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := restConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://192.0.2.1:6443" || cfg.UserAgent != "kube-ipvs" {
		t.Errorf("host %q user agent %q", cfg.Host, cfg.UserAgent)
	}
	if _, err := NewClient(path); err != nil {
		t.Errorf("NewClient: %v", err)
	}
	if _, err := NewClient(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("NewClient with a missing kubeconfig succeeded")
	}
}
