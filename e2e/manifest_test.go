package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The Kubernetes namespace of every test object.
const objNamespace = "e2e"

// condition is an endpoint's state in its EndpointSlice.
type condition int

const (
	ready       condition = iota // ready, serving
	terminating                  // serving and terminating, not ready
)

type endpoint struct {
	addr  string
	state condition
}

// service is one Service with one EndpointSlice, written as one file.
type service struct {
	name        string
	vip         string
	port        int
	proto       string // TCP or UDP
	targetPort  int
	annotations map[string]string
	affinity    int // ClientIP affinity timeoutSeconds; 0: none
	externalIPs []string
	endpoints   []endpoint
}

func (s service) file() string { return s.name + ".yaml" }

// vs is the virtual server as ipvsadm -Ln names it, e.g. "TCP 10.96.1.1:80".
func (s service) vs() string { return fmt.Sprintf("%s %s:%d", s.proto, s.vip, s.port) }

// target is the virtual address clients connect to.
func (s service) target() string { return fmt.Sprintf("%s:%d", s.vip, s.port) }

// real is the real-server address of an endpoint, as ipvsadm prints it.
func (s service) real(addr string) string { return fmt.Sprintf("%s:%d", addr, s.targetPort) }

// with returns a copy whose endpoints are eps.
func (s service) with(eps ...endpoint) service {
	s.endpoints = eps
	return s
}

// annotated returns a copy with the annotations replaced.
func (s service) annotated(kv map[string]string) service {
	s.annotations = kv
	return s
}

func (s service) yaml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n  namespace: %s\n", s.name, objNamespace)
	if len(s.annotations) > 0 {
		b.WriteString("  annotations:\n")
		keys := make([]string, 0, len(s.annotations))
		for k := range s.annotations {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "    %s: %q\n", k, s.annotations[k])
		}
	}
	fmt.Fprintf(&b, "spec:\n  type: ClusterIP\n  clusterIP: %s\n  clusterIPs: [%s]\n", s.vip, s.vip)
	if len(s.externalIPs) > 0 {
		fmt.Fprintf(&b, "  externalIPs: [%s]\n", strings.Join(s.externalIPs, ", "))
	}
	if s.affinity > 0 {
		fmt.Fprintf(&b, "  sessionAffinity: ClientIP\n  sessionAffinityConfig:\n    clientIP:\n      timeoutSeconds: %d\n", s.affinity)
	}
	fmt.Fprintf(&b, "  ports:\n    - name: p\n      protocol: %s\n      port: %d\n      targetPort: %d\n", s.proto, s.port, s.targetPort)
	fmt.Fprintf(&b, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: %s-1\n  namespace: %s\n", s.name, objNamespace)
	fmt.Fprintf(&b, "  labels:\n    kubernetes.io/service-name: %s\naddressType: IPv4\n", s.name)
	fmt.Fprintf(&b, "ports:\n  - name: p\n    protocol: %s\n    port: %d\n", s.proto, s.targetPort)
	if len(s.endpoints) == 0 {
		b.WriteString("endpoints: []\n")
		return b.String()
	}
	b.WriteString("endpoints:\n")
	for _, e := range s.endpoints {
		cond := "{ready: true, serving: true, terminating: false}"
		if e.state == terminating {
			cond = "{ready: false, serving: true, terminating: true}"
		}
		fmt.Fprintf(&b, "  - addresses: [%s]\n    conditions: %s\n    nodeName: %s\n", e.addr, cond, nodeName)
	}
	return b.String()
}

func nodeYAML() string {
	return fmt.Sprintf(`apiVersion: v1
kind: Node
metadata:
  name: %s
  labels:
    kubernetes.io/hostname: %s
status:
  addresses:
    - type: InternalIP
      address: 192.168.122.10
`, nodeName, nodeName)
}

// writeAtomic writes a file the way a careful editor does: a temporary
// name the agent ignores, then one rename, so the agent never reads half a
// file.
func writeAtomic(path, content string) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("renaming %s into place: %w", tmp, err)
	}
	return nil
}

// put writes (or rewrites) a Service's file in the agent's folder; the
// first put of a name registers a cleanup that removes the file and waits
// for the virtual server to go.
func (s *suite) put(t *testing.T, svc service) {
	t.Helper()
	s.writeFile(t, svc.file(), svc.yaml())
}

func (s *suite) writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := writeAtomic(filepath.Join(s.dir, name), content); err != nil {
		t.Fatal(err)
	}
}

func (s *suite) removeFile(t *testing.T, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(s.dir, name)); err != nil && !os.IsNotExist(err) {
		t.Fatalf("removing %s: %v", name, err)
	}
}

// cleanupService removes the Service's file at the end of the test and
// waits for its virtual server to leave the kernel, so the next scenario
// starts from a quiet table.
func (s *suite) cleanupService(t *testing.T, svc service) {
	t.Cleanup(func() {
		s.removeFile(t, svc.file())
		if _, err := waitFor(settle, func() (bool, string) {
			tab, err := readTable()
			if err != nil {
				return false, err.Error()
			}
			_, ok := tab[svc.vs()]
			return !ok, svc.vs() + " still listed"
		}); err != nil {
			t.Errorf("cleaning up %s: %v", svc.name, err)
		}
	})
}
