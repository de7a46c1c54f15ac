package agent

import (
	"strings"
	"testing"
)

// "--dry-run-table -" reads the table from stdin, so that one node's table
// can be piped into a preview elsewhere (ssh node kube-ipvs ipvsadm -Sn |
// kube-ipvs agent --dry-run --dry-run-table -).
func TestDryRunTableFromStdin(t *testing.T) {
	st, err := readSavedTable("-", strings.NewReader("-A -t 10.96.0.1:443 -s rr\n-a -t 10.96.0.1:443 -r 192.168.122.10:6443 -m -w 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.Dump(), "-A -t 10.96.0.1:443 -s rr\n  -a -t 10.96.0.1:443 -r 192.168.122.10:6443 -m -w 1\n"; got != want {
		t.Errorf("read\n%s\nwant\n%s", got, want)
	}
}
