package source

import (
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// FuzzParseFile: any bytes give objects and problems, never a panic; every
// object is keyed and typed, every refusal of a named object keyed, and
// the objects of a file left to the last good content's are the objects
// of that content.
func FuzzParseFile(f *testing.F) {
	for _, s := range []string{webYAML, dnsYAML, listJSON, webBadPort, nodeYAML("n", "192.0.2.1"), "---\n---\n", "kind: List\napiVersion: v1\nitems: [{}]\n"} {
		f.Add("f.yaml", []byte(s))
		f.Add("f.json", []byte(s))
	}
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		r := rules{nodePorts: model.PortRange{First: 30000, Last: 32767}}
		objs, problems := parseFile(name, data, r)
		for _, o := range objs {
			if o.obj == nil || o.key.name == "" || o.doc < 1 {
				t.Fatalf("bad object %+v", o)
			}
		}
		for _, p := range problems {
			_ = p.Error()
		}
		reads, whole := readDocuments(name, data, r)
		if whole != nil {
			return
		}
		for _, rd := range reads {
			if rd.problem != nil && !rd.unknown && served(rd.key.kind) && rd.key.name == "" {
				t.Fatalf("refusal %+v names no object but is not unknown", rd)
			}
		}
		// Read again over its own objects: what is served is a subset of
		// the last good content and of this read's names.
		good, _ := keepLastGood(objs, reads)
		if len(good) != len(objs) {
			t.Fatalf("over its own objects a read serves %d, want %d", len(good), len(objs))
		}
	})
}
