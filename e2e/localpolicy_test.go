package e2e

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// TestLocalPolicyFromInside: a LoadBalancer Service with
// externalTrafficPolicy Local whose endpoints run on another node. From
// this node a pod (a namespace inside --cluster-cidr) and the node itself
// reach its load-balancer IP and external IP and are answered by the
// remote endpoints, as kube-proxy's iptables and nftables modes serve
// such traffic; an outside client (the client namespace, outside the
// cluster CIDR, routed via the node) is rejected at once. With a local
// endpoint too, the outside client is served by it alone, and the pod and
// the node still by every endpoint.
func TestLocalPolicyFromInside(t *testing.T) {
	s := setup(t)
	s.restartAgentWith(t, "--cluster-cidr", "10.244.0.0/16")
	pod, err := newClientIn("etp-pod", backendNodeAddr, "10.244.51.2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := delNS("etp-pod"); err != nil {
			t.Error(err)
		}
	})
	bs := s.startBackends(t, "etp", 50, 3) // etp-1, etp-2 "on node-b"; etp-3 here
	const lbIP, extIP = "203.0.113.50", "198.51.100.50"
	svc := localService{name: "etp-local", clusterIP: "10.96.50.1", lbIP: lbIP, extIP: extIP,
		remote: []string{bs[0].addr, bs[1].addr}}
	t.Cleanup(func() {
		s.removeFile(t, svc.file())
		if _, err := waitFor(settle, func() (bool, string) {
			tab, err := readTable()
			if err != nil {
				return false, err.Error()
			}
			_, ok := tab["TCP "+lbIP+":80"]
			return !ok, "still listed"
		}); err != nil {
			t.Errorf("cleaning up: %v", err)
		}
	})
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, cmd := range [][]string{{"ipvsadm", "-Ln"}, {"ipset", "list", "KUBE-IPVS-LOCAL-SOURCES"}, {"iptables-save"}} {
			out, err := run(cmd[0], cmd[1:]...)
			t.Logf("%v (%v):\n%s", cmd, err, out)
		}
		t.Logf("agent log:\n%s", s.agent.tail(60))
	})
	s.writeFile(t, svc.file(), svc.yaml())
	mark := translate.LocalSourcesMark(model.ServiceName{Namespace: objNamespace, Name: svc.name}, "p", model.TCP, false, 0)
	fwm := fmt.Sprintf("FWM %d", mark)
	remote := want{bs[0].addr + ":8080": 1, bs[1].addr + ":8080": 1}
	waitTable(t, fwm+" to hold the remote endpoints", func(tab table) bool {
		return tab.matches(fwm, remote) && tab.matches("TCP "+lbIP+":80", want{}) && tab.matches("TCP "+extIP+":80", want{})
	}, fwm)

	node := func(dst string) (string, error) {
		conn, err := net.DialTimeout("tcp", dst, 3*time.Second)
		if err != nil {
			return "", err
		}
		defer conn.Close()
		return greeting(conn, 3*time.Second)
	}
	for _, vip := range []string{lbIP, extIP} {
		dst := vip + ":80"
		fromPod := tallyOf(t, "pod", dst, 20, func() (string, error) { return pod.ask("", dst, 3*time.Second) })
		fromNode := tallyOf(t, "node", dst, 20, func() (string, error) { return node(dst) })
		t.Logf("%s without a local endpoint: pod %s; node %s", dst, fromPod, fromNode)
		for who, got := range map[string]tally{"pod": fromPod, "node": fromNode} {
			if got[bs[0].name] == 0 || got[bs[1].name] == 0 || len(got) != 2 {
				t.Errorf("%s to %s: answered by %s, want both remote endpoints only", who, dst, got)
			}
		}
		start := time.Now()
		if name, err := s.client.ask("", dst, 3*time.Second); err == nil {
			t.Errorf("outside client to %s: answered by %s, want a reject", dst, name)
		} else if took := time.Since(start); took > 2*time.Second {
			t.Errorf("outside client to %s: refused after %s, want at once: %v", dst, took, err)
		} else {
			t.Logf("outside client to %s: refused after %s (%v)", dst, took.Round(time.Millisecond), err)
		}
	}

	// A local endpoint: outside clients get it alone; pods and the node
	// every endpoint.
	svc.local = []string{bs[2].addr}
	s.writeFile(t, svc.file(), svc.yaml())
	all := want{bs[0].addr + ":8080": 1, bs[1].addr + ":8080": 1, bs[2].addr + ":8080": 1}
	waitTable(t, "the local endpoint", func(tab table) bool {
		return tab.matches(fwm, all) && tab.matches("TCP "+lbIP+":80", want{bs[2].addr + ":8080": 1})
	}, "TCP "+lbIP+":80")
	for _, vip := range []string{lbIP, extIP} {
		dst := vip + ":80"
		outside := s.askN(t, "", dst, 10)
		fromPod := tallyOf(t, "pod", dst, 30, func() (string, error) { return pod.ask("", dst, 3*time.Second) })
		fromNode := tallyOf(t, "node", dst, 30, func() (string, error) { return node(dst) })
		t.Logf("%s with a local endpoint: outside %s; pod %s; node %s", dst, outside, fromPod, fromNode)
		if len(outside) != 1 || outside[bs[2].name] != 10 {
			t.Errorf("outside client to %s: answered by %s, want the local endpoint only", dst, outside)
		}
		for who, got := range map[string]tally{"pod": fromPod, "node": fromNode} {
			if got[bs[0].name] == 0 || got[bs[1].name] == 0 {
				t.Errorf("%s to %s: answered by %s, want the remote endpoints too", who, dst, got)
			}
		}
	}
}

// tallyOf makes n connections with ask and tallies who answered; any
// failure fails the test.
func tallyOf(t *testing.T, who, dst string, n int, ask func() (string, error)) tally {
	t.Helper()
	got := tally{}
	for i := range n {
		name, err := ask()
		if err != nil {
			t.Fatalf("%s: connection %d of %d to %s: %v (answers so far: %s)", who, i+1, n, dst, err, got)
		}
		got[name]++
	}
	return got
}

// restartAgentWith restarts the suite's agent with extra flags for the
// rest of the test, and with the suite's own after it.
func (s *suite) restartAgentWith(t *testing.T, args ...string) {
	t.Helper()
	restart := func(extra []string) error {
		if err := s.agent.stop(); err != nil {
			return err
		}
		s.extraArgs = extra
		return s.startAgent()
	}
	if err := restart(args); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := restart(nil); err != nil {
			t.Errorf("restarting the suite's agent: %v", err)
		}
	})
}

// localService is a LoadBalancer Service with externalTrafficPolicy Local
// on port 80 (TCP, to the backends' port), a load-balancer IP and an
// external IP, and no NodePort; its endpoints are on node-b (remote) or
// on this node (local).
type localService struct {
	name, clusterIP, lbIP, extIP string
	remote, local                []string
}

func (s localService) file() string { return s.name + ".yaml" }

func (s localService) yaml() string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: v1
kind: Service
metadata:
  name: %s
  namespace: %s
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  clusterIP: %s
  clusterIPs: [%s]
  externalIPs: [%s]
  ports:
    - name: p
      protocol: TCP
      port: 80
      targetPort: %d
status:
  loadBalancer:
    ingress:
      - ip: %s
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %s-1
  namespace: %s
  labels:
    kubernetes.io/service-name: %s
addressType: IPv4
ports:
  - name: p
    protocol: TCP
    port: %d
endpoints:
`, s.name, objNamespace, s.clusterIP, s.clusterIP, s.extIP, backendTCPPort, s.lbIP, s.name, objNamespace, s.name, backendTCPPort)
	for _, group := range []struct {
		node  string
		addrs []string
	}{{"node-b", s.remote}, {nodeName, s.local}} {
		for _, a := range group.addrs {
			fmt.Fprintf(&b, "  - addresses: [%s]\n    conditions: {ready: true, serving: true, terminating: false}\n    nodeName: %s\n", a, group.node)
		}
	}
	return b.String()
}
