package multinode

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/kube-ipvs/kube-ipvs/e2e/ipvsdump"
)

// Table is one node's `ipvsadm -Sn` listing.
type Table = ipvsdump.Table

// scenario is one line group of the final report.
type scenario struct {
	name    string
	results []result
	tables  []string // what each node's table held
	notes   []string
}

// report collects the scenarios and prints them at the end, also when a
// phase failed (what ran is reported).
type report struct {
	mu        sync.Mutex
	scenarios []*scenario
}

func (r *report) add(s *scenario) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scenarios = append(r.scenarios, s)
}

func (r *report) print(w io.Writer, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(w, "\n==== cluster-e2e report (%d nodes, %.0f s in the VM) ====\n", nodeCount, took.Seconds())
	for _, s := range r.scenarios {
		fmt.Fprintf(w, "\n## %s\n", s.name)
		for _, res := range s.results {
			fmt.Fprintf(w, "  %-34s %-3s requests %5d  failures %3d  longest gap %6.2f s  backends %s\n",
				res.Name, res.Network, res.Requests, res.Failures, res.Longest.Seconds(), counts(res.Backends))
			if res.Failures > 0 {
				fmt.Fprintf(w, "      failures %s to %s by target: %s\n", res.FirstFail.Format("15:04:05.0"),
					res.LastFail.Format("15:04:05.0"), counts(res.FailedAt))
			}
			for _, e := range res.Errors {
				fmt.Fprintf(w, "      error: %s\n", e)
			}
		}
		for _, tb := range s.tables {
			fmt.Fprintf(w, "  table  %s\n", tb)
		}
		for _, n := range s.notes {
			fmt.Fprintf(w, "  note   %s\n", n)
		}
	}
	fmt.Fprintln(w, "==== end of report ====")
}

// counts prints a name->count map sorted: "web-1=3 web-2=4".
func counts(m map[string]int) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
