// Command kube-ipvs-sbom writes a release's SBOM, an SPDX 2.3 JSON document:
// the agent binary of each platform with the Go modules its build
// information lists, and the Debian packages of that platform's root file
// system, read from its dpkg status file. `make release` runs it.
//
//	kube-ipvs-sbom -version v1.2.3 -image kube-ipvs:v1.2.3 \
//	  -platform linux/amd64=BINARY,DPKG_STATUS -platform linux/arm64=... -o sbom.spdx.json
package main

import (
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/sbom"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type platformFlags []string

func (p *platformFlags) String() string     { return strings.Join(*p, " ") }
func (p *platformFlags) Set(v string) error { *p = append(*p, v); return nil }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kube-ipvs-sbom", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		platforms platformFlags
		in        = sbom.Input{Name: "kube-ipvs", Tool: "kube-ipvs-sbom"}
		out       string
	)
	fs.StringVar(&in.Version, "version", "", "the release's version (required)")
	fs.StringVar(&in.Image, "image", "", "the image reference the release's manifests name (required)")
	fs.StringVar(&in.License, "license", "Apache-2.0", "the project's SPDX license expression")
	fs.StringVar(&in.Suite, "suite", "trixie", "the Debian release of the image's packages")
	fs.Var(&platforms, "platform", "OS/ARCH=BINARY,DPKG_STATUS: a platform's agent and the dpkg status file of its root file system (repeat)")
	fs.StringVar(&out, "o", "-", "where to write the document (- for stdout)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if in.Version == "" || in.Image == "" || len(platforms) == 0 || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "kube-ipvs-sbom: -version, -image and at least one -platform are required")
		return 2
	}
	created, err := sourceDate(os.Getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		fmt.Fprintln(stderr, "kube-ipvs-sbom:", err)
		return 2
	}
	in.Created = created
	for _, p := range platforms {
		platform, err := readPlatform(p)
		if err != nil {
			fmt.Fprintln(stderr, "kube-ipvs-sbom:", err)
			return 1
		}
		in.Platform = append(in.Platform, platform)
	}
	doc, err := sbom.Build(in)
	if err != nil {
		fmt.Fprintln(stderr, "kube-ipvs-sbom:", err)
		return 1
	}
	if err := write(out, doc, stdout); err != nil {
		fmt.Fprintln(stderr, "kube-ipvs-sbom:", err)
		return 1
	}
	return 0
}

// sourceDate is the reproducible build's time, or now without one.
func sourceDate(epoch string) (time.Time, error) {
	if epoch == "" {
		return time.Now().UTC(), nil
	}
	s, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", epoch, err)
	}
	return time.Unix(s, 0).UTC(), nil
}

// readPlatform reads "OS/ARCH=BINARY,DPKG_STATUS".
func readPlatform(spec string) (sbom.Platform, error) {
	platform, files, ok := strings.Cut(spec, "=")
	binary, status, ok2 := strings.Cut(files, ",")
	if !ok || !ok2 || platform == "" || binary == "" || status == "" {
		return sbom.Platform{}, fmt.Errorf("-platform %q: want OS/ARCH=BINARY,DPKG_STATUS", spec)
	}
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return sbom.Platform{}, fmt.Errorf("read the build information of %s: %w", binary, err)
	}
	text, err := os.ReadFile(status)
	if err != nil {
		return sbom.Platform{}, fmt.Errorf("read the dpkg status of %s: %w", platform, err)
	}
	pkgs, err := sbom.ParseDpkgStatus(string(text))
	if err != nil {
		return sbom.Platform{}, fmt.Errorf("%s: %w", status, err)
	}
	if len(pkgs) == 0 {
		return sbom.Platform{}, fmt.Errorf("%s lists no packages", status)
	}
	return sbom.Platform{Binary: sbom.Binary{Platform: platform, Info: info}, Packages: pkgs}, nil
}

func write(path string, doc sbom.Document, stdout io.Writer) (err error) {
	w := stdout
	if path != "-" {
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("write SBOM: %w", err)
		}
		defer func() { err = errors.Join(err, f.Close()) }()
		w = f
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("write SBOM: %w", err)
	}
	return nil
}
