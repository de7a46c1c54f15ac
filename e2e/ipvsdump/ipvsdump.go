// Package ipvsdump reads `ipvsadm -Sn` listings into a table the end-to-end
// drivers (e2e/cluster, e2e/multinode) compare and print.
package ipvsdump

import (
	"fmt"
	"sort"
	"strings"
)

// Table is one `ipvsadm -Sn` listing: virtual server ("-t 10.96.1.10:80")
// to its real servers ("10.244.1.10:8080") and their weights.
type Table map[string]map[string]int

// Parse reads `ipvsadm -Sn` rules: "-A -t VIP:PORT -s rr" and
// "-a -t VIP:PORT -r RIP:PORT -m -w 1"; other lines are skipped.
func Parse(rules []string) Table {
	t := Table{}
	for _, r := range rules {
		f := strings.Fields(r)
		if len(f) < 3 || (f[0] != "-A" && f[0] != "-a") {
			continue
		}
		vs := f[1] + " " + f[2]
		if t[vs] == nil {
			t[vs] = map[string]int{}
		}
		if f[0] == "-A" {
			continue
		}
		real, weight := "", 0
		for i := 3; i+1 < len(f); i++ {
			switch f[i] {
			case "-r":
				real = f[i+1]
			case "-w":
				fmt.Sscan(f[i+1], &weight)
			}
		}
		t[vs][real] = weight
	}
	return t
}

// Reals is the sorted real servers of vs with a weight above zero.
func (t Table) Reals(vs string) []string {
	var out []string
	for r, w := range t[vs] {
		if w > 0 {
			out = append(out, r)
		}
	}
	sort.Strings(out)
	return out
}

// String prints the table sorted, one virtual server a line.
func (t Table) String() string {
	var lines []string
	for vs, reals := range t {
		var rs []string
		for r, w := range reals {
			rs = append(rs, fmt.Sprintf("%s w%d", r, w))
		}
		sort.Strings(rs)
		lines = append(lines, vs+" -> ["+strings.Join(rs, ", ")+"]")
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
