//go:build linux

package linux_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/dataplanetest"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/linux"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// BenchmarkRollingRealServer times the kernel's part of a rolling update,
// one endpoint at a time, on virtual servers of several sizes
// (KUBE_IPVS_ROLL_SIZES, default 1000,10000; scripts/kernel-bench-vm.sh):
// each step adds a real server, sets the one added before it to weight 0
// (terminating) and deletes the one before that (departed), three
// operations, so the virtual server keeps its size. ns/kernel-op and
// cpu-ns/kernel-op are per operation, the CPU being the process's, user
// and system (the kernel answers in the caller's thread); "counters" is
// one read of every real server's connection counters, which a drain
// decision needs. Whatever grows with the size here grows for any agent
// that programs IPVS: it is the kernel's own cost.
func BenchmarkRollingRealServer(b *testing.B) {
	sizes, err := rollSizes()
	if err != nil {
		b.Fatal(err)
	}
	if os.Geteuid() != 0 {
		b.Skip("programs IPVS: needs root, in the VM (scripts/kernel-bench-vm.sh)")
	}
	dp, err := linux.New(linux.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer dp.Close()
	for _, n := range sizes {
		b.Run(fmt.Sprintf("size=%d", n), func(b *testing.B) {
			clean(b, dp)
			defer clean(b, dp)
			r := newRoller(n)
			apply(b, dp, r.fill())
			b.Run("step", func(b *testing.B) {
				before := cpuTime(b)
				start := time.Now()
				for b.Loop() {
					apply(b, dp, r.step())
				}
				ops := float64(3 * b.N)
				b.ReportMetric(float64(time.Since(start).Nanoseconds())/ops, "ns/kernel-op")
				b.ReportMetric(float64(cpuTime(b)-before)/ops, "cpu-ns/kernel-op")
			})
			b.Run("counters", func(b *testing.B) {
				read := 0
				before := cpuTime(b)
				for b.Loop() {
					conns, err := dp.Conns(b.Context(), r.vs.Key)
					if err != nil {
						b.Fatal(err)
					}
					read = len(conns)
				}
				b.ReportMetric(float64(cpuTime(b)-before)/float64(b.N), "cpu-ns/read")
				if read != n {
					b.Fatalf("read the counters of %d real servers, want %d", read, n)
				}
			})
		})
	}
}

// rollSizes are the virtual servers' sizes to roll.
func rollSizes() ([]int, error) {
	v := os.Getenv("KUBE_IPVS_ROLL_SIZES")
	if v == "" {
		v = "1000,10000"
	}
	var sizes []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 || n > 60000 {
			return nil, fmt.Errorf("KUBE_IPVS_ROLL_SIZES=%q: want sizes from 2 to 60000, comma-separated", v)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

// roller is one virtual server rolled one real server at a time, its
// size kept: at step k real server size+k is added, real server k+1 turns
// terminating (weight 0) and real server k, terminating since the step
// before, is deleted.
type roller struct {
	vs   model.VirtualServer
	size int
	k    int // the next step
}

func newRoller(size int) *roller {
	key := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.7.1"), 80)
	return &roller{vs: model.VirtualServer{Key: key, Scheduler: "rr"}, size: size}
}

// real is real server i, at weight w: addresses from 10.32.0.0 on, as many
// as a roll of any size ever holds.
func (r *roller) real(i, w int) model.RealServer {
	a := netip.AddrFrom4([4]byte{10, 32 + byte(i>>16), byte(i >> 8), byte(i)})
	return model.RealServer{Addr: netip.AddrPortFrom(a, 8080), Weight: w, Forward: model.Masq}
}

// fill is the virtual server with its size of real servers, the first one
// terminating, as every step leaves the oldest.
func (r *roller) fill() []model.Op {
	ops := []model.Op{{Kind: model.AddService, VS: r.vs}}
	for i := range r.size {
		w := 1
		if i == 0 {
			w = 0
		}
		ops = append(ops, model.Op{Kind: model.AddReal, VS: r.vs, RS: r.real(i, w)})
	}
	return ops
}

// step is one endpoint replaced.
func (r *roller) step() []model.Op {
	k := r.k
	r.k++
	return []model.Op{
		{Kind: model.AddReal, VS: r.vs, RS: r.real(r.size+k, 1)},
		{Kind: model.UpdateReal, VS: r.vs, RS: r.real(k+1, 0)},
		{Kind: model.DeleteReal, VS: r.vs, RS: r.real(k, 0)},
	}
}

// apply applies ops in one call, failing on any error.
func apply(b *testing.B, dp *linux.Dataplane, ops []model.Op) {
	for i, err := range dp.Apply(b.Context(), ops) {
		if err != nil {
			b.Fatalf("%v: %v", ops[i], err)
		}
	}
}

// clean empties the kernel of what the benchmark programmed.
func clean(b *testing.B, dp *linux.Dataplane) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := dataplanetest.Clean(ctx, dp); err != nil {
		b.Fatalf("empty the kernel: %v", err)
	}
}
