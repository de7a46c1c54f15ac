package source

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// TestClientCompression: the client asks for gzipped responses only when
// told to (a list's inflation cost the agent a fifth of its CPU at 10,000
// Services), checked on the wire: the header an API server sees.
func TestClientCompression(t *testing.T) {
	for _, compression := range []bool{false, true} {
		seen := make(chan string, 1)
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case seen <- r.Header.Get("Accept-Encoding"):
			default:
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"kind":"ServiceList","apiVersion":"v1","metadata":{},"items":[]}`))
		}))
		// Over TLS, as an agent talks to its API server (client-go gives
		// a plain-HTTP config Go's default transport, whatever it says).
		path := filepath.Join(t.TempDir(), "kubeconfig")
		kubeconfig := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"" + srv.URL +
			"\", insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {token: t}}]\n" +
			"contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
		if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := NewClient(ClientOptions{Kubeconfig: path, Compression: compression, ContentType: "application/json"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.CoreV1().Services("").List(context.Background(), metav1.ListOptions{}); err != nil {
			t.Fatalf("compression %v: list: %v", compression, err)
		}
		srv.Close()
		if got := <-seen; strings.Contains(got, "gzip") != compression {
			t.Errorf("compression %v: the API server saw Accept-Encoding %q", compression, got)
		}
	}
}
