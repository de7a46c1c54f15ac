// Package sbom describes a release's image as an SPDX 2.3 document: the
// agent binaries with the Go modules linked into them (their build
// information) and the Debian packages of each platform's root file system
// (its dpkg status file). It takes values and returns values; reading the
// files is the caller's.
package sbom

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"
	"time"
)

// SPDX 2.3 constants.
const (
	specVersion = "SPDX-2.3"
	dataLicense = "CC0-1.0"
	documentID  = "SPDXRef-DOCUMENT"
	noAssertion = "NOASSERTION"
)

// Document is the part of an SPDX 2.3 JSON document this package writes.
type Document struct {
	SPDXVersion       string         `json:"spdxVersion"`
	DataLicense       string         `json:"dataLicense"`
	SPDXID            string         `json:"SPDXID"`
	Name              string         `json:"name"`
	DocumentNamespace string         `json:"documentNamespace"`
	CreationInfo      CreationInfo   `json:"creationInfo"`
	DocumentDescribes []string       `json:"documentDescribes,omitempty"`
	Packages          []Package      `json:"packages"`
	Relationships     []Relationship `json:"relationships"`
}

// CreationInfo says when and by what the document was made.
type CreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

// Package is one SPDX package: the image, an agent binary, a Go module or
// the Go standard library, or a Debian package.
type Package struct {
	Name             string        `json:"name"`
	SPDXID           string        `json:"SPDXID"`
	VersionInfo      string        `json:"versionInfo,omitempty"`
	Supplier         string        `json:"supplier,omitempty"`
	DownloadLocation string        `json:"downloadLocation"`
	FilesAnalyzed    bool          `json:"filesAnalyzed"`
	LicenseDeclared  string        `json:"licenseDeclared,omitempty"`
	PrimaryPurpose   string        `json:"primaryPackagePurpose,omitempty"`
	Comment          string        `json:"comment,omitempty"`
	ExternalRefs     []ExternalRef `json:"externalRefs,omitempty"`
}

// ExternalRef is a package URL (purl), which scanners match advisories by.
type ExternalRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

// Relationship links two elements by SPDX identifier.
type Relationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// Binary is one platform's agent: its build information.
type Binary struct {
	Platform string // os/arch, as the image index lists it
	Info     *debug.BuildInfo
}

// DebPackage is one entry of a dpkg status file.
type DebPackage struct {
	Name, Version, Architecture, Source, Maintainer, Homepage string
}

// Platform is one platform of the image: its agent and its Debian packages.
type Platform struct {
	Binary   Binary
	Packages []DebPackage
}

// Input is what a release knows about its image.
type Input struct {
	Name     string // the project, "kube-ipvs"
	Version  string // the release, "v1.2.3"
	Image    string // the image reference the manifests name
	License  string // the project's SPDX license expression
	Suite    string // the Debian release the packages come from, "trixie"
	Created  time.Time
	Tool     string // what made the document, "kube-ipvs-sbom"
	Platform []Platform
}

// Build returns the SPDX document for in. Identifiers are derived from
// names and versions, so the same input gives the same document.
func Build(in Input) (Document, error) {
	if in.Name == "" || in.Version == "" {
		return Document{}, errors.New("build SBOM: name and version are required")
	}
	if len(in.Platform) == 0 {
		return Document{}, errors.New("build SBOM: no platforms")
	}
	b := &builder{ids: map[string]bool{}, related: map[Relationship]bool{}}
	image := b.add(Package{
		Name:             in.Name,
		SPDXID:           "SPDXRef-Image-" + sanitize(in.Name),
		VersionInfo:      in.Version,
		DownloadLocation: noAssertion,
		LicenseDeclared:  orNoAssertion(in.License),
		PrimaryPurpose:   "CONTAINER",
		Comment:          "the OCI image index " + in.Image,
	})
	for _, p := range in.Platform {
		if err := b.platform(image, in, p); err != nil {
			return Document{}, fmt.Errorf("build SBOM for %s: %w", p.Binary.Platform, err)
		}
	}
	doc := Document{
		SPDXVersion:       specVersion,
		DataLicense:       dataLicense,
		SPDXID:            documentID,
		Name:              in.Name + "-" + in.Version,
		DocumentNamespace: namespace(in, b.packages),
		CreationInfo: CreationInfo{
			Created:  in.Created.UTC().Format(time.RFC3339),
			Creators: []string{"Tool: " + in.Tool},
		},
		DocumentDescribes: []string{image},
		Packages:          b.packages,
		Relationships:     append([]Relationship{{documentID, "DESCRIBES", image}}, b.relationships...),
	}
	return doc, Validate(doc)
}

type builder struct {
	packages      []Package
	relationships []Relationship
	ids           map[string]bool
	related       map[Relationship]bool
}

// add records p unless a package with its identifier is there already (a
// module both binaries link), and returns the identifier.
func (b *builder) add(p Package) string {
	if !b.ids[p.SPDXID] {
		b.ids[p.SPDXID] = true
		b.packages = append(b.packages, p)
	}
	return p.SPDXID
}

// relate records a relationship once: an architecture-independent Debian
// package is in both platforms' root file systems.
func (b *builder) relate(from, typ, to string) {
	r := Relationship{from, typ, to}
	if !b.related[r] {
		b.related[r] = true
		b.relationships = append(b.relationships, r)
	}
}

func (b *builder) platform(image string, in Input, p Platform) error {
	info := p.Binary.Info
	if info == nil {
		return errors.New("no build information")
	}
	os, arch, ok := strings.Cut(p.Binary.Platform, "/")
	if !ok || os == "" || arch == "" {
		return fmt.Errorf("platform %q is not os/arch", p.Binary.Platform)
	}
	agent := b.add(Package{
		Name:             info.Path,
		SPDXID:           "SPDXRef-Binary-" + sanitize(in.Name+"-"+os+"-"+arch),
		VersionInfo:      in.Version,
		DownloadLocation: noAssertion,
		LicenseDeclared:  orNoAssertion(in.License),
		PrimaryPurpose:   "APPLICATION",
		Comment:          fmt.Sprintf("/usr/local/bin/%s in the %s image, built with %s", in.Name, p.Binary.Platform, info.GoVersion),
		ExternalRefs:     purl(golangPURL(info.Main.Path, in.Version)),
	})
	b.relate(image, "CONTAINS", agent)
	stdlib := strings.TrimPrefix(info.GoVersion, "go")
	b.relate(agent, "DEPENDS_ON", b.add(Package{
		Name:             "stdlib",
		SPDXID:           "SPDXRef-Go-stdlib-" + sanitize(stdlib),
		VersionInfo:      stdlib,
		DownloadLocation: noAssertion,
		PrimaryPurpose:   "LIBRARY",
		Comment:          "the Go standard library",
		ExternalRefs:     purl("pkg:golang/stdlib@" + url.PathEscape(stdlib)),
	}))
	for _, d := range info.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		b.relate(agent, "DEPENDS_ON", b.add(Package{
			Name:             m.Path,
			SPDXID:           "SPDXRef-Go-" + sanitize(m.Path+"-"+m.Version),
			VersionInfo:      m.Version,
			DownloadLocation: noAssertion,
			PrimaryPurpose:   "LIBRARY",
			ExternalRefs:     purl(golangPURL(m.Path, m.Version)),
		}))
	}
	for _, d := range p.Packages {
		if d.Name == "" || d.Version == "" {
			return fmt.Errorf("a Debian package without a name or version: %+v", d)
		}
		b.relate(image, "CONTAINS", b.add(debPackage(d, arch, in.Suite)))
	}
	return nil
}

func debPackage(d DebPackage, arch, suite string) Package {
	pkgArch := d.Architecture
	if pkgArch == "" {
		pkgArch = arch
	}
	locator := "pkg:deb/debian/" + url.PathEscape(d.Name) + "@" + url.PathEscape(d.Version) + "?arch=" + url.QueryEscape(pkgArch)
	if suite != "" {
		locator += "&distro=" + url.QueryEscape(suite)
	}
	p := Package{
		Name:             d.Name,
		SPDXID:           "SPDXRef-Deb-" + sanitize(d.Name+"-"+d.Version+"-"+pkgArch),
		VersionInfo:      d.Version,
		DownloadLocation: noAssertion,
		PrimaryPurpose:   "LIBRARY",
		ExternalRefs:     purl(locator),
	}
	if d.Maintainer != "" {
		p.Supplier = "Organization: " + supplier(d.Maintainer)
	}
	if d.Homepage != "" {
		p.Comment = "homepage " + d.Homepage
	}
	if d.Source != "" && d.Source != d.Name {
		p.Comment = strings.TrimSpace("source package " + d.Source + "; " + p.Comment)
		p.Comment = strings.TrimSuffix(p.Comment, ";")
	}
	return p
}

// supplier writes a Maintainer field, "Name <email>", as SPDX's supplier
// wants it, "Name (email)".
func supplier(maintainer string) string {
	name, email, ok := strings.Cut(maintainer, "<")
	if !ok {
		return strings.TrimSpace(maintainer)
	}
	return strings.TrimSpace(name) + " (" + strings.TrimSuffix(strings.TrimSpace(email), ">") + ")"
}

func purl(locator string) []ExternalRef {
	return []ExternalRef{{Category: "PACKAGE-MANAGER", Type: "purl", Locator: locator}}
}

// golangPURL is the package URL of a Go module: its path's segments, each
// escaped, and the version.
func golangPURL(path, version string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "pkg:golang/" + strings.Join(segs, "/") + "@" + url.PathEscape(version)
}

func orNoAssertion(s string) string {
	if s == "" {
		return noAssertion
	}
	return s
}

var notIDChar = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// sanitize makes s fit an SPDX identifier: letters, digits, "." and "-".
func sanitize(s string) string {
	return strings.Trim(notIDChar.ReplaceAllString(s, "-"), "-")
}

// namespace is the document's unique URI: the release and a digest of what
// it lists, so two documents with different contents never share one.
func namespace(in Input, pkgs []Package) string {
	h := sha256.New()
	for _, p := range pkgs {
		fmt.Fprintf(h, "%s\n", p.SPDXID)
	}
	return "https://spdx.org/spdxdocs/" + sanitize(in.Name+"-"+in.Version) + "-" + hex.EncodeToString(h.Sum(nil))[:16]
}

// ParseDpkgStatus reads the installed packages of a dpkg status file
// (RFC 822-style paragraphs; continuation lines start with a space).
func ParseDpkgStatus(text string) ([]DebPackage, error) {
	var (
		out  []DebPackage
		cur  DebPackage
		seen bool
	)
	flush := func() error {
		if seen {
			if cur.Name == "" || cur.Version == "" {
				return fmt.Errorf("parse dpkg status: a paragraph without Package or Version (%+v)", cur)
			}
			out = append(out, cur)
		}
		cur, seen = DebPackage{}, false
		return nil
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			continue
		}
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("parse dpkg status: line %q is not a field", line)
		}
		seen = true
		value = strings.TrimSpace(value)
		switch key {
		case "Package":
			cur.Name = value
		case "Version":
			cur.Version = value
		case "Architecture":
			cur.Architecture = value
		case "Source":
			// "Source: name (version)" when the source version differs.
			cur.Source, _, _ = strings.Cut(value, " ")
		case "Maintainer":
			cur.Maintainer = value
		case "Homepage":
			cur.Homepage = value
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parse dpkg status: %w", err)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

var idPattern = regexp.MustCompile(`^SPDXRef-[A-Za-z0-9.-]+$`)

// Validate checks the fields SPDX 2.3 requires of a document and of its
// packages and relationships, and that every identifier is well formed,
// unique, and refers to an element of the document.
func Validate(d Document) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if d.SPDXVersion != specVersion {
		bad("spdxVersion %q, want %q", d.SPDXVersion, specVersion)
	}
	if d.DataLicense != dataLicense {
		bad("dataLicense %q, want %q", d.DataLicense, dataLicense)
	}
	if d.SPDXID != documentID {
		bad("document SPDXID %q, want %q", d.SPDXID, documentID)
	}
	if d.Name == "" {
		bad("document name is empty")
	}
	if u, err := url.Parse(d.DocumentNamespace); err != nil || u.Scheme == "" || strings.Contains(d.DocumentNamespace, "#") {
		bad("documentNamespace %q is not a URI without a fragment", d.DocumentNamespace)
	}
	if _, err := time.Parse("2006-01-02T15:04:05Z", d.CreationInfo.Created); err != nil {
		bad("creationInfo.created %q is not YYYY-MM-DDThh:mm:ssZ", d.CreationInfo.Created)
	}
	if len(d.CreationInfo.Creators) == 0 {
		bad("creationInfo.creators is empty")
	}
	for _, c := range d.CreationInfo.Creators {
		if !strings.HasPrefix(c, "Tool: ") && !strings.HasPrefix(c, "Organization: ") && !strings.HasPrefix(c, "Person: ") {
			bad("creator %q is not Tool:, Organization: or Person:", c)
		}
	}
	ids := map[string]bool{documentID: true}
	for i, p := range d.Packages {
		if p.Name == "" {
			bad("package %d has no name", i)
		}
		if !idPattern.MatchString(p.SPDXID) {
			bad("package %q: SPDXID %q is not SPDXRef-[A-Za-z0-9.-]+", p.Name, p.SPDXID)
		}
		if ids[p.SPDXID] {
			bad("package %q: SPDXID %q is not unique", p.Name, p.SPDXID)
		}
		ids[p.SPDXID] = true
		if p.DownloadLocation == "" {
			bad("package %q has no downloadLocation", p.Name)
		}
		for _, r := range p.ExternalRefs {
			if r.Category == "" || r.Type == "" || r.Locator == "" {
				bad("package %q: an external reference lacks a category, type or locator", p.Name)
			}
			if r.Type == "purl" && !strings.HasPrefix(r.Locator, "pkg:") {
				bad("package %q: purl %q does not start with pkg:", p.Name, r.Locator)
			}
		}
	}
	for _, id := range d.DocumentDescribes {
		if !ids[id] || id == documentID {
			bad("documentDescribes names %q, no package of the document", id)
		}
	}
	describes := false
	for _, r := range d.Relationships {
		if !ids[r.Element] || !ids[r.Related] {
			bad("relationship %s %s %s names an element the document lacks", r.Element, r.Type, r.Related)
		}
		if r.Type == "" {
			bad("relationship %s -> %s has no type", r.Element, r.Related)
		}
		describes = describes || (r.Element == documentID && r.Type == "DESCRIBES")
	}
	if !describes && len(d.DocumentDescribes) == 0 {
		bad("the document DESCRIBES no package")
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid SPDX 2.3 document: %w", err)
	}
	return nil
}
