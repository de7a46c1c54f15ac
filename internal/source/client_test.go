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
	for _, tc := range []struct {
		name               string
		opt                ClientOptions
		host, ctype, accpt string
		qps                float32
		burst              int
	}{
		{"kubeconfig, kube-proxy's defaults", ClientOptions{Kubeconfig: path, QPS: 5, Burst: 10},
			"https://192.0.2.1:6443", "application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf,application/json", 5, 10},
		{"master overrides the kubeconfig's server", ClientOptions{Kubeconfig: path, Master: "https://192.0.2.9:6443", QPS: 50, Burst: 100, ContentType: "application/json"},
			"https://192.0.2.9:6443", "application/json", "", 50, 100},
		{"master alone", ClientOptions{Master: "https://192.0.2.9:6443", AcceptContentTypes: "application/json"},
			"https://192.0.2.9:6443", "application/vnd.kubernetes.protobuf", "application/json", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := restConfig(tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tc.host || cfg.UserAgent != "kube-ipvs" || cfg.ContentType != tc.ctype || cfg.AcceptContentTypes != tc.accpt || cfg.QPS != tc.qps || cfg.Burst != tc.burst {
				t.Errorf("got host %q user agent %q content type %q accept %q qps %g burst %d", cfg.Host, cfg.UserAgent, cfg.ContentType, cfg.AcceptContentTypes, cfg.QPS, cfg.Burst)
			}
		})
	}
	if _, err := NewClient(ClientOptions{Kubeconfig: path}); err != nil {
		t.Errorf("NewClient: %v", err)
	}
	if _, err := NewClient(ClientOptions{Kubeconfig: filepath.Join(t.TempDir(), "absent")}); err == nil {
		t.Error("NewClient with a missing kubeconfig succeeded")
	}
}
