package source

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// UserAgent names kube-ipvs in API server audit logs and metrics.
const UserAgent = "kube-ipvs"

// ClientOptions say how to reach the API server: kube-proxy's --kubeconfig,
// --master and clientConnection settings.
type ClientOptions struct {
	Kubeconfig string // empty with Master empty: the in-cluster service account
	Master     string // overrides the kubeconfig's server
	QPS        float32
	Burst      int32
	// ContentType of requests; empty: protobuf. AcceptContentTypes empty:
	// protobuf, else JSON (kinds without a protobuf form).
	ContentType        string
	AcceptContentTypes string
	// Compression asks the API server to gzip what it sends: lists, and
	// since KEP-3157's streaming lists also the informers' watch streams,
	// which carry a node's first list and every change after it. Over a
	// fleet those bytes are what a node costs the API server's network, and
	// protobuf Services and EndpointSlices shrink about four to one at the
	// server's gzip level 1. The price is the server's CPU: it deflates for
	// each connection what it otherwise encodes once for every watcher,
	// up to twice its CPU for serving a node's first list; the node's
	// inflating is small beside decoding. client-go and kube-proxy ask for
	// it.
	Compression bool
	// HTTP2 talks HTTP/2 to the API server: every watch on one connection,
	// as client-go and kube-proxy do. Over HTTP/1.1 each of the agent's
	// four watches (Services, EndpointSlices, its Node, every Node's
	// addresses) holds a connection of its own, four times the connections
	// per node an API server holds for the fleet. HTTP/2's flow control
	// makes the client send a window update for every 4 KB it reads, about
	// 1% of the bytes received sent back.
	HTTP2 bool
}

// NewClient connects to the API server as the options say.
func NewClient(o ClientOptions) (kubernetes.Interface, error) {
	cfg, err := restConfig(o)
	if err != nil {
		return nil, err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create Kubernetes client: %w", err)
	}
	return c, nil
}

// restConfig loads the client config as kube-proxy's createClient does:
// in-cluster only when neither a kubeconfig nor a master is given (a
// fresh node cannot reach the API server through the kubernetes Service
// before a proxy programmed it), else the kubeconfig with the master
// overriding its server.
func restConfig(o ClientOptions) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.Kubeconfig == "" && o.Master == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: o.Kubeconfig},
			&clientcmd.ConfigOverrides{ClusterInfo: clientcmdapi.Cluster{Server: o.Master}}).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("load Kubernetes client config (kubeconfig %q, master %q): %w", o.Kubeconfig, o.Master, err)
	}
	cfg.UserAgent = UserAgent
	// Protobuf by default, as kube-proxy: every node lists every Service
	// and EndpointSlice, and JSON decoding dominates its CPU at scale.
	cfg.ContentType = o.ContentType
	if cfg.ContentType == "" {
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
	}
	cfg.AcceptContentTypes = o.AcceptContentTypes
	if cfg.AcceptContentTypes == "" && cfg.ContentType == "application/vnd.kubernetes.protobuf" {
		cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	}
	cfg.QPS, cfg.Burst = o.QPS, int(o.Burst)
	cfg.DisableCompression = !o.Compression
	if !o.HTTP2 {
		// client-go leaves HTTP/2 out of a transport whose protocols
		// name only HTTP/1.1.
		cfg.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	return cfg, nil
}

// APIServerAddrs are the addresses of the API server the options reach,
// which no Service may claim: its host when that is an IP, else what the
// name resolves to. In-cluster there are none: the agent then talks to the
// kubernetes Service's ClusterIP, which is its own to serve.
func APIServerAddrs(ctx context.Context, o ClientOptions) ([]netip.Addr, error) {
	if o.Kubeconfig == "" && o.Master == "" {
		return nil, nil
	}
	cfg, err := restConfig(o)
	if err != nil {
		return nil, err
	}
	host := cfg.Host
	if u, err := url.Parse(cfg.Host); err == nil && u.Host != "" {
		host = u.Hostname()
	} else if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolve API server %q: %w", host, err)
	}
	for i, a := range addrs {
		addrs[i] = a.Unmap()
	}
	return addrs, nil
}
