package agent

import "runtime/debug"

// listGCPercent is the GOGC while the source makes its first list. The heap
// then grows from nothing to the informers' objects, and at the agent's
// steady GOGC the collector would run dozens of times on the way, a large
// share of the CPU of a listing that is what a fresh node waits for. The
// heap's peak comes later, when the first sync holds the table beside
// those objects: twice the listed objects stays below it.
const listGCPercent = 100

// listingGC sets listGCPercent unless GOGC is set, and returns what puts
// the previous percentage back once the source has listed.
func listingGC(getenv func(string) string) (listed func()) {
	if getenv("GOGC") != "" {
		return func() {}
	}
	prev := debug.SetGCPercent(listGCPercent)
	return func() { debug.SetGCPercent(prev) }
}
