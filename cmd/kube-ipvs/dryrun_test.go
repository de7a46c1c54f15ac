package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// agentDryRun runs `kube-ipvs agent --dry-run` on the examples folder, as
// node-a, with more flags, and returns its exit code and what it printed
// (the ipset lines dropped unless keepSets).
func agentDryRun(t *testing.T, keepSets bool, flags ...string) (int, string, string) {
	t.Helper()
	args := append([]string{"kube-ipvs", "agent", "--manifests", "../../examples", "--hostname-override", "node-a"}, flags...)
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	var lines []string
	for _, l := range strings.SplitAfter(out.String(), "\n") {
		if keepSets || !strings.HasPrefix(l, "ipset ") {
			lines = append(lines, l)
		}
	}
	return code, strings.Join(lines, ""), errb.String()
}

// --dry-run plans on a machine without IPVS, or without root, against an
// empty kernel: a config and manifests are checked in CI or on a laptop.
// The machine the unit tests run on has no IPVS.
func TestDryRunWithoutIPVS(t *testing.T) {
	code, out, stderr := agentDryRun(t, true, "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, stderr)
	}
	for _, want := range []string{
		"-A -t 10.96.0.100:80 -s rr\n",
		"-a -t 10.96.0.100:80 -r 10.244.1.2:8080 -m -w 1\n",
		"-A -t 10.96.0.40:443 -s sh -p 600\n",
		"-A -t [fd00:96::30]:80 -s rr\n",
		"ipset add KUBE-IPVS-FRONTENDS 10.96.0.100,tcp:80\n",
		"ip route add local 10.96.0.100/32 table local\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the plan lacks %q:\n%s", want, out)
		}
	}
}

// The plan prints a bind as the binding makes it: a local route by
// default, an address with --vip-binding=address.
func TestDryRunPrintsTheBinding(t *testing.T) {
	for _, tc := range []struct {
		flags     []string
		want, not string
	}{
		{nil, "ip route add local 10.96.0.100/32 table local\n", "ip addr add"},
		{[]string{"--vip-binding", "address"}, "ip addr add 10.96.0.100/32\n", "ip route add"},
	} {
		code, out, stderr := agentDryRun(t, false, append([]string{"--dry-run"}, tc.flags...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d, want 0\n%s", tc.flags, code, stderr)
		}
		if !strings.Contains(out, tc.want) || strings.Contains(out, tc.not) {
			t.Errorf("%v: the plan should hold %q and no %q:\n%s", tc.flags, tc.want, tc.not, out)
		}
	}
}

// --dry-run-table plans against a table saved with ipvsadm -Sn: what is
// there already is not planned again, what differs is, and what the
// Services no longer ask for goes, with its address.
func TestDryRunAgainstSavedTable(t *testing.T) {
	table := `-A -u 10.96.0.10:53 -s rr
-a -u 10.96.0.10:53 -r 10.244.1.3:53 -m -w 1
-a -u 10.96.0.10:53 -r 10.244.2.3:53 -m -w 1
-A -t 10.96.0.30:80 -s rr
-a -t 10.96.0.30:80 -r 10.244.1.4:8080 -m -w 1
-a -t 10.96.0.30:80 -r 10.244.9.9:8080 -m -w 1
-A -t 10.96.0.40:443 -s rr
-a -t 10.96.0.40:443 -r 10.244.1.5:8443 -m -w 1
-a -t 10.96.0.40:443 -r 10.244.2.5:8443 -m -w 1
-a -t 10.96.0.40:443 -r 10.244.3.5:8443 -m -w 1
-A -t 10.96.0.100:80 -s rr
-a -t 10.96.0.100:80 -r 10.244.1.2:8080 -m -w 1
-a -t 10.96.0.100:80 -r 10.244.2.2:8080 -m -w 1
-a -t 10.96.0.100:80 -r 10.244.3.2:8080 -m -w 1
-A -t [fd00:96::30]:80 -s rr
-a -t [fd00:96::30]:80 -r [fd00:244:1::4]:8080 -m -w 1
-a -t [fd00:96::30]:80 -r [fd00:244:2::4]:8080 -m -w 1
-A -t 10.96.0.77:80 -s rr
-a -t 10.96.0.77:80 -r 10.244.7.7:80 -m -w 1
-A -t 192.0.2.1:8080 -s rr
`
	file := filepath.Join(t.TempDir(), "table")
	if err := os.WriteFile(file, []byte(table), 0o600); err != nil {
		t.Fatal(err)
	}
	// A saved table names no address of the link: every address with a
	// port outside the NodePort range is taken for a VIP. Someone else's
	// virtual server, 192.0.2.1:8080, is kept as on the node: by
	// ipvs.excludeCIDRs, kube-proxy's guard.
	code, out, stderr := agentDryRun(t, false, "--dry-run", "--dry-run-table", file, "--ipvs-exclude-cidrs", "192.0.2.0/24")
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, stderr)
	}
	want := `-E -t 10.96.0.40:443 -s sh -p 600
-a -t 10.96.0.30:80 -r 10.244.2.4:8080 -m -w 1
-d -t 10.96.0.30:80 -r 10.244.9.9:8080
-D -t 10.96.0.77:80
ip route del local 10.96.0.77/32 table local
`
	if out != want {
		t.Errorf("plan\n%s\nwant\n%s", out, want)
	}
}

// A table that cannot be read stops the dry run with the line at fault;
// --dry-run-table alone is a mistake, not a run of the agent.
func TestDryRunTableRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "table")
	if err := os.WriteFile(file, []byte("-A -t 10.96.0.1:443 -s rr\n-a -t 10.96.0.1:443 -r kubernetes:https -m -w 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := agentDryRun(t, false, "--dry-run-table", file); code != 2 || !strings.Contains(stderr, "give --dry-run too") {
		t.Errorf("--dry-run-table alone: exit %d, want 2\n%s", code, stderr)
	}
	code, out, _ := agentDryRun(t, false, "--dry-run", "--dry-run-table", file)
	if code != 1 || out != "" {
		t.Errorf("a table with names: exit %d, want 1, and no plan; printed\n%s", code, out)
	}
}
