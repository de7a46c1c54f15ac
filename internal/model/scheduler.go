package model

import (
	"fmt"
	"slices"
	"strings"
)

// Scheduler is an IPVS scheduler, named as ipvsadm's -s takes it and as the
// kernel module ip_vs_<name> provides it.
type Scheduler string

// The schedulers whose name carries behaviour besides the kernel's choice:
// the default, and the two whose flags the kernel shares (see
// FlagSchedSH1/FlagSchedSH2).
const (
	SchedRR Scheduler = "rr"
	SchedSH Scheduler = "sh"
	SchedMH Scheduler = "mh"
)

// schedulers are the IPVS schedulers a mainline kernel ships (ip_vs_*.ko).
var schedulers = []Scheduler{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "mh", "fo", "ovf", "twos"}

// SchedulerList is the schedulers as one space-separated line, for help
// texts and errors.
func SchedulerList() string {
	names := make([]string, len(schedulers))
	for i, s := range schedulers {
		names[i] = string(s)
	}
	return strings.Join(names, " ")
}

// Valid tells whether s is a kernel IPVS scheduler.
func (s Scheduler) Valid() bool { return slices.Contains(schedulers, s) }

// Validate explains why s is not a kernel IPVS scheduler, nil if it is.
func (s Scheduler) Validate() error {
	if s.Valid() {
		return nil
	}
	return fmt.Errorf("unknown scheduler %q (want one of %s)", string(s), SchedulerList())
}

// HashFlags tells whether the scheduler takes the two hashing flags (ipvsadm
// -b <sched>-fallback, <sched>-port): sh and mh only.
func (s Scheduler) HashFlags() bool { return s == SchedSH || s == SchedMH }
