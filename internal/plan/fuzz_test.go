package plan

import (
	"net/netip"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// A small universe so that random states overlap often: addresses bound on
// the link and not, node ports and foreign services, both families.
var (
	fuzzAddrs = []netip.Addr{vip1, vip2, vip6, node1, ext}
	fuzzReals = []string{"10.244.0.2:80", "10.244.0.3:80", "[fd00:244::2]:80"}
)

// genState decodes bytes into a state; every byte sequence is valid.
func genState(data []byte) model.State {
	s := model.NewState()
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	for n := int(next() % 6); n > 0; n-- {
		b := next()
		addr := fuzzAddrs[int(b)%len(fuzzAddrs)]
		proto := []model.Protocol{model.TCP, model.UDP, model.SCTP}[int(b>>3)%3]
		port := []uint16{80, 30080}[int(b>>5)%2]
		k := model.NewVSKey(proto, addr, port)
		v := svc(k, []model.Scheduler{"rr", "sh", "lc"}[int(next())%3])
		if b&0x80 != 0 {
			v.Flags, v.Timeout = model.FlagPersistent, 10800
		}
		for rb := next(); rb != 0; rb >>= 2 {
			r := rs(fuzzReals[int(rb)%len(fuzzReals)], int(rb>>1)%2)
			v.Reals[r.Addr] = r
		}
		s.Services[k] = v
		if next()%2 == 1 && addr != node1 {
			s.Addrs[addr] = struct{}{}
		}
	}
	for bits := next(); bits != 0; bits >>= 1 {
		if bits&1 != 0 {
			s.Sets[fuzzEntries[bits%byte(len(fuzzEntries))]] = struct{}{}
		}
	}
	return s
}

// fuzzEntries are set members the fuzzer picks from.
var fuzzEntries = []model.SetEntry{
	shim.Entry(shim.ClusterIP, vip1, model.TCP, 80),
	shim.Entry(shim.NoEndpoints, vip1, model.TCP, 80),
	shim.Entry(shim.Firewall, vip2, model.UDP, 53),
	shim.SourceRangeEntry(vip2, model.UDP, 53, netip.MustParsePrefix("10.0.0.0/8")),
	shim.LoopBackEntry(model.TCP, netip.MustParseAddrPort("10.244.0.2:80")),
	shim.Entry(shim.External, vip6, model.SCTP, 9),
}

// expect is what applying a correct diff must leave: desired where desired
// speaks, observed untouched where we do not own, nothing else.
func expect(desired, observed model.State, owner Owner) model.State {
	want := desired.Clone()
	for k, v := range observed.Services {
		if _, ok := desired.Services[k]; !ok && !owner.OwnsService(k) {
			want.Services[k] = v.Clone()
		}
	}
	for a := range observed.Addrs {
		if _, ok := desired.Addrs[a]; !ok && !owner.OwnsAddr(a) {
			want.Addrs[a] = struct{}{}
		}
	}
	return want
}

func FuzzDiff(f *testing.F) {
	f.Add([]byte{}, []byte{})
	f.Add([]byte{3, 1, 2, 0xff, 1, 9, 0, 7, 1}, []byte{2, 0x81, 1, 5, 0, 4, 2, 3})
	f.Add([]byte{1, 1, 2, 3, 1, 0xff}, []byte{1, 9, 2, 3, 0, 0x5a})
	f.Fuzz(func(t *testing.T, d, o []byte) {
		desired, observed := genState(d), genState(o)
		owner := testOwner(observed)
		if ops := Diff(observed, observed, owner); len(ops) != 0 {
			t.Fatalf("Diff(s, s) not empty:\n%s", render(ops))
		}
		got := observed.Clone()
		ops := Diff(desired, observed, owner)
		for _, op := range ops {
			op.ApplyTo(&got)
		}
		if want := expect(desired, observed, owner); !got.Equal(want) {
			t.Fatalf("after ops:\n%s\ngot:\n%s\nwant:\n%s", render(ops), got.Dump(), want.Dump())
		}
		// Same owner: binding an address can make a foreign service on it
		// ours, which the next sync would then rightly remove.
		if again := Diff(desired, got, owner); len(again) != 0 {
			t.Fatalf("not converged, second diff:\n%s", render(again))
		}
	})
}
