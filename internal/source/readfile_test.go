package source

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// scanWithin runs one watch-loop scan and fails the test, instead of
// hanging it, when the scan does not return in time (a FIFO opened for
// reading blocks until a writer comes).
func (f *fixture) scanWithin(t *testing.T, full bool) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		f.m.mu.Lock()
		defer f.m.mu.Unlock()
		_, err := f.m.scanLocked(full)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("scan blocked")
	}
}

// TestManifestsOnlyRegularFiles: a FIFO, a device and an oversized file
// named like manifests are reported by name and keep the last good content
// (reported once, not on every rescan); a symlink to a regular file is read.
func TestManifestsOnlyRegularFiles(t *testing.T) {
	const good = "default/web 10.96.0.100 http:80/TCP->8080 [web-1 10.244.1.2,10.244.2.2]\nnode none"
	tests := []struct {
		name    string
		replace func(t *testing.T, path string)
		problem string
	}{
		{"FIFO", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatalf("make the FIFO the case is about: %v", err)
			}
		}, "read: not a regular file (a FIFO)"},
		{"symlink to /dev/zero", func(t *testing.T, path string) {
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
		}, "read: not a regular file (a character device)"},
		{"over the size cap", func(t *testing.T, path string) {
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(MaxManifestBytes + 1); err != nil { // sparse: costs no disk
				t.Fatal(err)
			}
		}, "read: 8388609 bytes, over the 8388608 a manifest file may have"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, "")
			f.write(t, "web.yaml", webYAML)
			f.scanWithin(t, true)
			path := filepath.Join(f.dir, "web.yaml")
			f.remove(t, "web.yaml")
			tt.replace(t, path)
			f.problems = nil
			for range 3 {
				f.scanWithin(t, false)
			}
			if got := dumpStore(f.store, "default/web"); got != good {
				t.Errorf("store:\n%s\nwant the last good content:\n%s", got, good)
			}
			checkProblems(t, f.problems, []string{"web.yaml: " + tt.problem})

			// A fresh start reads the folder whole: the file is reported
			// again and contributes nothing.
			fresh := newFixture(t, "")
			fresh.dir, fresh.m.Dir = f.dir, f.dir
			fresh.scanWithin(t, true)
			if got := dumpStore(fresh.store, "default/web"); got != "default/web no-service\nnode none" {
				t.Errorf("fresh store:\n%s", got)
			}
			if len(fresh.problems) != 1 || !strings.Contains(fresh.problems[0], tt.problem) {
				t.Errorf("fresh problems %q", fresh.problems)
			}
		})
	}
}

func TestManifestsSymlinkToRegularFile(t *testing.T) {
	f := newFixture(t, "")
	target := filepath.Join(t.TempDir(), "web.yaml")
	if err := os.WriteFile(target, []byte(webYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(f.dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	f.scanWithin(t, true)
	if got := dumpStore(f.store, "default/web"); !strings.HasPrefix(got, "default/web 10.96.0.100") || len(f.problems) > 0 {
		t.Errorf("store:\n%s\nproblems %q", got, f.problems)
	}
}

func TestReadManifestAtTheCap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, []byte(strings.Repeat("#", MaxManifestBytes)), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := readManifest(path); err != nil || len(data) != MaxManifestBytes {
		t.Fatalf("%d bytes, %v", len(data), err)
	}
}
