package sbom

import (
	"encoding/json"
	"runtime/debug"
	"sort"
	"strings"
	"testing"
	"time"
)

const status = `Package: iptables
Status: install ok installed
Version: 1.8.11-2
Architecture: arm64
Maintainer: Debian Netfilter Packaging Team <team+pkg-netfilter-team@tracker.debian.org>
Homepage: https://www.netfilter.org/
Description: administration tools for packet filtering and NAT
 The iptables/xtables framework has been replaced by nftables.
 .
 A continuation line: not a field.

Package: libxtables12
Source: iptables (1.8.11-2)
Version: 1.8.11-2
Architecture: arm64

Package: netbase
Version: 6.5
Architecture: all
`

func TestParseDpkgStatus(t *testing.T) {
	got, err := ParseDpkgStatus(status)
	if err != nil {
		t.Fatal(err)
	}
	want := []DebPackage{
		{Name: "iptables", Version: "1.8.11-2", Architecture: "arm64",
			Maintainer: "Debian Netfilter Packaging Team <team+pkg-netfilter-team@tracker.debian.org>", Homepage: "https://www.netfilter.org/"},
		{Name: "libxtables12", Version: "1.8.11-2", Architecture: "arm64", Source: "iptables"},
		{Name: "netbase", Version: "6.5", Architecture: "all"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d packages, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("package %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"Package: x\n", "Version: 1\n", "Package x\nVersion: 1\n"} {
		if _, err := ParseDpkgStatus(bad); err == nil {
			t.Errorf("ParseDpkgStatus(%q) accepted it", bad)
		}
	}
}

func input(t *testing.T) Input {
	t.Helper()
	debs, err := ParseDpkgStatus(status)
	if err != nil {
		t.Fatal(err)
	}
	amd64 := []DebPackage{{Name: "iptables", Version: "1.8.11-2", Architecture: "amd64"}, {Name: "netbase", Version: "6.5", Architecture: "all"}}
	info := func() *debug.BuildInfo {
		return &debug.BuildInfo{
			GoVersion: "go1.26.8",
			Path:      "github.com/kube-ipvs/kube-ipvs/cmd/kube-ipvs",
			Main:      debug.Module{Path: "github.com/kube-ipvs/kube-ipvs", Version: "(devel)"},
			Deps: []*debug.Module{
				{Path: "go.uber.org/zap", Version: "v1.27.0", Sum: "h1:x"},
				{Path: "k8s.io/client-go", Version: "v0.35.0", Replace: &debug.Module{Path: "example.com/fork/client-go", Version: "v0.35.1"}},
			},
		}
	}
	return Input{
		Name: "kube-ipvs", Version: "v1.2.3", Image: "kube-ipvs:v1.2.3", License: "Apache-2.0", Suite: "trixie",
		Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)), Tool: "kube-ipvs-sbom",
		Platform: []Platform{
			{Binary: Binary{Platform: "linux/amd64", Info: info()}, Packages: amd64},
			{Binary: Binary{Platform: "linux/arm64", Info: info()}, Packages: debs},
		},
	}
}

// TestBuild: the image describes both agents, each with the standard
// library and the modules it links (a replaced module as its replacement),
// and each platform's Debian packages with their architecture; a module or
// package both platforms have is one package.
func TestBuild(t *testing.T) {
	doc, err := Build(input(t))
	if err != nil {
		t.Fatal(err)
	}
	if doc.CreationInfo.Created != "2026-01-02T02:04:05Z" {
		t.Errorf("created %q, want UTC 2026-01-02T02:04:05Z", doc.CreationInfo.Created)
	}
	names := map[string]string{}
	var lines []string
	for _, p := range doc.Packages {
		names[p.SPDXID] = p.Name
		line := p.SPDXID + " " + p.VersionInfo
		for _, r := range p.ExternalRefs {
			line += " " + r.Locator
		}
		lines = append(lines, line)
	}
	for _, r := range doc.Relationships {
		lines = append(lines, r.Element+" "+r.Type+" "+r.Related)
	}
	sort.Strings(lines)
	want := []string{
		"SPDXRef-Binary-kube-ipvs-linux-amd64 DEPENDS_ON SPDXRef-Go-example.com-fork-client-go-v0.35.1",
		"SPDXRef-Binary-kube-ipvs-linux-amd64 DEPENDS_ON SPDXRef-Go-go.uber.org-zap-v1.27.0",
		"SPDXRef-Binary-kube-ipvs-linux-amd64 DEPENDS_ON SPDXRef-Go-stdlib-1.26.8",
		"SPDXRef-Binary-kube-ipvs-linux-amd64 v1.2.3 pkg:golang/github.com/kube-ipvs/kube-ipvs@v1.2.3",
		"SPDXRef-Binary-kube-ipvs-linux-arm64 DEPENDS_ON SPDXRef-Go-example.com-fork-client-go-v0.35.1",
		"SPDXRef-Binary-kube-ipvs-linux-arm64 DEPENDS_ON SPDXRef-Go-go.uber.org-zap-v1.27.0",
		"SPDXRef-Binary-kube-ipvs-linux-arm64 DEPENDS_ON SPDXRef-Go-stdlib-1.26.8",
		"SPDXRef-Binary-kube-ipvs-linux-arm64 v1.2.3 pkg:golang/github.com/kube-ipvs/kube-ipvs@v1.2.3",
		"SPDXRef-DOCUMENT DESCRIBES SPDXRef-Image-kube-ipvs",
		"SPDXRef-Deb-iptables-1.8.11-2-amd64 1.8.11-2 pkg:deb/debian/iptables@1.8.11-2?arch=amd64&distro=trixie",
		"SPDXRef-Deb-iptables-1.8.11-2-arm64 1.8.11-2 pkg:deb/debian/iptables@1.8.11-2?arch=arm64&distro=trixie",
		"SPDXRef-Deb-libxtables12-1.8.11-2-arm64 1.8.11-2 pkg:deb/debian/libxtables12@1.8.11-2?arch=arm64&distro=trixie",
		"SPDXRef-Deb-netbase-6.5-all 6.5 pkg:deb/debian/netbase@6.5?arch=all&distro=trixie",
		"SPDXRef-Go-example.com-fork-client-go-v0.35.1 v0.35.1 pkg:golang/example.com/fork/client-go@v0.35.1",
		"SPDXRef-Go-go.uber.org-zap-v1.27.0 v1.27.0 pkg:golang/go.uber.org/zap@v1.27.0",
		"SPDXRef-Go-stdlib-1.26.8 1.26.8 pkg:golang/stdlib@1.26.8",
		"SPDXRef-Image-kube-ipvs CONTAINS SPDXRef-Binary-kube-ipvs-linux-amd64",
		"SPDXRef-Image-kube-ipvs CONTAINS SPDXRef-Binary-kube-ipvs-linux-arm64",
		"SPDXRef-Image-kube-ipvs CONTAINS SPDXRef-Deb-iptables-1.8.11-2-amd64",
		"SPDXRef-Image-kube-ipvs CONTAINS SPDXRef-Deb-iptables-1.8.11-2-arm64",
		"SPDXRef-Image-kube-ipvs CONTAINS SPDXRef-Deb-libxtables12-1.8.11-2-arm64",
		"SPDXRef-Image-kube-ipvs CONTAINS SPDXRef-Deb-netbase-6.5-all",
		"SPDXRef-Image-kube-ipvs v1.2.3",
	}
	if got := strings.Join(lines, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\n\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	for _, p := range doc.Packages {
		if p.Name == "iptables" && strings.Contains(p.SPDXID, "arm64") &&
			p.Supplier != "Organization: Debian Netfilter Packaging Team (team+pkg-netfilter-team@tracker.debian.org)" {
			t.Errorf("iptables supplier %q", p.Supplier)
		}
	}
	other := input(t)
	other.Platform = other.Platform[:1]
	doc2, err := Build(other)
	if err != nil {
		t.Fatal(err)
	}
	if doc2.DocumentNamespace == doc.DocumentNamespace {
		t.Errorf("two documents listing different packages share the namespace %s", doc.DocumentNamespace)
	}
}

// TestBuildJSON: the document as written has SPDX 2.3's required fields
// under their JSON names.
func TestBuildJSON(t *testing.T) {
	doc, err := Build(input(t))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"spdxVersion", "dataLicense", "SPDXID", "name", "documentNamespace", "creationInfo"} {
		if s, _ := m[k].(string); s == "" && k != "creationInfo" {
			t.Errorf("document field %s missing or empty", k)
		}
	}
	ci, _ := m["creationInfo"].(map[string]any)
	if ci["created"] == nil || ci["creators"] == nil {
		t.Errorf("creationInfo lacks created or creators: %v", ci)
	}
	pkgs, _ := m["packages"].([]any)
	if len(pkgs) == 0 {
		t.Fatal("no packages")
	}
	for _, p := range pkgs {
		p := p.(map[string]any)
		for _, k := range []string{"name", "SPDXID", "downloadLocation"} {
			if s, _ := p[k].(string); s == "" {
				t.Errorf("package %v: %s missing", p["name"], k)
			}
		}
		if fa, ok := p["filesAnalyzed"].(bool); !ok || fa {
			t.Errorf("package %v: filesAnalyzed must be false (no files are listed)", p["name"])
		}
	}
}

// TestValidate: a built document passes; each broken required field fails
// with a message naming it.
func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		breakIt func(*Document)
		want    string
	}{
		{"valid", func(*Document) {}, ""},
		{"version", func(d *Document) { d.SPDXVersion = "SPDX-2.2" }, "spdxVersion"},
		{"data license", func(d *Document) { d.DataLicense = "MIT" }, "dataLicense"},
		{"document id", func(d *Document) { d.SPDXID = "SPDXRef-X" }, "document SPDXID"},
		{"name", func(d *Document) { d.Name = "" }, "document name"},
		{"namespace", func(d *Document) { d.DocumentNamespace = "kube-ipvs" }, "documentNamespace"},
		{"namespace fragment", func(d *Document) { d.DocumentNamespace += "#x" }, "documentNamespace"},
		{"created", func(d *Document) { d.CreationInfo.Created = "2026-01-02" }, "creationInfo.created"},
		{"creators", func(d *Document) { d.CreationInfo.Creators = nil }, "creators is empty"},
		{"creator kind", func(d *Document) { d.CreationInfo.Creators = []string{"me"} }, "creator \"me\""},
		{"package name", func(d *Document) { d.Packages[1].Name = "" }, "has no name"},
		{"package id", func(d *Document) { d.Packages[1].SPDXID = "SPDXRef-a_b" }, "is not SPDXRef-"},
		{"duplicate id", func(d *Document) { d.Packages[2].SPDXID = d.Packages[1].SPDXID }, "not unique"},
		{"download", func(d *Document) { d.Packages[1].DownloadLocation = "" }, "downloadLocation"},
		{"purl", func(d *Document) { d.Packages[1].ExternalRefs[0].Locator = "golang/x" }, "does not start with pkg:"},
		{"dangling", func(d *Document) { d.Relationships[1].Related = "SPDXRef-nothing" }, "names an element the document lacks"},
		{"describes", func(d *Document) { d.DocumentDescribes = []string{"SPDXRef-nothing"} }, "documentDescribes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc, err := Build(input(t))
			if err != nil {
				t.Fatal(err)
			}
			tc.breakIt(&doc)
			err = Validate(doc)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid document refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("accepted a document with a broken %s", tc.name)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q does not name %q", err, tc.want)
			}
		})
	}
}

// TestBuildRefuses: what cannot be described is an error, not a document.
func TestBuildRefuses(t *testing.T) {
	for name, mutate := range map[string]func(*Input){
		"no version":           func(in *Input) { in.Version = "" },
		"no platforms":         func(in *Input) { in.Platform = nil },
		"no build info":        func(in *Input) { in.Platform[0].Binary.Info = nil },
		"platform not os/arch": func(in *Input) { in.Platform[0].Binary.Platform = "amd64" },
		"deb without version":  func(in *Input) { in.Platform[0].Packages[0].Version = "" },
	} {
		in := input(t)
		mutate(&in)
		if _, err := Build(in); err == nil {
			t.Errorf("%s: built a document", name)
		}
	}
}
