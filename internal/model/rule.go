package model

import (
	"fmt"
	"strings"
)

// ServiceRule is the part of an ipvsadm rule that configures a virtual
// service: everything after the service's name, in the order `ipvsadm -S`
// prints it,
//
//	-s SCHED [-p TIMEOUT [-M MASK]] [--pe ENGINE] [-o] [-b FLAGS]
//
// It is the one renderer of that syntax: VirtualServer.String (dry-run and
// operation lines, dumps, goldens) and ipvsadm's -S output both print it, so
// they cannot disagree. Mask and PE are what only a kernel dump knows (the
// agent sets neither); empty leaves them out.
type ServiceRule struct {
	Scheduler Scheduler
	Flags     Flags
	Timeout   uint32 // printed only with FlagPersistent
	Mask      string // a non-default persistence netmask, as ipvsadm prints it
	PE        string // persistence engine
}

func (r ServiceRule) String() string {
	var b strings.Builder
	b.WriteString("-s " + string(r.Scheduler))
	if r.Flags&FlagPersistent != 0 {
		fmt.Fprintf(&b, " -p %d", r.Timeout)
		if r.Mask != "" {
			b.WriteString(" -M " + r.Mask)
		}
	}
	if r.PE != "" {
		b.WriteString(" --pe " + r.PE)
	}
	if r.Flags&FlagOnePacket != 0 {
		b.WriteString(" -o")
	}
	// Any scheduler bit prints -b, even one the scheduler has no name for
	// (ipvsadm's test is on the bits, not the names).
	if r.Flags&(FlagSchedSH1|FlagSchedSH2|FlagSched3) != 0 {
		b.WriteString(" -b " + r.Flags.SchedNames(r.Scheduler))
	}
	return b.String()
}

// SchedNames names the scheduler flags set in f the way ipvsadm does for
// scheduler sched (its -b option, and the "(...)" of its listing): sh and mh
// name the two bits they read after themselves, any other scheduler gets
// flag-1, flag-2 and flag-3.
func (f Flags) SchedNames(sched Scheduler) string {
	var names []string
	add := func(flag Flags, name string) {
		if f&flag != 0 {
			names = append(names, name)
		}
	}
	if sched.HashFlags() {
		add(FlagSchedSH1, string(sched)+"-fallback")
		add(FlagSchedSH2, string(sched)+"-port")
	} else {
		add(FlagSchedSH1, "flag-1")
		add(FlagSchedSH2, "flag-2")
		add(FlagSched3, "flag-3")
	}
	return strings.Join(names, ",")
}

// RealRule is the part of an ipvsadm rule that configures a real server,
// after its virtual service's name: "-r ADDR FWD -w WEIGHT". RealServer.String
// and ipvsadm's -S output both print it (ipvsadm adds tunnel options).
type RealRule struct {
	Addr    string // as the rule names it: "10.0.0.1:80", "[fd00::1]:53", or by name
	Forward Forwarding
	Weight  int
}

func (r RealRule) String() string {
	return fmt.Sprintf("-r %s %s -w %d", r.Addr, r.Forward.Flag(), r.Weight)
}
