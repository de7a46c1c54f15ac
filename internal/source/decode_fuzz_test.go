package source

import (
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// FuzzParseFile: any bytes give either objects or problems, never both and
// never a panic, and every object is keyed and typed.
func FuzzParseFile(f *testing.F) {
	for _, s := range []string{webYAML, dnsYAML, listJSON, webBadPort, nodeYAML("n", "192.0.2.1"), "---\n---\n", "kind: List\napiVersion: v1\nitems: [{}]\n"} {
		f.Add("f.yaml", []byte(s))
		f.Add("f.json", []byte(s))
	}
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		objs, problems := parseFile(name, data, rules{nodePorts: model.PortRange{First: 30000, Last: 32767}})
		if len(objs) > 0 && len(problems) > 0 {
			t.Fatalf("both objects and problems: %v", problems)
		}
		for _, o := range objs {
			if o.obj == nil || o.key.name == "" || o.doc < 1 {
				t.Fatalf("bad object %+v", o)
			}
		}
		for _, p := range problems {
			_ = p.Error()
		}
	})
}
