package agent

import (
	"runtime/debug"
	"testing"
)

// steadyGCPercent stands for the process's GOGC outside the first list.
const steadyGCPercent = 25

// TestListingGC: the first list runs at listGCPercent and the percentage
// before it comes back; a GOGC the operator set is left alone throughout.
func TestListingGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(steadyGCPercent))
	listed := listingGC(func(string) string { return "" })
	if got := debug.SetGCPercent(listGCPercent); got != listGCPercent {
		t.Errorf("while listing GOGC is %d, want %d", got, listGCPercent)
	}
	listed()
	if got := debug.SetGCPercent(steadyGCPercent); got != steadyGCPercent {
		t.Errorf("after the list GOGC is %d, want %d back", got, steadyGCPercent)
	}
	listed = listingGC(func(k string) string { return map[string]string{"GOGC": "80"}[k] })
	if got := debug.SetGCPercent(steadyGCPercent); got != steadyGCPercent {
		t.Errorf("with GOGC set the list changed the percentage to %d", got)
	}
	listed()
	if got := debug.SetGCPercent(steadyGCPercent); got != steadyGCPercent {
		t.Errorf("with GOGC set the end of the list changed the percentage to %d", got)
	}
}
