package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/sbom"
)

// TestRun: the test binary's own build information and a dpkg status file
// make a document that reads back and validates, reproducibly dated.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	status := filepath.Join(dir, "status")
	if err := os.WriteFile(status, []byte("Package: iptables\nStatus: install ok installed\nVersion: 1.8.11-2\nArchitecture: amd64\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1767225600")
	out := filepath.Join(dir, "sbom.spdx.json")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-version", "v1.2.3", "-image", "kube-ipvs:v1.2.3", "-platform", "linux/amd64=" + self + "," + status, "-o", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var doc sbom.Document
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if err := sbom.Validate(doc); err != nil {
		t.Fatal(err)
	}
	if doc.CreationInfo.Created != "2026-01-01T00:00:00Z" {
		t.Errorf("created %q, want SOURCE_DATE_EPOCH's 2026-01-01T00:00:00Z", doc.CreationInfo.Created)
	}
	var stdlib, deb bool
	for _, p := range doc.Packages {
		stdlib = stdlib || p.Name == "stdlib"
		deb = deb || (p.Name == "iptables" && p.VersionInfo == "1.8.11-2")
	}
	if !stdlib || !deb {
		t.Errorf("the document lacks the Go standard library (%v) or the Debian package (%v):\n%s", stdlib, deb, raw)
	}
}

func TestRunUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-version", "v1", "-image", "x"},
		{"-version", "v1", "-image", "x", "-platform", "linux/amd64"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code == 0 || !strings.Contains(stderr.String(), "-platform") {
			t.Errorf("%q: exit %d, stderr %q", args, code, stderr.String())
		}
	}
}
