package source

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/objects"
)

const webYAML = `apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: 10.96.0.100
  ports: [{name: http, port: 80, targetPort: 8080}]
---
# a comment-only document does not count
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
  - addresses: [10.244.1.2]
  - addresses: [10.244.2.2]
`

const dnsYAML = `apiVersion: v1
kind: Service
metadata: {name: dns, namespace: kube-system}
spec:
  clusterIP: 10.96.0.10
  ports: [{name: dns, protocol: UDP, port: 53}]
`

// webBadPort is webYAML with its Service port out of range.
var webBadPort = strings.Replace(webYAML, "port: 80,", "port: 70000,", 1)

const listJSON = `{"apiVersion": "v1", "kind": "List", "items": [
	{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api", "namespace": "prod"},
	 "spec": {"clusterIPs": ["fd00:96::5"], "ports": [{"port": 443, "protocol": "SCTP"}]}},
	{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
	 "metadata": {"name": "api-x", "namespace": "prod", "labels": {"kubernetes.io/service-name": "api"}},
	 "addressType": "IPv6", "endpoints": [{"addresses": ["fd00:244::7"]}], "ports": [{"port": 443, "protocol": "SCTP"}]}
]}`

func nodeYAML(name, ip string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Node\nmetadata: {name: %s}\nstatus:\n  addresses: [{type: InternalIP, address: %q}]\n", name, ip)
}

// dumpStore prints what the store holds for the named Services, one line
// each, plus this node: the end state the tests assert.
func dumpStore(s *objects.Store, names ...string) string {
	var lines []string
	for _, n := range names {
		ns, name, _ := strings.Cut(n, "/")
		svc, sl := s.Service(model.ServiceName{Namespace: ns, Name: name})
		line := n
		if svc == nil {
			line += " no-service"
		} else {
			line += " " + strings.Join(svc.Spec.ClusterIPs, ",")
			for _, p := range svc.Spec.Ports {
				line += fmt.Sprintf(" %s:%d/%s->%s", p.Name, p.Port, p.Protocol, p.TargetPort.String())
			}
		}
		for _, e := range sl {
			var addrs []string
			for _, ep := range e.Endpoints {
				addrs = append(addrs, ep.Addresses...)
			}
			line += fmt.Sprintf(" [%s %s]", e.Name, strings.Join(addrs, ","))
		}
		lines = append(lines, line)
	}
	if n := s.Node(); n != nil {
		lines = append(lines, "node "+n.Name+" "+n.Status.Addresses[0].Address)
	} else {
		lines = append(lines, "node none")
	}
	return strings.Join(lines, "\n")
}

type fixture struct {
	dir      string
	store    *objects.Store
	m        *Manifests
	problems []string // Problem.Error() with the folder path cut off
}

func newFixture(t *testing.T, nodeName string) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), store: objects.NewStore(SourceManifests)}
	f.m = &Manifests{Dir: f.dir, NodeName: nodeName, Store: f.store, Log: zaptest.NewLogger(t),
		Problems: func(p Problem) {
			f.problems = append(f.problems, strings.TrimPrefix(p.Error(), f.dir+string(filepath.Separator)))
		}}
	return f
}

func (f *fixture) write(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) remove(t *testing.T, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(f.dir, name)); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) rename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(filepath.Join(f.dir, from), filepath.Join(f.dir, to)); err != nil {
		t.Fatal(err)
	}
}

func TestManifestsLoad(t *testing.T) {
	tests := []struct {
		name     string
		nodeName string
		files    map[string]string
		dump     []string // Services to dump
		want     string
		problems []string
	}{{
		name:  "multi-document YAML, defaults applied",
		files: map[string]string{"web.yaml": webYAML, "dns.yml": dnsYAML},
		dump:  []string{"default/web", "kube-system/dns"},
		want: "default/web 10.96.0.100 http:80/TCP->8080 [web-1 10.244.1.2,10.244.2.2]\n" +
			"kube-system/dns 10.96.0.10 dns:53/UDP->53\nnode none",
	}, {
		name:  "JSON List",
		files: map[string]string{"api.json": listJSON},
		dump:  []string{"prod/api"},
		want:  "prod/api fd00:96::5 :443/SCTP->443 [api-x fd00:244::7]\nnode none",
	}, {
		name:  "other extensions and hidden files are not read",
		files: map[string]string{"web.yaml.bak": webYAML, ".web.yaml": webYAML, "notes.txt": "x", "dns.yaml": dnsYAML},
		dump:  []string{"default/web", "kube-system/dns"},
		want:  "default/web no-service\nkube-system/dns 10.96.0.10 dns:53/UDP->53\nnode none",
	}, {
		name:     "YAML syntax error refuses its document only",
		files:    map[string]string{"web.yaml": webYAML + "---\nkind: [unclosed\n", "dns.yaml": dnsYAML},
		dump:     []string{"default/web", "kube-system/dns"},
		want:     "default/web 10.96.0.100 http:80/TCP->8080 [web-1 10.244.1.2,10.244.2.2]\nkube-system/dns 10.96.0.10 dns:53/UDP->53\nnode none",
		problems: []string{"web.yaml: document 3: parse: "},
	}, {
		name:     "invalid port refuses the Service, its EndpointSlice is served",
		files:    map[string]string{"web.yaml": webBadPort},
		dump:     []string{"default/web"},
		want:     "default/web no-service [web-1 10.244.1.2,10.244.2.2]\nnode none",
		problems: []string{"web.yaml: document 1 (Service default/web): spec.ports[0].port: must be 1-65535, got 70000"},
	}, {
		name: "several reasons in one object",
		files: map[string]string{"s.yaml": "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec:\n" +
			"  clusterIPs: [10.96.0.1, 10.96.0.2]\n  externalIPs: [nope]\n  sessionAffinity: Sticky\n" +
			"  ports: [{port: 80, protocol: ICMP, nodePort: 70000}]\n"},
		dump: []string{"default/s"},
		want: "default/s no-service\nnode none",
		problems: []string{"s.yaml: document 1 (Service default/s): spec.clusterIPs[1]: a second IPv4 address; spec.ipFamilies[1]: duplicate IPv4; " +
			"spec.externalIPs[0]: not an IP address: \"nope\"; spec.ports[0].protocol: must be TCP, UDP or SCTP, got \"ICMP\"; " +
			"spec.ports[0].nodePort: may not be used when type is ClusterIP; spec.ports[0].nodePort: must be 1-65535, got 70000; " +
			"spec.sessionAffinity: must be None or ClientIP, got \"Sticky\""},
	}, {
		name: "EndpointSlice checks",
		files: map[string]string{"e.yaml": "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: e}\n" +
			"addressType: IPv4\nendpoints: [{addresses: [\"fd00::1\"]}, {addresses: []}]\nports: [{port: 0}]\n"},
		dump: []string{"default/e"},
		want: "default/e no-service\nnode none",
		problems: []string{"e.yaml: document 1 (EndpointSlice default/e): metadata.labels: kubernetes.io/service-name is required: it names the Service; " +
			"endpoints[0].addresses[0]: \"fd00::1\" is not an IPv4 address; endpoints[1].addresses: at least one address is required; " +
			"ports[0].port: must be 1-65535, got 0"},
	}, {
		name:     "unknown field is a problem",
		files:    map[string]string{"web.yaml": strings.Replace(webYAML, "clusterIP:", "clusterIp:", 1)},
		dump:     []string{"default/web"},
		want:     "default/web no-service [web-1 10.244.1.2,10.244.2.2]\nnode none",
		problems: []string{`web.yaml: document 1 (Service default/web): decode: strict decoding error: unknown field "spec.clusterIp"`},
	}, {
		name:     "kind not used here",
		files:    map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"},
		want:     "node none",
		problems: []string{"cm.yaml: document 1 (ConfigMap): kind ConfigMap is not used here: want Service, EndpointSlice, Node or List"},
	}, {
		name:     "unknown kind",
		files:    map[string]string{"x.yaml": "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n"},
		want:     "node none",
		problems: []string{`x.yaml: document 1 (Widget default/w): decode: no kind "Widget" is registered for version "example.com/v1" in scheme`},
	}, {
		name:     "same object in two files: the first file wins",
		files:    map[string]string{"a.yaml": dnsYAML, "b.yaml": strings.Replace(dnsYAML, "10.96.0.10", "10.96.0.11", 1)},
		dump:     []string{"kube-system/dns"},
		want:     "kube-system/dns 10.96.0.10 dns:53/UDP->53\nnode none",
		problems: []string{"b.yaml: document 1 (Service kube-system/dns): already defined in " + "DIR/a.yaml document 1; this one is ignored"},
	}, {
		name:     "node by name",
		nodeName: "n2",
		files:    map[string]string{"n.yaml": nodeYAML("n1", "192.0.2.1") + "---\n" + nodeYAML("n2", "192.0.2.2")},
		want:     "node n2 192.0.2.2",
	}, {
		name:     "the only node when the name does not match",
		nodeName: "my-laptop",
		files:    map[string]string{"n.yaml": nodeYAML("node-a", "192.0.2.1")},
		want:     "node node-a 192.0.2.1",
	}, {
		name:     "no node when several and none matches",
		nodeName: "my-laptop",
		files:    map[string]string{"n.yaml": nodeYAML("n1", "192.0.2.1") + "---\n" + nodeYAML("n2", "192.0.2.2")},
		want:     "node none",
	}, {
		name:     "bad node address",
		files:    map[string]string{"n.yaml": nodeYAML("n1", "192.0.2.300")},
		want:     "node none",
		problems: []string{`n.yaml: document 1 (Node n1): status.addresses[0].address: not an IP address: "192.0.2.300"`},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.nodeName)
			for name, content := range tt.files {
				f.write(t, name, content)
			}
			err := f.m.Load()
			if got := dumpStore(f.store, tt.dump...); got != tt.want {
				t.Errorf("store:\n%s\nwant:\n%s", got, tt.want)
			}
			var want []string
			for _, p := range tt.problems {
				want = append(want, strings.ReplaceAll(p, "DIR", f.dir))
			}
			checkProblems(t, f.problems, want)
			if (err != nil) != (len(tt.problems) > 0) {
				t.Errorf("Load() = %v, want an error only with problems", err)
			}
			if !f.store.Synced() {
				t.Error("store not synced after Load")
			}
		})
	}
}

// checkProblems compares reported problems with wanted prefixes.
func checkProblems(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	slices.Sort(got)
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem:\n%s\nwant prefix:\n%s", got[i], want[i])
		}
	}
}

func TestManifestsChanges(t *testing.T) {
	type step struct {
		do       func(t *testing.T, f *fixture)
		want     string
		dirty    string // Services marked changed, as "ns/name ns/name", plus "node" if the Node changed
		problems []string
	}
	dump := []string{"default/web", "kube-system/dns"}
	tests := []struct {
		name  string
		steps []step
	}{{
		name: "invalid object keeps the last good content, other files unaffected",
		steps: []step{{
			do:    func(t *testing.T, f *fixture) { f.write(t, "web.yaml", webYAML); f.write(t, "dns.yaml", dnsYAML) },
			want:  "default/web 10.96.0.100 http:80/TCP->8080 [web-1 10.244.1.2,10.244.2.2]\nkube-system/dns 10.96.0.10 dns:53/UDP->53\nnode none",
			dirty: "default/web kube-system/dns",
		}, {
			do: func(t *testing.T, f *fixture) {
				f.write(t, "web.yaml", webBadPort)
				f.write(t, "dns.yaml", strings.Replace(dnsYAML, "53}", "5353}", 1))
			},
			want:     "default/web 10.96.0.100 http:80/TCP->8080 [web-1 10.244.1.2,10.244.2.2]\nkube-system/dns 10.96.0.10 dns:5353/UDP->5353\nnode none",
			dirty:    "kube-system/dns",
			problems: []string{"web.yaml: document 1 (Service default/web): spec.ports[0].port: must be 1-65535"},
		}, {
			do: func(t *testing.T, f *fixture) {
				f.write(t, "web.yaml", strings.Replace(webYAML, "10.244.2.2", "10.244.2.9", 1))
			},
			want:  "default/web 10.96.0.100 http:80/TCP->8080 [web-1 10.244.1.2,10.244.2.9]\nkube-system/dns 10.96.0.10 dns:5353/UDP->5353\nnode none",
			dirty: "default/web",
		}},
	}, {
		name: "removal, rename and rewrite with the same content",
		steps: []step{{
			do:    func(t *testing.T, f *fixture) { f.write(t, "web.yaml", webYAML); f.write(t, "dns.yaml", dnsYAML) },
			want:  "default/web 10.96.0.100 http:80/TCP->8080 [web-1 10.244.1.2,10.244.2.2]\nkube-system/dns 10.96.0.10 dns:53/UDP->53\nnode none",
			dirty: "default/web kube-system/dns",
		}, {
			do:   func(t *testing.T, f *fixture) { f.write(t, "web.yaml", webYAML) },
			want: "default/web 10.96.0.100 http:80/TCP->8080 [web-1 10.244.1.2,10.244.2.2]\nkube-system/dns 10.96.0.10 dns:53/UDP->53\nnode none",
		}, {
			do:   func(t *testing.T, f *fixture) { f.rename(t, "web.yaml", "zz-web.yml") },
			want: "default/web 10.96.0.100 http:80/TCP->8080 [web-1 10.244.1.2,10.244.2.2]\nkube-system/dns 10.96.0.10 dns:53/UDP->53\nnode none",
		}, {
			do:    func(t *testing.T, f *fixture) { f.remove(t, "zz-web.yml") },
			want:  "default/web no-service\nkube-system/dns 10.96.0.10 dns:53/UDP->53\nnode none",
			dirty: "default/web",
		}, {
			do:    func(t *testing.T, f *fixture) { f.rename(t, "dns.yaml", "dns.txt") },
			want:  "default/web no-service\nkube-system/dns no-service\nnode none",
			dirty: "kube-system/dns",
		}},
	}, {
		name: "a bad object from the start is not served until fixed; its neighbours are",
		steps: []step{{
			do:       func(t *testing.T, f *fixture) { f.write(t, "web.yaml", webBadPort) },
			want:     "default/web no-service [web-1 10.244.1.2,10.244.2.2]\nkube-system/dns no-service\nnode none",
			dirty:    "default/web",
			problems: []string{"web.yaml: document 1 (Service default/web): spec.ports[0].port: must be 1-65535"},
		}, {
			do:    func(t *testing.T, f *fixture) { f.write(t, "web.yaml", webYAML) },
			want:  "default/web 10.96.0.100 http:80/TCP->8080 [web-1 10.244.1.2,10.244.2.2]\nkube-system/dns no-service\nnode none",
			dirty: "default/web",
		}},
	}, {
		name: "duplicate takes over when the first definition goes away",
		steps: []step{{
			do: func(t *testing.T, f *fixture) {
				f.write(t, "a.yaml", dnsYAML)
				f.write(t, "b.yaml", strings.Replace(dnsYAML, "10.96.0.10", "10.96.0.11", 1))
			},
			want:     "default/web no-service\nkube-system/dns 10.96.0.10 dns:53/UDP->53\nnode none",
			dirty:    "kube-system/dns",
			problems: []string{"b.yaml: document 1 (Service kube-system/dns): already defined in "},
		}, {
			do:    func(t *testing.T, f *fixture) { f.remove(t, "a.yaml") },
			want:  "default/web no-service\nkube-system/dns 10.96.0.11 dns:53/UDP->53\nnode none",
			dirty: "kube-system/dns",
		}},
	}, {
		name: "node changes",
		steps: []step{{
			do:    func(t *testing.T, f *fixture) { f.write(t, "n.yaml", nodeYAML("node-a", "192.0.2.1")) },
			want:  "default/web no-service\nkube-system/dns no-service\nnode node-a 192.0.2.1",
			dirty: "node",
		}, {
			do:   func(t *testing.T, f *fixture) { f.write(t, "n.yaml", "# same node\n"+nodeYAML("node-a", "192.0.2.1")) },
			want: "default/web no-service\nkube-system/dns no-service\nnode node-a 192.0.2.1",
		}, {
			do:    func(t *testing.T, f *fixture) { f.write(t, "n.yaml", nodeYAML("node-a", "192.0.2.2")) },
			want:  "default/web no-service\nkube-system/dns no-service\nnode node-a 192.0.2.2",
			dirty: "node",
		}, {
			do:    func(t *testing.T, f *fixture) { f.remove(t, "n.yaml") },
			want:  "default/web no-service\nkube-system/dns no-service\nnode none",
			dirty: "node",
		}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, "node-a")
			for i, s := range tt.steps {
				f.problems = nil
				s.do(t, f)
				f.m.mu.Lock()
				_, err := f.m.scanLocked(false) // what the watch loop does
				f.m.mu.Unlock()
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got := dumpStore(f.store, dump...); got != s.want {
					t.Errorf("step %d: store:\n%s\nwant:\n%s", i, got, s.want)
				}
				if got := dirtyString(f.store.Take()); got != s.dirty {
					t.Errorf("step %d: changed %q, want %q", i, got, s.dirty)
				}
				checkProblems(t, f.problems, s.problems)
			}
		})
	}
}

// svcDoc is a ClusterIP Service named name on ip:port.
func svcDoc(name, ip, port string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: %s}\nspec:\n  clusterIP: %s\n  ports: [{name: http, port: %s}]\n", name, ip, port)
}

// Each object of a file stands on its own, as with kubectl apply -f: a bad
// one is reported with its file, document and field, keeps its last good
// version (none on a fresh start), and never holds back the others; an
// object removed from a file goes once the file reads whole.
func TestManifestsPerObject(t *testing.T) {
	a, b, c := svcDoc("a", "10.96.1.1", "80"), svcDoc("b", "10.96.1.2", "80"), svcDoc("c", "10.96.1.3", "80")
	badB := svcDoc("b", "10.96.1.2", "70000")
	file := func(docs ...string) string { return strings.Join(docs, "---\n") }
	dump := []string{"default/a", "default/b", "default/c"}
	type step struct {
		content  string
		want     string
		dirty    string
		problems []string // Problem.Error() prefixes, sorted
		kept     []bool   // Problem.Kept of each, in the same order
	}
	tests := []struct {
		name  string
		steps []step
	}{{
		name: "a bad Service on a fresh start: the others are served",
		steps: []step{{
			content:  file(a, badB, c),
			want:     "default/a 10.96.1.1 http:80/TCP->80\ndefault/b no-service\ndefault/c 10.96.1.3 http:80/TCP->80\nnode none",
			dirty:    "default/a default/c",
			problems: []string{"apps.yaml: document 2 (Service default/b): spec.ports[0].port: must be 1-65535, got 70000"},
			kept:     []bool{false},
		}, {
			content: file(a, b, c),
			want:    "default/a 10.96.1.1 http:80/TCP->80\ndefault/b 10.96.1.2 http:80/TCP->80\ndefault/c 10.96.1.3 http:80/TCP->80\nnode none",
			dirty:   "default/b",
		}},
	}, {
		name: "an edit that breaks one object: it keeps its last good version, the others change",
		steps: []step{{
			content: file(a, b, c),
			want:    "default/a 10.96.1.1 http:80/TCP->80\ndefault/b 10.96.1.2 http:80/TCP->80\ndefault/c 10.96.1.3 http:80/TCP->80\nnode none",
			dirty:   "default/a default/b default/c",
		}, {
			content:  file(svcDoc("a", "10.96.1.1", "81"), badB, svcDoc("c", "10.96.1.3", "83")),
			want:     "default/a 10.96.1.1 http:81/TCP->81\ndefault/b 10.96.1.2 http:80/TCP->80\ndefault/c 10.96.1.3 http:83/TCP->83\nnode none",
			dirty:    "default/a default/c",
			problems: []string{"apps.yaml: document 2 (Service default/b): spec.ports[0].port: must be 1-65535, got 70000"},
			kept:     []bool{true},
		}, {
			// An unknown field refuses b at decoding; still b by its name.
			content:  file(a, strings.Replace(b, "clusterIP:", "clusterIp:", 1), c),
			want:     "default/a 10.96.1.1 http:80/TCP->80\ndefault/b 10.96.1.2 http:80/TCP->80\ndefault/c 10.96.1.3 http:80/TCP->80\nnode none",
			dirty:    "default/a default/c",
			problems: []string{`apps.yaml: document 2 (Service default/b): decode: strict decoding error: unknown field "spec.clusterIp"`},
			kept:     []bool{true},
		}},
	}, {
		name: "a removal waits while a document names no object",
		steps: []step{{
			content: file(a, b, c),
			want:    "default/a 10.96.1.1 http:80/TCP->80\ndefault/b 10.96.1.2 http:80/TCP->80\ndefault/c 10.96.1.3 http:80/TCP->80\nnode none",
			dirty:   "default/a default/b default/c",
		}, {
			// b's document no longer parses and c is gone: which one was
			// removed cannot be told, so both stay; a changes.
			content:  file(svcDoc("a", "10.96.1.1", "81"), "kind: [unclosed\n"),
			want:     "default/a 10.96.1.1 http:81/TCP->81\ndefault/b 10.96.1.2 http:80/TCP->80\ndefault/c 10.96.1.3 http:80/TCP->80\nnode none",
			dirty:    "default/a",
			problems: []string{"apps.yaml: document 2: parse: "},
			kept:     []bool{false},
		}, {
			// A lost name is the same.
			content:  file(a, strings.Replace(b, "{name: b}", "{}", 1)),
			want:     "default/a 10.96.1.1 http:80/TCP->80\ndefault/b 10.96.1.2 http:80/TCP->80\ndefault/c 10.96.1.3 http:80/TCP->80\nnode none",
			dirty:    "default/a",
			problems: []string{"apps.yaml: document 2 (Service default/): metadata.name: "},
			kept:     []bool{false},
		}, {
			// The file reads whole: c's removal takes effect.
			content: file(a, b),
			want:    "default/a 10.96.1.1 http:80/TCP->80\ndefault/b 10.96.1.2 http:80/TCP->80\ndefault/c no-service\nnode none",
			dirty:   "default/c",
		}, {
			// A refused object is no removal either way: b stays.
			content:  file(a, badB),
			want:     "default/a 10.96.1.1 http:80/TCP->80\ndefault/b 10.96.1.2 http:80/TCP->80\ndefault/c no-service\nnode none",
			problems: []string{"apps.yaml: document 2 (Service default/b): spec.ports[0].port"},
			kept:     []bool{true},
		}},
	}, {
		name: "a List with one bad item serves the others",
		steps: []step{{
			content: `{"apiVersion": "v1", "kind": "List", "items": [` +
				`{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"}, "spec": {"clusterIP": "10.96.1.1", "ports": [{"name": "http", "port": 80}]}},` +
				`{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "b"}, "spec": {"clusterIP": "10.96.1.2", "ports": [{"name": "http", "port": 0}]}},` +
				`{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "c"}, "spec": {"clusterIP": "10.96.1.3", "ports": [{"name": "http", "port": 80}]}}]}`,
			want:     "default/a 10.96.1.1 http:80/TCP->80\ndefault/b no-service\ndefault/c 10.96.1.3 http:80/TCP->80\nnode none",
			dirty:    "default/a default/c",
			problems: []string{"apps.yaml: document 1 (Service default/b): spec.ports[0].port: must be 1-65535, got 0"},
			kept:     []bool{false},
		}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, "")
			var kept []bool
			problems := f.m.Problems
			f.m.Problems = func(p Problem) { problems(p); kept = append(kept, p.Kept) }
			for i, s := range tt.steps {
				f.problems, kept = nil, nil
				f.write(t, "apps.yaml", s.content)
				var err error
				if i == 0 {
					err = f.m.Load() // a fresh start
				} else {
					f.m.mu.Lock()
					_, err = f.m.scanLocked(false)
					f.m.mu.Unlock()
				}
				if err != nil && (i > 0 || len(s.problems) == 0) {
					t.Fatalf("step %d: %v", i, err)
				}
				if got := dumpStore(f.store, dump...); got != s.want {
					t.Errorf("step %d: store:\n%s\nwant:\n%s", i, got, s.want)
				}
				if got := dirtyString(f.store.Take()); got != s.dirty {
					t.Errorf("step %d: changed %q, want %q", i, got, s.dirty)
				}
				checkProblems(t, f.problems, s.problems)
				if !slices.Equal(kept, s.kept) {
					t.Errorf("step %d: kept %v, want %v", i, kept, s.kept)
				}
			}
		})
	}
}

func dirtyString(c objects.Changes) string {
	var parts []string
	for _, n := range c.Services {
		parts = append(parts, n.String())
	}
	if c.Node {
		parts = append(parts, "node")
	}
	return strings.Join(parts, " ")
}

func TestManifestsUnchangedBadFileReportedOnce(t *testing.T) {
	f := newFixture(t, "")
	f.write(t, "web.yaml", webBadPort)
	for range 3 {
		f.m.mu.Lock()
		_, err := f.m.scanLocked(false)
		f.m.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(f.problems) != 1 {
		t.Errorf("reported %d times, want once: %q", len(f.problems), f.problems)
	}
}

func TestManifestsMissingFolder(t *testing.T) {
	store := objects.NewStore(SourceManifests)
	m := &Manifests{Dir: filepath.Join(t.TempDir(), "absent"), Store: store}
	err := m.Load()
	if err == nil || isProblems(err) {
		t.Fatalf("Load() = %v, want a folder error", err)
	}
	if store.Synced() {
		t.Error("synced after a failed read")
	}
}

// TestExamples keeps the demo folder loading without problems.
func TestExamples(t *testing.T) {
	store := objects.NewStore(SourceManifests)
	m := &Manifests{Dir: filepath.Join("..", "..", "examples"), NodeName: "node-a", Store: store, Log: zaptest.NewLogger(t)}
	if err := m.Load(); err != nil {
		t.Fatalf("examples have problems: %v", err)
	}
	want := "default/echo fd00:96::30,10.96.0.30 http:80/TCP->8080 [echo-v4 10.244.1.4,10.244.2.4] [echo-v6 fd00:244:1::4,fd00:244:2::4]\n" +
		"default/sticky 10.96.0.40 https:443/TCP->8443 [sticky-1 10.244.1.5,10.244.2.5,10.244.3.5]\n" +
		"default/web 10.96.0.100 http:80/TCP->8080 [web-1 10.244.1.2,10.244.2.2,10.244.3.2]\n" +
		"kube-system/dns 10.96.0.10 dns:53/UDP->53 [dns-1 10.244.1.3,10.244.2.3]\n" +
		"node node-a 192.168.122.10"
	var names []string
	for _, n := range store.ServiceNames() {
		names = append(names, n.String())
	}
	if got := dumpStore(store, names...); got != want {
		t.Errorf("examples:\n%s\nwant:\n%s", got, want)
	}
	svc, _ := store.Service(model.ServiceName{Namespace: "default", Name: "sticky"})
	if svc.Annotations["kube-ipvs.io/scheduler"] != "sh" || svc.Spec.SessionAffinity != "ClientIP" {
		t.Errorf("sticky: annotations %v, affinity %q", svc.Annotations, svc.Spec.SessionAffinity)
	}
}

// TestManifestsRun changes the folder while Run follows it; every wait is
// on the store's notification, bounded by a deadline.
func TestManifestsRun(t *testing.T) {
	f := newFixture(t, "")
	f.m.Rescan = time.Hour // the file watch, not the safety net, must deliver
	f.m.Debounce = 10 * time.Millisecond
	problems := make(chan Problem, 10)
	f.m.Problems = func(p Problem) { problems <- p }
	f.write(t, "dns.yaml", dnsYAML)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.m.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	dump := []string{"default/web", "kube-system/dns"}
	waitStore(t, f.store, func() bool { return f.store.Synced() })
	waitDump(t, f.store, dump, "default/web no-service\nkube-system/dns 10.96.0.10 dns:53/UDP->53\nnode none")

	f.write(t, "web.yaml", webYAML)
	waitDump(t, f.store, dump, "default/web 10.96.0.100 http:80/TCP->8080 [web-1 10.244.1.2,10.244.2.2]\nkube-system/dns 10.96.0.10 dns:53/UDP->53\nnode none")

	f.write(t, "web.yaml", webBadPort) // ignored: last good stays
	f.remove(t, "dns.yaml")
	waitDump(t, f.store, dump, "default/web 10.96.0.100 http:80/TCP->8080 [web-1 10.244.1.2,10.244.2.2]\nkube-system/dns no-service\nnode none")
	select {
	case p := <-problems:
		if !strings.Contains(p.Error(), "web.yaml: document 1 (Service default/web): spec.ports[0].port") {
			t.Errorf("problem %v", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("bad file not reported")
	}
}

func waitDump(t *testing.T, s *objects.Store, names []string, want string) {
	t.Helper()
	var got string
	ok := waitFor(s, func() bool { got = dumpStore(s, names...); return got == want })
	if !ok {
		t.Fatalf("store:\n%s\nwant:\n%s", got, want)
	}
}

func waitStore(t *testing.T, s *objects.Store, cond func() bool) {
	t.Helper()
	if !waitFor(s, cond) {
		t.Fatal("condition not met before the deadline")
	}
}

// waitFor waits for cond on every store notification, for at most 10s.
func waitFor(s *objects.Store, cond func() bool) bool {
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-s.Notify():
		case <-deadline:
			return false
		}
	}
	return true
}

// A refused document keeps its object's last good version only where no
// other document reads well for it: a good version later in the same file,
// or in a file that sorts after, is served, and is no duplicate.
func TestManifestsLastGoodGivesWayToGood(t *testing.T) {
	a, b := svcDoc("a", "10.96.1.1", "80"), svcDoc("b", "10.96.1.2", "80")
	badB, newB := svcDoc("b", "10.96.1.2", "70000"), svcDoc("b", "10.96.1.2", "81")
	file := func(docs ...string) string { return strings.Join(docs, "---\n") }
	refused := "1.yaml: document 2 (Service default/b): spec.ports[0].port: must be 1-65535, got 70000"
	for _, tc := range []struct {
		name          string
		first, second map[string]string // file name to content, per read
		problems      []string
	}{
		{"same file", map[string]string{"1.yaml": file(a, b)}, map[string]string{"1.yaml": file(a, badB, newB)}, []string{refused}},
		{"a file sorting first", map[string]string{"1.yaml": file(a, b), "2.yaml": ""},
			map[string]string{"1.yaml": file(a, badB), "2.yaml": newB}, []string{refused}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "")
			for name, content := range tc.first {
				f.write(t, name, content)
			}
			if err := f.m.Load(); err != nil {
				t.Fatal(err)
			}
			f.problems = nil
			for name, content := range tc.second {
				f.write(t, name, content)
			}
			f.m.mu.Lock()
			_, err := f.m.scanLocked(false)
			f.m.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			want := "default/a 10.96.1.1 http:80/TCP->80\ndefault/b 10.96.1.2 http:81/TCP->81\nnode none"
			if got := dumpStore(f.store, "default/a", "default/b"); got != want {
				t.Errorf("store:\n%s\nwant:\n%s", got, want)
			}
			checkProblems(t, f.problems, tc.problems)
		})
	}
}
