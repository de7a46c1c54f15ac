package e2e

import (
	"net"
	"strings"
	"testing"
	"time"
)

// TestVIPsAsLocalRoutes: an agent told --vip-binding=local-route serves a
// new Service's ClusterIP, from a pod and from the node, with the VIP bound
// as a local route through kube-ipvs0 and not as an address; keeps
// serving a Service whose VIP an earlier agent bound as an address, and
// unbinds that address when the Service goes; repairs its route deleted
// by hand within announcedRepair (the kernel announces it); and leaves no
// route behind when its Service goes.
func TestVIPsAsLocalRoutes(t *testing.T) {
	s := setup(t)
	bs := s.startBackends(t, "lroute", 27, 2)
	old := tcpService("lroute-old", "10.96.27.1", bs[:1])
	s.ready(t, old, bs[0]) // bound as an address by the suite's agent
	s.restartAgentWith(t, "--vip-binding", "local-route", "--ipvs-sync-period", "10m")

	svc := tcpService("lroute-new", "10.96.27.2", bs[1:])
	s.cleanupService(t, svc)
	s.put(t, svc)
	waitReals(t, svc, allAt(svc, 1, bs[1]))
	if _, err := waitFor(settle, func() (bool, string) { return localRoute(svc.vip) }); err != nil {
		t.Fatalf("%s not bound as a local route: %v", svc.vip, err)
	}
	if out, _ := run("ip", "-o", "addr", "show", "dev", "kube-ipvs0"); strings.Contains(out, " "+svc.vip+"/") {
		t.Errorf("%s bound as an address too:\n%s", svc.vip, out)
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

	t.Run("its route deleted by hand", func(t *testing.T) {
		rebound(t, s, svc.vip, func() (bool, string) { return localRoute(svc.vip) },
			"ip", "route", "del", "local", svc.vip, "dev", "kube-ipvs0", "table", "local", "proto", "243")
	})

	t.Run("Services removed", func(t *testing.T) {
		for _, gone := range []service{old, svc} {
			s.removeFile(t, gone.file())
			if _, err := waitFor(settle, func() (bool, string) {
				addrs, _ := run("ip", "-o", "addr", "show", "dev", "kube-ipvs0")
				bound, routes := localRoute(gone.vip)
				return !bound && !strings.Contains(addrs, " "+gone.vip+"/"), addrs + routes
			}); err != nil {
				t.Errorf("%s still bound after its Service went: %v", gone.vip, err)
			}
		}
	})
}

// localRoute tells whether vip is bound as the agent's local route, and
// what `ip route` shows of them.
func localRoute(vip string) (bool, string) {
	out, err := run("ip", "route", "show", "table", "local", "dev", "kube-ipvs0", "proto", "243")
	return err == nil && strings.Contains(out, "local "+vip+" "), out
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
