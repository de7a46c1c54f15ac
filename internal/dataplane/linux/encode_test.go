//go:build linux

package linux

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// windowOf is a window of cold-start changes: a service, its ten reals, its
// VIP and its members, over and over.
func windowOf() []model.Op {
	var out []model.Op
	for i := 0; len(out) < batchWindow; i++ {
		vip := netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(i%250 + 1)})
		k := model.NewVSKey(model.TCP, vip, 80)
		out = append(out, model.Op{Kind: model.AddService, VS: model.VirtualServer{Key: k, Scheduler: "rr"}})
		for j := range 10 {
			rs := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(128 + j), byte(i / 250), byte(i%250 + 1)}), 8080)
			out = append(out, model.Op{Kind: model.AddReal, VS: model.VirtualServer{Key: k},
				RS: model.RealServer{Addr: rs, Weight: 1, Forward: model.Masq}})
		}
	}
	return out[:batchWindow]
}

// BenchmarkEncodeWindow is the cost of encoding one window of requests,
// per request: the buffer is reused, so encoding allocates nothing per
// request (issue 12: no allocation storm per object).
func BenchmarkEncodeWindow(b *testing.B) {
	win := windowOf()
	vips := make([]netip.Addr, len(win))
	for i := range vips {
		vips[i] = netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(i%250 + 1)})
	}
	b.Run("ipvs", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var enc ipvsEncoder
			for _, c := range win {
				enc.change(42, c)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(win)), "ns/request")
	})
	b.Run("addrs", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var enc addrEncoder
			for _, a := range vips {
				enc.change(7, true, a)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(vips)), "ns/request")
	})
	members := make([]model.SetEntry, len(vips))
	for i, a := range vips {
		members[i] = shim.LoopBackEntry(model.TCP, netip.AddrPortFrom(a, 8080))
	}
	b.Run("sets", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var enc setEncoder
			for _, m := range members {
				enc.change(true, m)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(vips)), "ns/request")
	})
}

// TestEncodeWellFormed: every request of a window is a sequence of
// attributes whose lengths add up, nested ones included, so the kernel's
// parser reads each as it was meant.
func TestEncodeWellFormed(t *testing.T) {
	var ipvs ipvsEncoder
	var sets setEncoder
	var addrs addrEncoder
	var reqs []request
	v6 := model.NewVSKey(model.UDP, netip.MustParseAddr("fd00::10"), 53)
	for _, c := range append(windowOf(), model.Op{Kind: model.AddService, VS: model.VirtualServer{Key: v6, Scheduler: "wrr"}},
		model.Op{Kind: model.DeleteReal, VS: model.VirtualServer{Key: v6},
			RS: model.RealServer{Addr: netip.MustParseAddrPort("[fd00::5]:53")}}) {
		reqs = append(reqs, ipvs.change(42, c))
	}
	ipvsN := len(reqs)
	reqs = append(reqs, sets.change(true, shim.LoopBackEntry(model.UDP, netip.MustParseAddrPort("[fd00::5]:53"))),
		sets.change(false, shim.VIPEntry(netip.MustParseAddr("10.96.0.1"))))
	setsEnd := len(reqs)
	reqs = append(reqs, addrs.change(3, true, netip.MustParseAddr("fd00::10")), addrs.change(3, false, netip.MustParseAddr("10.96.0.1")))
	for i, r := range reqs {
		hdr := 4 // genlmsghdr, nfgenmsg
		if i >= setsEnd {
			hdr = 8 // ifaddrmsg
		}
		if err := wellFormed(r.data[hdr:]); err != nil {
			t.Fatalf("request %d (type %d): %v", i, r.typ, err)
		}
		if i < ipvsN && r.typ != 42 {
			t.Fatalf("IPVS request %d has type %d, want the family's 42", i, r.typ)
		}
	}
}

// wellFormed walks attributes, descending into nested ones.
func wellFormed(b []byte) error {
	for len(b) > 0 {
		if len(b) < 4 {
			return errShort
		}
		n := int(binary.NativeEndian.Uint16(b))
		typ := binary.NativeEndian.Uint16(b[2:])
		if n < 4 || n > len(b) {
			return errShort
		}
		if typ&nlaNested != 0 {
			if err := wellFormed(b[4:n]); err != nil {
				return err
			}
		}
		step := (n + 3) &^ 3
		if step > len(b) {
			step = len(b)
		}
		b = b[step:]
	}
	return nil
}

var errShort = errorString("attribute length does not fit")

type errorString string

func (e errorString) Error() string { return string(e) }
