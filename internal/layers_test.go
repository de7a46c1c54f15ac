// Package internal_test checks the shape of the packages below it: each
// imports only packages of lower layers, and the kernel and cluster
// libraries are imported only by the packages listed for them below.
package internal_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/kube-ipvs/kube-ipvs/internal/"

// layers orders the packages from the bottom up: a package may import only
// packages of a lower layer. A new package must be placed here.
var layers = [][]string{
	{"model", "workers", "httplimit", "httplimit/httplimittest", "logv", "sbom"},
	{"ipvstable", "shim", "objects", "metrics", "runner", "health"},
	{"plan", "translate", "dataplane"},
	{"dataplane/linux", "dataplane/fake", "dataplane/dataplanetest", "source", "ipvsadm", "healthcheck", "observed"},
	{"rescan", "config"},
	{"reconciler"},
	{"status"},
	{"server"},
	{"agent"},
}

// onlyIn names the external libraries that one package alone may import.
var onlyIn = map[string]string{
	"github.com/vishvananda/netlink": "dataplane/linux",
	"github.com/mdlayher/netlink":    "dataplane/linux",
	"github.com/moby/ipvs":           "dataplane/linux",
	"github.com/ti-mo/conntrack":     "dataplane/linux",
	"k8s.io/client-go/informers":     "source",
	"k8s.io/client-go/tools/cache":   "source",
}

func TestLayers(t *testing.T) {
	layerOf := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			layerOf[p] = i
		}
	}
	for pkg, imports := range packageImports(t) {
		from, ok := layerOf[pkg]
		if !ok {
			t.Errorf("package %s has no layer: add it to layers", pkg)
			continue
		}
		for _, imp := range imports {
			if dep, ok := strings.CutPrefix(imp, module); ok {
				if to, known := layerOf[dep]; !known || to >= from {
					t.Errorf("%s (layer %d) imports %s (layer %d): only lower layers", pkg, from, dep, to)
				}
				continue
			}
			for lib, owner := range onlyIn {
				if (imp == lib || strings.HasPrefix(imp, lib+"/")) && pkg != owner {
					t.Errorf("%s imports %s: only %s may", pkg, imp, owner)
				}
			}
		}
	}
}

// packageImports reads the imports of every package's non-test files.
func packageImports(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(path))
		for _, spec := range f.Imports {
			imp, _ := strconv.Unquote(spec.Path.Value)
			out[pkg] = append(out[pkg], imp)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < len(layers) {
		t.Fatalf("read %d packages: walked the wrong folder?", len(out))
	}
	return out
}
