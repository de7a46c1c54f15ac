package source

import (
	"context"
	"fmt"
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
// told to (inflating a large list costs the agent CPU), checked on the
// wire: the header an API server sees.
func TestClientCompression(t *testing.T) {
	for _, compression := range []bool{false, true} {
		seen := make(chan string, 1)
		srv := httptest.NewTLSServer(listHandler(func(r *http.Request) string { return r.Header.Get("Accept-Encoding") }, seen))
		listServices(t, ClientOptions{Kubeconfig: tlsKubeconfig(t, srv.URL), Compression: compression, ContentType: "application/json"})
		srv.Close()
		if got := <-seen; strings.Contains(got, "gzip") != compression {
			t.Errorf("compression %v: the API server saw Accept-Encoding %q", compression, got)
		}
	}
}

func TestClientHTTP2(t *testing.T) {
	for _, http2 := range []bool{false, true} {
		seen := make(chan string, 1)
		srv := httptest.NewUnstartedServer(listHandler(func(r *http.Request) string { return r.Proto }, seen))
		srv.EnableHTTP2 = true // as the API server offers it
		srv.StartTLS()
		listServices(t, ClientOptions{Kubeconfig: tlsKubeconfig(t, srv.URL), HTTP2: http2, ContentType: "application/json"})
		srv.Close()
		want := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[http2]
		if got := <-seen; got != want {
			t.Errorf("http2 %v: the API server saw %s, want %s", http2, got, want)
		}
	}
}

// listHandler answers an empty ServiceList and sends what of the first
// request it saw.
func listHandler(what func(*http.Request) string, seen chan<- string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case seen <- what(r):
		default:
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"ServiceList","apiVersion":"v1","metadata":{},"items":[]}`))
	})
}

// tlsKubeconfig writes a kubeconfig for a test server over TLS, as an
// agent talks to its API server (client-go gives a plain-HTTP config Go's
// default transport, whatever it says).
func tlsKubeconfig(t *testing.T, url string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kubeconfig := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"" + url +
		"\", insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {token: t}}]\n" +
		"contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// listServices lists Services once with a client made from o.
func listServices(t *testing.T, o ClientOptions) {
	t.Helper()
	c, err := NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Services("").List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatalf("%+v: list: %v", o, err)
	}
}

// TestAPIServerAddrs: the API server's address is the kubeconfig's server
// (or --master), an IP or a name resolved; in-cluster there is none (the
// kubernetes Service's ClusterIP is the agent's to serve).
func TestAPIServerAddrs(t *testing.T) {
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
		opt  ClientOptions
		want string
	}{
		{ClientOptions{Kubeconfig: path}, "[192.0.2.1]"},
		{ClientOptions{Kubeconfig: path, Master: "https://[2001:db8::1]:6443"}, "[2001:db8::1]"},
		{ClientOptions{Master: "http://127.0.0.1:8080"}, "[127.0.0.1]"},
		{ClientOptions{Master: "https://localhost:6443"}, "127.0.0.1"}, // beside ::1, maybe
		{ClientOptions{}, "[]"},
	} {
		got, err := APIServerAddrs(context.Background(), tc.opt)
		if s := fmt.Sprint(got); err != nil || !strings.Contains(s, tc.want) {
			t.Errorf("%+v: %s, %v; want %s", tc.opt, s, err, tc.want)
		}
	}
}
