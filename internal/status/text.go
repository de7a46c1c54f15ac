package status

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// Text renders the report for people: one block per virtual server, in
// ipvsadm's order and notation, annotated.
func (r Report) Text(now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s; last sync %s\n", r.Node, r.LastSync.text(now))
	vips := make([]string, len(r.VIPs))
	for i, v := range r.VIPs {
		vips[i] = v.String()
	}
	fmt.Fprintf(&b, "VIPs on kube-ipvs0: %s\n", orNone(strings.Join(vips, " ")))
	for _, vs := range r.VirtualServers {
		b.WriteString("\n" + vs.text() + "\n")
		for _, rs := range vs.Reals {
			b.WriteString("  " + rs.text(now) + "\n")
		}
	}
	return b.String()
}

func (s Sync) text(now time.Time) string {
	if s.Time.IsZero() {
		return "not yet"
	}
	kind := "incremental"
	if s.Full {
		kind = "full"
	}
	res := "ok"
	if s.Error != "" {
		res = "FAILED: " + s.Error
	}
	return fmt.Sprintf("%s ago (%s, %d ops, %d failed, %d draining, took %s): %s",
		ago(now, s.Time), kind, s.Ops, s.Failed, s.Draining, time.Duration(s.Seconds*float64(time.Second)).Round(time.Microsecond), res)
}

func (vs VirtualServer) text() string {
	line := fmt.Sprintf("%s %s", vs.Key, vs.Scheduler)
	if vs.SchedulerFrom != "" {
		line += " (" + vs.SchedulerFrom + ")"
	}
	if vs.Persistent > 0 {
		line += fmt.Sprintf(" persistent %d", vs.Persistent)
	}
	switch {
	case vs.Service != "":
		line += fmt.Sprintf("  %s port %s (%s)", vs.Service, orNone(vs.Port), vs.Kind)
	case !vs.Wanted:
		line += "  not ours"
	}
	if vs.Wanted && !vs.InKernel {
		line += "  NOT IN KERNEL"
	}
	return line
}

func (r Real) text(now time.Time) string {
	w := "-"
	if r.Weight >= 0 {
		w = fmt.Sprint(r.Weight)
	}
	line := fmt.Sprintf("-> %-28s w %-3s %s", r.Addr, w, r.State)
	if r.DrainingSince != nil {
		line += " for " + ago(now, *r.DrainingSince)
	}
	if r.Pod != "" {
		line += "  pod " + r.Pod
	}
	if r.Node != "" {
		line += " on " + r.Node
	}
	return line
}

func ago(now, t time.Time) string { return now.Sub(t).Round(time.Second).String() }

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// Wide renders the report as one table, a row per real server (a virtual
// server without any has one row of its own), every column status knows,
// as kubectl's -o wide lists more than its default.
func (r Report) Wide(now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s; last sync %s\n", r.Node, r.LastSync.text(now))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VIRTUAL SERVER\tSCHEDULER\tSERVICE\tPORT\tKIND\tIN KERNEL\tREAL SERVER\tWEIGHT\tSTATE\tPOD\tNODE")
	for _, vs := range r.VirtualServers {
		sched := vs.Scheduler
		if vs.Persistent > 0 {
			sched += fmt.Sprintf(" -p %d", vs.Persistent)
		}
		head := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", vs.Key, sched, orDash(vs.Service), orDash(vs.Port), orDash(vs.Kind), inKernel(vs))
		if len(vs.Reals) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\n", head)
		}
		for _, rs := range vs.Reals {
			w := "-"
			if rs.Weight >= 0 {
				w = fmt.Sprint(rs.Weight)
			}
			state := string(rs.State)
			if rs.DrainingSince != nil {
				state += " " + ago(now, *rs.DrainingSince)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", head, rs.Addr, w, state, orDash(rs.Pod), orDash(rs.Node))
		}
	}
	_ = tw.Flush()
	return b.String()
}

// inKernel is the IN KERNEL column: yes, no (wanted, not programmed), or
// foreign (the kernel's, not wanted).
func inKernel(vs VirtualServer) string {
	switch {
	case !vs.Wanted:
		return "foreign"
	case vs.InKernel:
		return "yes"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
