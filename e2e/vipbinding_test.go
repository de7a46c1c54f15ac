package e2e

import (
	"net"
	"strings"
	"testing"
	"time"
)

// TestVIPsAsAddresses: an agent told --vip-binding=address (kube-proxy's
// way) serves a new Service's ClusterIP, from a pod and from the node, with
// the VIP bound as an address on kube-ipvs0 and not as a route; keeps
// serving a Service whose VIP an earlier agent bound as a local route (the
// default), and unbinds that route when the Service goes; repairs its
// address deleted by hand within announcedRepair (the kernel announces
// it); and leaves no address behind when its Service goes.
func TestVIPsAsAddresses(t *testing.T) {
	s := setup(t)
	bs := s.startBackends(t, "vbind", 27, 2)
	old := tcpService("vbind-old", "10.96.27.1", bs[:1])
	s.ready(t, old, bs[0])
	if bound, out := localRoute(old.vip); !bound {
		t.Fatalf("the suite's agent did not bind %s as a local route:\n%s", old.vip, out)
	}
	s.restartAgentWith(t, "--vip-binding", "address", "--ipvs-sync-period", "10m")

	svc := tcpService("vbind-new", "10.96.27.2", bs[1:])
	s.cleanupService(t, svc)
	s.put(t, svc)
	waitReals(t, svc, allAt(svc, 1, bs[1]))
	if _, err := waitFor(settle, func() (bool, string) { return address(svc.vip) }); err != nil {
		t.Fatalf("%s not bound as an address: %v", svc.vip, err)
	}
	if bound, out := localRoute(svc.vip); bound {
		t.Errorf("%s bound as a local route too:\n%s", svc.vip, out)
	}
	for _, c := range []struct {
		svc service
		b   *backend
	}{{svc, bs[1]}, {old, bs[0]}} {
		if got := s.askN(t, "", c.svc.target(), 3); got[c.b.name] != 3 {
			t.Errorf("%s from a pod: %s, want %s", c.svc.target(), got, c.b.name)
		}
		if name, err := fromNode(c.svc.target()); err != nil || name != c.b.name {
			t.Errorf("%s from the node: %q, %v; want %s", c.svc.target(), name, err, c.b.name)
		}
	}

	t.Run("its address deleted by hand", func(t *testing.T) {
		rebound(t, s, svc.vip, func() (bool, string) { return address(svc.vip) },
			"ip", "addr", "del", svc.vip+"/32", "dev", "kube-ipvs0")
	})

	t.Run("Services removed", func(t *testing.T) {
		for _, gone := range []service{old, svc} {
			s.removeFile(t, gone.file())
			if _, err := waitFor(settle, func() (bool, string) {
				bound, out := vipBound(gone.vip)
				return !bound, out
			}); err != nil {
				t.Errorf("%s still bound after its Service went: %v", gone.vip, err)
			}
		}
	})
}

// vipBound tells whether vip is bound on kube-ipvs0 either way the agent
// binds one, and what `ip` shows of both.
func vipBound(vip string) (bool, string) {
	a, addrs := address(vip)
	r, routes := localRoute(vip)
	return a || r, addrs + routes
}

// address tells whether vip is an address of kube-ipvs0, and what `ip
// addr` shows of them.
func address(vip string) (bool, string) {
	out, err := run("ip", "-o", "addr", "show", "dev", "kube-ipvs0")
	return err == nil && strings.Contains(out, " "+vip+"/"), out
}

// localRoute tells whether vip is bound as the agent's local route (the
// local table, protocol 243), and what `ip route` shows of them.
func localRoute(vip string) (bool, string) {
	family := "-4"
	if strings.Contains(vip, ":") {
		family = "-6"
	}
	out, err := run("ip", family, "route", "show", "table", "local", "dev", "kube-ipvs0", "proto", "243")
	return err == nil && strings.Contains(out, "local "+vip+" "), out
}

// unbindByHand is the command that unbinds vip as the suite's agent bound
// it, a local route: someone else's change to the node.
func unbindByHand(vip string) []string {
	return []string{"ip", "route", "del", "local", vip, "dev", "kube-ipvs0", "table", "local", "proto", "243"}
}

// fromNode asks dst from the node itself, not from a pod: the backend's
// greeting.
func fromNode(dst string) (string, error) {
	conn, err := net.DialTimeout("tcp", dst, 3*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return greeting(conn, 3*time.Second)
}
