//go:build linux

package linux

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ti-mo/conntrack"
	"github.com/vishvananda/netns"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// The removed UDP real servers of BenchmarkClearConntrack, and the entries
// NATed to them: five each, what one sync's cleanup must delete.
const (
	benchReals    = 200
	benchStale    = 5 * benchReals
	benchVIP      = "10.96.0.10"
	benchTimeout  = 3600 // seconds: no entry expires during a run
	benchCallTime = 10 * time.Minute
)

// BenchmarkClearConntrack times one ClearConntrack of the UDP entries of
// 200 removed real servers in a large conntrack table, filled over netlink
// in a network namespace of its own. It runs as root only, and needs
// nf_conntrack_max above the table's size (scripts/conntrack-bench-vm.sh
// raises it in the VM). Sizes come from the environment:
//
//	KUBE_IPVS_CT_ENTRIES  entries in the table (default 200000)
//	KUBE_IPVS_CT_UDP      of which UDP (default half); 1000 of those are NATed
//	                      to the removed real servers, and 1000 of the TCP
//	                      ones too (they stay: the cleanup is of UDP)
//
// Run it with
//
//	go test -run '^$' -bench ClearConntrack -benchtime 1x -benchmem ./internal/dataplane/linux
//
// Each iteration is one clear (timed), then a check that it deleted exactly
// the stale entries and nothing else, then their re-creation (untimed).
func BenchmarkClearConntrack(b *testing.B) {
	entries, err := envSize("KUBE_IPVS_CT_ENTRIES", 200000)
	if err != nil {
		b.Fatal(err)
	}
	udp, err := envSize("KUBE_IPVS_CT_UDP", entries/2)
	if err != nil {
		b.Fatal(err)
	}
	if udp < benchStale || udp > entries {
		b.Fatalf("KUBE_IPVS_CT_UDP=%d: want between %d and KUBE_IPVS_CT_ENTRIES=%d", udp, benchStale, entries)
	}
	ns := freshNetns(b)
	conn := dialConntrackIn(b, ns)
	fill := newBenchFill(entries, udp)
	if err := fill.create(b, conn); err != nil {
		b.Fatal(err)
	}
	// The fill runs once, here; the sub-benchmark is what the framework
	// calls again with a larger b.N.
	b.Run(fmt.Sprintf("entries=%d,udp=%d,stale=%d", entries, udp, benchStale), func(b *testing.B) {
		benchClear(b, ns, conn, fill)
	})
}

func envSize(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive number", name, v)
	}
	return n, nil
}

// benchFill is the table's content: the stale entries, and how many
// entries it holds in all.
type benchFill struct {
	entries, udp int
	reals        []netip.AddrPort
	stale        []conntrack.Flow
}

func newBenchFill(entries, udp int) *benchFill {
	f := &benchFill{entries: entries, udp: udp}
	for i := range benchReals {
		f.reals = append(f.reals, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, byte(i / 250), byte(1 + i%250)}), 53))
	}
	for i := range benchStale {
		f.stale = append(f.stale, f.flow(i))
	}
	return f
}

// flow is the table's entry i: a client of its own (so every tuple is
// unique) to the VIP, NATed to a removed real server (the first
// benchStale UDP entries and as many TCP ones), or to a real server that
// stays.
func (f *benchFill) flow(i int) conntrack.Flow {
	proto := uint8(syscall.IPPROTO_UDP)
	var real netip.AddrPort
	switch {
	case i < benchStale:
		real = f.reals[i%benchReals]
	case i < f.udp:
		real = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 245, byte(i >> 8), byte(i)}), 53)
	case i < f.udp+benchStale:
		proto = syscall.IPPROTO_TCP
		real = f.reals[i%benchReals]
	default:
		proto = syscall.IPPROTO_TCP
		real = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 246, byte(i >> 8), byte(i)}), 8080)
	}
	client := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	fl := conntrack.NewFlow(proto, 0, client, netip.MustParseAddr(benchVIP), 40000, real.Port(), benchTimeout, 0)
	fl.TupleReply.IP.SourceAddress, fl.TupleReply.Proto.SourcePort = real.Addr(), real.Port()
	return fl
}

// create fills the table and checks it holds what was created.
func (f *benchFill) create(b *testing.B, c *conntrack.Conn) error {
	st, err := c.StatsGlobal()
	if err != nil {
		return fmt.Errorf("read conntrack table size: %w", err)
	}
	if st.MaxEntries != 0 && int(st.MaxEntries) < f.entries {
		return fmt.Errorf("nf_conntrack_max is %d, below the %d entries asked for: raise it (or KUBE_IPVS_CT_ENTRIES lower)",
			st.MaxEntries, f.entries)
	}
	start := time.Now()
	for i := range f.entries {
		fl := f.flow(i)
		if err := c.Create(fl); err != nil {
			return fmt.Errorf("create entry %d, %s: %w", i, fl.TupleOrig, err)
		}
	}
	b.Logf("filled %d conntrack entries (%d UDP) in %v", f.entries, f.udp, time.Since(start).Round(time.Millisecond))
	return f.expectSize(c, f.entries)
}

// expectSize checks the table holds want entries.
func (f *benchFill) expectSize(c *conntrack.Conn, want int) error {
	st, err := c.StatsGlobal()
	if err != nil {
		return fmt.Errorf("read conntrack table size: %w", err)
	}
	if int(st.Entries) != want {
		return fmt.Errorf("conntrack table holds %d entries, want %d", st.Entries, want)
	}
	return nil
}

// checkCleared checks that a clear deleted the stale entries and nothing
// else: each is gone, and the table is short of exactly that many.
func (f *benchFill) checkCleared(c *conntrack.Conn) error {
	for _, fl := range f.stale {
		_, err := c.Get(conntrack.Flow{TupleOrig: fl.TupleOrig})
		if err == nil {
			return fmt.Errorf("entry %s NATed to removed %s survived the clear", fl.TupleOrig, fl.TupleReply.IP.SourceAddress)
		}
		if !errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("look up entry %s: %w", fl.TupleOrig, err)
		}
	}
	return f.expectSize(c, f.entries-benchStale)
}

// restore creates the stale entries again for the next clear.
func (f *benchFill) restore(c *conntrack.Conn) error {
	for _, fl := range f.stale {
		if err := c.Create(fl); err != nil {
			return fmt.Errorf("re-create entry %s: %w", fl.TupleOrig, err)
		}
	}
	return f.expectSize(c, f.entries)
}

func benchClear(b *testing.B, ns netns.NsHandle, c *conntrack.Conn, fill *benchFill) {
	b.StopTimer()
	b.ReportAllocs()
	var table *ctTable
	d := testDataplane(benchCallTime, func() (*handles, error) {
		return &handles{dialCT: func() (flowTable, error) {
			var err error
			table, err = openFlowTable(ns)
			return table, err
		}}, nil
	})
	defer d.Close()
	stale := dataplane.NewStaleFlows(model.UDP)
	for _, rs := range fill.reals {
		stale.AddReal(rs)
	}
	deleted := 0
	for range b.N {
		b.StartTimer()
		n, err := d.ClearConntrack(b.Context(), stale)
		b.StopTimer()
		if err != nil || n != benchStale {
			b.Fatalf("clear of %d real servers: deleted %d, %v; want %d, nil", benchReals, n, err, benchStale)
		}
		if err := fill.checkCleared(c); err != nil {
			b.Fatal(err)
		}
		if err := fill.restore(c); err != nil {
			b.Fatal(err)
		}
		deleted += n
	}
	if table != nil && table.noFilter {
		b.Log("the kernel refused the dump filter: the dump read every entry, TCP too")
	}
	b.ReportMetric(float64(deleted)/float64(b.N), "deleted/op")
	b.ReportMetric(float64(fill.entries), "entries")
}
