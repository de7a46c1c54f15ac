//go:build linux

package linux_test

import (
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/linux"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/observed"
)

// BenchmarkScanKernel times the rescan's read of the table that is in the
// kernel now, as the agent left it (scripts/coldstart-vm.sh with
// COLDSTART_SCAN=1 programs 10,000 Services and more with the agent, then
// runs it): "scan" is the whole read into the observed digests, the others
// its parts. Besides the time, each reports the CPU the process spent
// (user and system: the kernel answers in the caller's thread), which is
// what a read costs the node.
func BenchmarkScanKernel(b *testing.B) {
	if os.Getenv("KUBE_IPVS_SCAN_BENCH") != "1" {
		b.Skip("reads whatever table this kernel holds: set KUBE_IPVS_SCAN_BENCH=1 where the agent has programmed one (scripts/coldstart-vm.sh)")
	}
	dp, err := linux.New(linux.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer dp.Close()
	nop := dataplane.Visitor{
		Service: func(model.VirtualServer) {},
		Real:    func(model.VSKey, model.RealServer) {},
	}
	withAddrs := nop
	withAddrs.Addr = func(netip.Addr) {}
	parts := []struct {
		name string
		read func(b *testing.B) (entries int)
	}{
		{"scan", func(b *testing.B) int {
			s := observed.NewScan(0, 0, 0)
			if err := dp.Scan(b.Context(), s.Visitor()); err != nil {
				b.Fatal(err)
			}
			_, services, members := s.Read().Scanned()
			return services + members
		}},
		{"table", func(b *testing.B) int { return scanCounting(b, dp, nop) }},
		{"table+addrs", func(b *testing.B) int { return scanCounting(b, dp, withAddrs) }},
		{"members", func(b *testing.B) int {
			n := 0
			if err := dp.EachSetEntry(b.Context(), func(model.SetEntry) { n++ }); err != nil {
				b.Fatal(err)
			}
			return n
		}},
	}
	for _, p := range parts {
		b.Run(p.name, func(b *testing.B) {
			entries := 0
			before := cpuTime(b)
			for b.Loop() {
				entries = p.read(b)
			}
			b.ReportMetric(float64(cpuTime(b)-before)/float64(b.N)/1e9, "cpu-s/op")
			b.ReportMetric(float64(entries), "entries")
		})
	}
}

// scanCounting scans with v, counting the entries it is handed.
func scanCounting(b *testing.B, dp *linux.Dataplane, v dataplane.Visitor) int {
	n := 0
	counted := v
	counted.Service = func(vs model.VirtualServer) { n++; v.Service(vs) }
	counted.Real = func(k model.VSKey, rs model.RealServer) { n++; v.Real(k, rs) }
	if v.Addr != nil {
		counted.Addr = func(a netip.Addr) { n++; v.Addr(a) }
	}
	if err := dp.Scan(b.Context(), counted); err != nil {
		b.Fatal(err)
	}
	return n
}

// cpuTime is the CPU the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
