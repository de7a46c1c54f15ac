package e2e

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// table is `ipvsadm -Ln` parsed: virtual servers by "PROTO ADDR:PORT".
type table map[string]*virtualServer

type virtualServer struct {
	key   string
	sched string
	flags string // the rest of the service line: "persistent 5", flags...
	line  string // the service line as printed
	reals map[string]realServer
}

type realServer struct {
	addr             string
	forward          string
	weight           int
	active, inactive int
}

// parseTable reads ipvsadm -Ln output.
func parseTable(out string) (table, error) {
	tab := table{}
	var cur *virtualServer
	for n, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0, strings.HasPrefix(line, "IP Virtual Server"), strings.HasPrefix(line, "Prot "),
			strings.HasPrefix(strings.TrimSpace(line), "-> RemoteAddress"):
			continue
		case f[0] == "TCP" || f[0] == "UDP" || f[0] == "SCTP" || f[0] == "FWM":
			if len(f) < 3 {
				return nil, fmt.Errorf("line %d: short service line %q", n+1, line)
			}
			cur = &virtualServer{key: f[0] + " " + f[1], sched: f[2], flags: strings.Join(f[3:], " "),
				line: strings.Join(f, " "), reals: map[string]realServer{}}
			tab[cur.key] = cur
		case f[0] == "->":
			if cur == nil || len(f) < 6 {
				return nil, fmt.Errorf("line %d: real server line %q out of place", n+1, line)
			}
			var nums [3]int
			for i := range nums {
				v, err := strconv.Atoi(f[3+i])
				if err != nil {
					return nil, fmt.Errorf("line %d: %q: %w", n+1, line, err)
				}
				nums[i] = v
			}
			cur.reals[f[1]] = realServer{addr: f[1], forward: f[2], weight: nums[0], active: nums[1], inactive: nums[2]}
		default:
			return nil, fmt.Errorf("line %d: unexpected %q", n+1, line)
		}
	}
	return tab, nil
}

func readTable() (table, error) {
	out, err := run("ipvsadm", "-Ln")
	if err != nil {
		return nil, err
	}
	return parseTable(out)
}

// weights renders a virtual server's real servers as "addr=weight ..." for
// messages; "absent" when it is not in the table.
func (t table) weights(key string) string {
	vs, ok := t[key]
	if !ok {
		return "absent"
	}
	var parts []string
	for a, r := range vs.reals {
		parts = append(parts, fmt.Sprintf("%s=%d(%d/%d)", a, r.weight, r.active, r.inactive))
	}
	sort.Strings(parts)
	return vs.line + ": " + strings.Join(parts, " ")
}

// want says what a virtual server must hold: real server -> weight.
type want map[string]int

// matches tells whether key exists with exactly the wanted real servers
// and weights.
func (t table) matches(key string, w want) bool {
	vs, ok := t[key]
	if !ok || len(vs.reals) != len(w) {
		return false
	}
	for a, wt := range w {
		if r, ok := vs.reals[a]; !ok || r.weight != wt {
			return false
		}
	}
	return true
}

// holds tells whether key exists with the wanted real servers and weights,
// any other real server being at weight 0 (draining).
func (t table) holds(key string, w want) bool {
	vs, ok := t[key]
	if !ok {
		return false
	}
	for a, r := range vs.reals {
		if wt, ok := w[a]; ok && r.weight != wt || !ok && r.weight != 0 {
			return false
		}
	}
	for a := range w {
		if _, ok := vs.reals[a]; !ok {
			return false
		}
	}
	return true
}

// waitTable waits until cond holds on the kernel table and returns how long
// it took; it fails the test on timeout.
func waitTable(t *testing.T, what string, cond func(table) bool, key string) time.Duration {
	t.Helper()
	took, err := waitFor(settle, func() (bool, string) {
		tab, err := readTable()
		if err != nil {
			return false, err.Error()
		}
		return cond(tab), tab.weights(key)
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	return took
}

// waitReals waits until the virtual server holds exactly w.
func waitReals(t *testing.T, svc service, w want) time.Duration {
	t.Helper()
	return waitTable(t, fmt.Sprintf("%s to hold %v", svc.vs(), w),
		func(tab table) bool { return tab.matches(svc.vs(), w) }, svc.vs())
}

// saveTable is `ipvsadm -Sn`: the rules without counters, for before/after
// comparisons. Lines are sorted: the kernel lists services in hash order.
func saveTable(t *testing.T) []string {
	t.Helper()
	out, err := run("ipvsadm", "-Sn")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	sort.Strings(lines)
	return lines
}

func TestParseTable(t *testing.T) {
	out := `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.96.0.40:443 sh persistent 600
  -> 10.244.1.5:8443              Masq    1      0          0
  -> 10.244.2.5:8443              Masq    0      3          12
UDP  10.96.0.10:53 rr
`
	tab, err := parseTable(out)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key   string
		sched string
		flags string
		want  want
	}{
		{"TCP 10.96.0.40:443", "sh", "persistent 600", want{"10.244.1.5:8443": 1, "10.244.2.5:8443": 0}},
		{"UDP 10.96.0.10:53", "rr", "", want{}},
	}
	if len(tab) != len(tests) {
		t.Fatalf("parsed %d virtual servers, want %d", len(tab), len(tests))
	}
	for _, tc := range tests {
		vs := tab[tc.key]
		if vs == nil || vs.sched != tc.sched || vs.flags != tc.flags || !tab.matches(tc.key, tc.want) {
			t.Errorf("%s: got %s, want sched %s flags %q reals %v", tc.key, tab.weights(tc.key), tc.sched, tc.flags, tc.want)
		}
	}
	if r := tab["TCP 10.96.0.40:443"].reals["10.244.2.5:8443"]; r.active != 3 || r.inactive != 12 {
		t.Errorf("counters: got %d/%d, want 3/12", r.active, r.inactive)
	}
	if !tab.holds("TCP 10.96.0.40:443", want{"10.244.1.5:8443": 1}) {
		t.Error("holds: a weight-0 extra real server should be allowed")
	}
	if tab.holds("TCP 10.96.0.40:443", want{"10.244.2.5:8443": 0}) {
		t.Error("holds: an extra real server at weight 1 should not be allowed")
	}
	if _, err := parseTable("  -> 10.244.1.5:8443 Masq 1 0 0\n"); err == nil {
		t.Error("a real server line before any service parsed without error")
	}
}
