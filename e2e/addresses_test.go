package e2e

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// Scenario 8: addresses no Service may claim. A Service listing the node's
// own address as an external IP leaves that address alone: not bound on
// kube-ipvs0, not a VIP, no virtual server, so a host socket on it (an
// sshd) still answers; the Service's ClusterIP is served. A ClusterIP that
// an older Service listed as its external IP before it was allocated
// serves its own Service.
func TestAddressesNoServiceClaims(t *testing.T) {
	s := setup(t)
	bs := s.startBackends(t, "addr", 8, 2)

	t.Run("the node's own address as an external IP", func(t *testing.T) {
		sshd := listenGreeting(t, clientNodeAddr+":2222", "sshd")
		svc := tcpService("own-addr", "10.96.8.1", bs[:1])
		s.cleanupService(t, svc)
		s.writeFile(t, svc.file(), withExternalIPs(svc.yaml(), clientNodeAddr))
		waitReals(t, svc, allAt(svc, 1, bs[0]))
		if _, err := s.agent.waitLog(0, settle, func(e logEntry) bool {
			return e.msg() == "service not applied" && e.str("reason") == "ReservedAddress" && strings.Contains(e.str("err"), clientNodeAddr)
		}); err != nil {
			t.Errorf("the refusal is not reported: %v", err)
		}
		waitSynced(t, s)
		if bound, out := vipBound(clientNodeAddr); bound {
			t.Errorf("the node's address is bound on kube-ipvs0:\n%s", out)
		}
		if out, _ := run("ipset", "list", "KUBE-IPVS-VIPS"); strings.Contains(out, clientNodeAddr+"\n") {
			t.Errorf("the node's address is a VIP:\n%s", out)
		}
		if tab := strings.Join(saveTable(t), "\n"); strings.Contains(tab, clientNodeAddr+":80") {
			t.Errorf("a virtual server on the node's address:\n%s", tab)
		}
		for i := 0; i < 3; i++ {
			if name, err := s.client.ask("", sshd, 3*time.Second); err != nil || name != "sshd" {
				t.Fatalf("the node's own port %s: answered by %q, %v; want sshd", sshd, name, err)
			}
		}
		if name, err := s.client.ask("", svc.target(), 3*time.Second); err != nil || name != bs[0].name {
			t.Errorf("the Service's ClusterIP: answered by %q, %v; want %s", name, err, bs[0].name)
		}
		t.Logf("%s: not bound, not a VIP, its port 2222 answered; %s served", clientNodeAddr, svc.target())
	})

	t.Run("a ClusterIP squatted by an older Service's external IP", func(t *testing.T) {
		// The squatter sorts first by name, so that, without creation
		// times, it is the older of the two.
		squat := tcpService("a-squat", "10.96.8.2", bs[:1])
		owner := tcpService("b-owner", "10.96.8.3", bs[1:])
		// Cleanups run last first: the squatter goes first, else it would
		// take the ClusterIP:port back (rightly) once the owner is gone.
		s.cleanupService(t, owner)
		s.cleanupService(t, squat)
		s.writeFile(t, squat.file(), withExternalIPs(squat.yaml(), owner.vip))
		waitReals(t, squat, allAt(squat, 1, bs[0]))
		s.put(t, owner)
		waitReals(t, owner, allAt(owner, 1, bs[1]))
		waitSynced(t, s)
		for i := 0; i < 6; i++ {
			if name, err := s.client.ask("", owner.target(), 3*time.Second); err != nil || name != bs[1].name {
				t.Fatalf("the ClusterIP %s: answered by %q, %v; want its own Service's %s", owner.target(), name, err, bs[1].name)
			}
		}
		t.Logf("%s served by its own Service", owner.target())
	})
}

// withExternalIPs adds spec.externalIPs to a Service's manifest.
func withExternalIPs(yaml string, ips ...string) string {
	return strings.Replace(yaml, "  ports:\n", fmt.Sprintf("  externalIPs: [%s]\n  ports:\n", strings.Join(ips, ", ")), 1)
}

// waitSynced waits for a sync that begins after now: what an earlier
// sync was applying is in the kernel by its end.
func waitSynced(t *testing.T, s *suite) {
	t.Helper()
	if _, err := s.agent.waitLog(s.agent.mark(), settle, isSync); err != nil {
		t.Fatalf("no sync: %v", err)
	}
}

// listenGreeting serves addr on the node (a host socket, as sshd's) and
// greets each connection as the backends do; it returns addr.
func listenGreeting(t *testing.T, addr, name string) string {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s from %s\n", name, c.RemoteAddr())
			c.Close()
		}
	}()
	return addr
}
