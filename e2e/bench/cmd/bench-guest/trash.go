package main

import (
	"fmt"
	"time"
)

// IPVS keeps a deleted real server in a list of its own for two to four
// minutes (a timer every minute frees those idle for two; longer while a
// connection still refers to one) and walks that whole list for every real
// server added. A tool started right after another's table was cleared
// would pay, on each of its adds, a walk of every real server the one
// before it had: at 50,000 real servers, a start a minute slower. So each
// IPVS tool starts trashSettle after the last IPVS tool stopped.
const trashSettle = 240 * time.Second

// ipvsStopped is when the last IPVS tool stopped and its table was
// cleared (zero: none yet on this boot).
var ipvsStopped time.Time

// settleTrash waits until trashSettle has passed since the last IPVS tool
// stopped, saying so when it waits.
func settleTrash(name string) {
	if ipvsStopped.IsZero() {
		return
	}
	wait := time.Until(ipvsStopped.Add(trashSettle))
	if wait <= 0 {
		return
	}
	fmt.Printf("bench-guest: %s: waiting %s for IPVS's list of deleted real servers to empty\n", name, wait.Round(time.Second))
	time.Sleep(wait)
}
