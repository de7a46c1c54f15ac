package main

import (
	"fmt"
	"strings"
)

// fleet is the number of nodes the fleet-wide columns multiply by.
const fleet = 5000

// heartbeat is the seconds between a kubelet's status reports when nothing
// changes (its nodeStatusReportFrequency, 5 minutes by default).
const heartbeat = 300

// table is the medians per N and transport, as Markdown.
func table(all []result, f runFlags) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Medians of %d runs per row; %d Nodes; %d EndpointSlice, %d Service and %d Node changes per run; conns: opened over the client's life / open while it watches. Bytes are TCP payload (TLS records) through the proxy.\n\n",
		f.runs, f.nodes, f.changes, f.changes, f.changes)
	b.WriteString("| N | transport | conns opened / held | first list ↓ MB | first list ↑ KB | list wall s | client CPU-s | client max RSS MB | server CPU-s | requests (LIST / WATCH open) | slice change ↓ B | slice change ↑ B | Service change ↓ B | Service change ↑ B | Node heartbeat ↓ B |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|\n")
	var fl strings.Builder
	fmt.Fprintf(&fl, "\nAt %d nodes (each row × %d): connections held, bytes and server CPU of a fleet-wide restart, bytes of one EndpointSlice change fanned out, and the Nodes' heartbeats fanned out (every Node's status every %d s, to every node's watch of all Nodes).\n\n", fleet, fleet, heartbeat)
	fl.WriteString("| N | transport | connections | restart GB ↓ | restart server CPU-s | one slice change MB ↓ | Node heartbeats MB/s ↓ |\n|---:|---|---:|---:|---:|---:|---:|\n")
	for _, n := range f.ns {
		for _, t := range transports {
			var rs []result
			for _, r := range all {
				if r.N == n && r.Transport == t.String() {
					rs = append(rs, r)
				}
			}
			if len(rs) == 0 {
				continue
			}
			m := func(g func(r result) float64) float64 {
				xs := make([]float64, len(rs))
				for i, r := range rs {
					xs[i] = g(r)
				}
				return median(xs)
			}
			conns := m(func(r result) float64 {
				return float64(r.List.Conns + r.Settled.Conns + r.Slice.Conns + r.Service.Conns + r.Node.Conns)
			})
			held := m(func(r result) float64 { return float64(r.Service.Open) })
			down := m(func(r result) float64 { return mb(r.List.Down) })
			cpu := m(func(r result) float64 { return r.ServerCPU })
			slice := m(func(r result) float64 { return per(r.Slice.Down, r.Changes) })
			node := m(func(r result) float64 { return per(r.Node.Down, r.Changes) })
			fmt.Fprintf(&b, "| %d | %s | %.0f / %.0f | %.2f | %.1f | %.2f | %.2f | %.0f | %.2f | %.0f / %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n",
				n, t, conns, held, down,
				m(func(r result) float64 { return float64(r.List.Up) / 1e3 }),
				m(func(r result) float64 { return r.Client.WallSeconds }),
				m(func(r result) float64 { return r.Client.CPUSeconds }),
				m(func(r result) float64 { return r.Client.MaxRSSMB }),
				cpu,
				m(func(r result) float64 { return r.Requests.List }),
				m(func(r result) float64 { return r.Requests.Watch }),
				slice,
				m(func(r result) float64 { return per(r.Slice.Up, r.Changes) }),
				m(func(r result) float64 { return per(r.Service.Down, r.Changes) }),
				m(func(r result) float64 { return per(r.Service.Up, r.Changes) }),
				node)
			fmt.Fprintf(&fl, "| %d | %s | %.0f | %.1f | %.0f | %.2f | %.0f |\n", n, t, held*fleet, down*fleet/1e3, cpu*fleet, slice*fleet/1e6,
				node*fleet/heartbeat*fleet/1e6)
		}
	}
	return b.String() + fl.String()
}
