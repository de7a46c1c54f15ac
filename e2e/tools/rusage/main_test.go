package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The test binary is its own child: RUSAGE_TEST_TOUCH_MIB=n makes it touch
// n MiB and exit; RUSAGE_TEST_EXIT=k makes it exit with k.
func TestMain(m *testing.M) {
	if s := os.Getenv("RUSAGE_TEST_TOUCH_MIB"); s != "" {
		n, _ := strconv.Atoi(s)
		buf := make([]byte, n<<20)
		for i := 0; i < len(buf); i += 4096 {
			buf[i] = 1
		}
		os.Exit(int(buf[len(buf)/2]) - 1)
	}
	if s := os.Getenv("RUSAGE_TEST_EXIT"); s != "" {
		k, _ := strconv.Atoi(s)
		os.Exit(k)
	}
	os.Exit(m.Run())
}

// usage runs the test binary under rusage with env set and returns the
// exit status and the usage file's keys.
func usage(t *testing.T, env string, extra ...string) (int, map[string]float64) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(strings.Split(env, "=")[0], strings.Split(env, "=")[1])
	out := filepath.Join(t.TempDir(), "usage.txt")
	var stderr bytes.Buffer
	code := run(append([]string{"-o", out, self}, extra...), nil, &bytes.Buffer{}, &stderr)
	text, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("no usage written (status %d, stderr %q): %v", code, stderr.String(), err)
	}
	keys := map[string]float64{}
	for _, line := range strings.Fields(string(text)) {
		k, v, _ := strings.Cut(line, "=")
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		keys[k] = f
	}
	return code, keys
}

// TestPeakResidentSizeInKiB: a child that touches 128 MiB reports a peak of
// at least that and well under twice it (busybox's time -v reports four
// times the peak on a 4 KiB page).
func TestPeakResidentSizeInKiB(t *testing.T) {
	const mib = 128
	code, keys := usage(t, "RUSAGE_TEST_TOUCH_MIB="+strconv.Itoa(mib))
	if code != 0 {
		t.Fatalf("status %d, want 0", code)
	}
	got := keys["maxrss_kb"]
	if got < mib<<10 || got > 2*mib<<10 {
		t.Fatalf("maxrss_kb = %.0f, want between %d and %d", got, mib<<10, 2*mib<<10)
	}
	for _, k := range []string{"wall_s", "user_s", "sys_s"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("no %s in %v", k, keys)
		}
	}
	if keys["wall_s"] <= 0 {
		t.Errorf("wall_s = %v, want above 0", keys["wall_s"])
	}
}

// TestExitStatusPassesThrough: the command's own status is rusage's, and
// the usage is still written.
func TestExitStatusPassesThrough(t *testing.T) {
	if code, _ := usage(t, "RUSAGE_TEST_EXIT=7"); code != 7 {
		t.Fatalf("status %d, want 7", code)
	}
}

// TestUsageErrors: no command is a usage error; a command that cannot be
// started is 127.
func TestUsageErrors(t *testing.T) {
	var stderr bytes.Buffer
	if code := run(nil, nil, &bytes.Buffer{}, &stderr); code != 2 {
		t.Errorf("no command: status %d, want 2", code)
	}
	if code := run([]string{filepath.Join(t.TempDir(), "missing")}, nil, &bytes.Buffer{}, &stderr); code != 127 {
		t.Errorf("missing command: status %d, want 127", code)
	}
}
