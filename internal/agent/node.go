package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/objects"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// NodeName is --hostname-override, else $NODE_NAME, else the hostname, as
// kube-proxy resolves it.
func NodeName(override string) string {
	if override = strings.TrimSpace(override); override != "" {
		return strings.ToLower(override)
	}
	if n := os.Getenv("NODE_NAME"); n != "" {
		return strings.ToLower(n)
	}
	h, _ := os.Hostname()
	return strings.ToLower(h)
}

// nodePortCandidate tells whether NodePorts may listen on a host address,
// as kube-proxy's IPVS mode picks them: never loopback, nor IPv6 link-local
// (an IPVS service on it would need a zone).
func nodePortCandidate(a netip.Addr) bool {
	return !a.IsLoopback() && !(a.Is6() && a.IsLinkLocalUnicast())
}

// nodePortHostAddrs are this host's addresses NodePorts may listen on, as
// read at start; a watcher keeps them up to date afterwards (follow).
func nodePortHostAddrs(log *zap.Logger) []netip.Addr {
	return slices.DeleteFunc(HostAddrs(log), func(a netip.Addr) bool { return !nodePortCandidate(a) })
}

// HostAddrs lists this host's interface addresses except the VIPs on our
// own link: the candidates for CIDR-selected NodePort addresses.
func HostAddrs(log *zap.Logger) []netip.Addr {
	ifaces, err := net.Interfaces()
	if err != nil {
		log.Warn("list interfaces", zap.Error(err))
		return nil
	}
	var out []netip.Addr
	for _, ifc := range ifaces {
		if ifc.Name == dataplane.LinkName {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
					out = append(out, ip.Unmap())
				}
			}
		}
	}
	return out
}

// podCIDRsTimeout is how long kube-proxy waits, in NodeCIDR mode, for the
// Node to be given its pod CIDRs before it gives up.
const podCIDRsTimeout = 5 * time.Minute

// waitPodCIDRs waits for the Node to have spec.podCIDRs, which the
// NodeCIDR detect-local mode tells pod traffic by, as kube-proxy waits for
// them; without them after the timeout it fails, as kube-proxy does.
func waitPodCIDRs(ctx context.Context, store *objects.Store, node string, timeout time.Duration, log *zap.Logger) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	if len(translate.NodePodCIDRs(store.Node())) == 0 {
		log.Info("waiting for the Node's spec.podCIDRs (--detect-local-mode=NodeCIDR)", zap.String("node", node), zap.Duration("timeout", timeout))
	}
	for len(translate.NodePodCIDRs(store.Node())) == 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			if store.Node() == nil {
				return fmt.Errorf("timeout waiting for node %q to exist (--detect-local-mode=NodeCIDR needs its spec.podCIDRs)", node)
			}
			return fmt.Errorf("timeout waiting for PodCIDR allocation on node %q (--detect-local-mode=NodeCIDR)", node)
		case <-store.Notify():
		}
	}
	return nil
}
