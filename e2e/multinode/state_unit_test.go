package multinode

import (
	"strings"
	"testing"
)

func TestWithoutEmptyTables(t *testing.T) {
	in := strings.Split(`# Generated
*mangle
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
COMMIT
*filter
:INPUT ACCEPT [0:0]
-A INPUT -j ACCEPT
COMMIT`, "\n")
	got := strings.Join(withoutEmptyTables(in), "\n")
	want := `# Generated
*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
COMMIT
*filter
:INPUT ACCEPT [0:0]
-A INPUT -j ACCEPT
COMMIT`
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}
