// Command bench-report turns the JSON runs of one `make bench` into the
// section appended to docs/benchmarks.md and its PNG plot.
//
//	bench-report --png DOCDIR/benchmarks/RUN.png --png-ref benchmarks/RUN.png --wall 1234s results-*.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/report"
	"github.com/kube-ipvs/kube-ipvs/e2e/bench/result"
)

func main() {
	png := flag.String("png", "", "write the plot here")
	ref := flag.String("png-ref", "", "the plot's path as the doc links it")
	wall := flag.Duration("wall", 0, "the whole run's wall time")
	flag.Parse()
	var runs []result.Run
	for _, path := range flag.Args() {
		data, err := os.ReadFile(path)
		if err != nil {
			fail(err)
		}
		var r result.Run
		if err := json.Unmarshal(data, &r); err != nil {
			fail(fmt.Errorf("%s: %w", path, err))
		}
		runs = append(runs, r)
	}
	if len(runs) == 0 {
		fail(fmt.Errorf("no runs given"))
	}
	if *png != "" {
		if err := report.Plot(runs, *png); err != nil {
			fail(err)
		}
	}
	fmt.Print(report.Section(runs, *ref, *wall))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-report:", err)
	os.Exit(1)
}
