package plan

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// A small universe so that random states overlap often: addresses bound on
// the link and not, node ports and foreign services, both families.
var (
	fuzzAddrs = []netip.Addr{vip1, vip2, vip6, node1, ext, excludedVIP}
	fuzzReals = []string{"10.244.0.2:80", "10.244.0.3:80", "[fd00:244::2]:80"}
	// fuzzPorts: a Service port, one inside the NodePort range, one
	// outside it that genNodePorts may name as a nodePort.
	fuzzPorts = []uint16{80, 30080, 20080}
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
		port := fuzzPorts[int(b>>5)%len(fuzzPorts)]
		k := model.NewVSKey(proto, addr, port)
		v := svc(k, []model.Scheduler{"rr", "sh", "lc"}[int(next())%3])
		if b&0x80 != 0 {
			v.Flags, v.Timeout = model.FlagPersistent, 10800
		}
		for rb := next(); rb != 0; rb >>= 2 {
			r := rs(fuzzReals[int(rb)%len(fuzzReals)], int(rb>>1)%2)
			v.Reals.Set(r)
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
	shim.Entry(shim.External, ext, model.TCP, 80),
	shim.Entry(shim.NoEndpoints, excludedVIP, model.TCP, 80),
	shim.VIPEntry(vip1),
	shim.VIPEntry(node1),
	shim.Entry(shim.Frontends, node1, model.TCP, 80),
	shim.Entry(shim.Frontends, excludedVIP, model.TCP, 80),
	shim.VIPEntry(excludedVIP),
	shim.Entry(shim.Frontends, node1, model.TCP, 20080),
}

// genReserved decodes bytes into the reserved addresses: each bit of the
// first byte reserves one of fuzzAddrs for every frontend, the top bit the
// prefix holding vip1 and vip2 too (a pod CIDR, say); each bit of the
// second one of fuzzAddrs as a host-only address, of the third the TCP
// frontends on one of fuzzAddrs as served unbound there, of the fourth
// exempts one of fuzzAddrs (a ClusterIP).
func genReserved(data []byte) Reserved {
	if len(data) == 0 {
		return Reserved{}
	}
	pick := func(i int) []netip.Addr {
		var out []netip.Addr
		for j, a := range fuzzAddrs {
			if i < len(data) && data[i]&(1<<j) != 0 {
				out = append(out, a)
			}
		}
		return out
	}
	var prefixes []netip.Prefix
	if data[0]&0x80 != 0 {
		prefixes = append(prefixes, netip.MustParsePrefix("10.96.0.0/30"))
	}
	var unbound []model.VSKey
	for _, a := range pick(2) {
		unbound = append(unbound, model.NewVSKey(model.TCP, a, 80), model.NewVSKey(model.TCP, a, 30080))
	}
	return NewReserved(pick(0), prefixes).WithHostOnly(pick(1)).WithUnbound(unbound).WithExempt(pick(3))
}

// genNodePorts decodes the fifth byte into the nodePorts the Services
// name: each of its low bits one protocol's port 20080, outside the range.
func genNodePorts(data []byte) map[NodePort]struct{} {
	out := map[NodePort]struct{}{}
	if len(data) < 5 {
		return out
	}
	for i, proto := range []model.Protocol{model.TCP, model.UDP, model.SCTP} {
		if data[4]&(1<<i) != 0 {
			out[NodePort{Proto: proto, Port: 20080}] = struct{}{}
		}
	}
	return out
}

// fuzzOwner is testOwner with addresses reserved and nodePorts named.
func fuzzOwner(observed model.State, reserved Reserved, nodePorts map[NodePort]struct{}) Owner {
	p := testPolicy
	p.Reserved, p.NodePorts = reserved, nodePorts
	return NewOwner(observed, []netip.Addr{node1}, p)
}

// The ownership oracle spells out, apart from the code, what is ours.
// testPolicy serves both families; firewall-mark services are never
// generated.

// oracleExcluded: a is inside the excluded CIDRs.
func oracleExcluded(a netip.Addr) bool { return testPolicy.Exclude[0].Contains(a) }

// oracleRecorded: one of our frontend sets names k.
func oracleRecorded(k model.VSKey, observed model.State) bool {
	for _, kind := range []shim.SetKind{shim.ClusterIP, shim.External, shim.Firewall, shim.NoEndpoints, shim.Frontends} {
		if _, ok := observed.Sets[shim.Entry(kind, k.Addr, k.Proto, k.Port)]; ok {
			return true
		}
	}
	return false
}

// oracleNodePort: k is on the node's address, on a port inside the range
// or named as a nodePort.
func oracleNodePort(k model.VSKey, owner Owner) bool {
	_, named := owner.policy.NodePorts[NodePort{Proto: k.Proto, Port: k.Port}]
	return k.Addr == node1 && (named || (k.Port >= 30000 && k.Port <= 32767))
}

// oracleAdoptable: k's address is bound on our link and not reserved, or
// k is a NodePort.
func oracleAdoptable(k model.VSKey, observed model.State, owner Owner) bool {
	_, bound := observed.Addrs[k.Addr]
	return (bound && !reservedAddr(k.Addr, owner)) || oracleNodePort(k, owner)
}

// oracleOwns: k is ours to delete: recorded, or adoptable outside the
// excluded CIDRs.
func oracleOwns(k model.VSKey, observed model.State, owner Owner) bool {
	return oracleRecorded(k, observed) || (!oracleExcluded(k.Addr) && oracleAdoptable(k, observed, owner))
}

// oracleClaims: k is ours to create or change: recorded, or adoptable,
// inside the excluded CIDRs too.
func oracleClaims(k model.VSKey, observed model.State, owner Owner) bool {
	return oracleRecorded(k, observed) || oracleAdoptable(k, observed, owner)
}

// oracleOwnsAddr: an address on our link is ours to unbind: outside the
// excluded CIDRs, or recorded in our VIPs set.
func oracleOwnsAddr(a netip.Addr, observed model.State) bool {
	_, recorded := observed.Sets[shim.VIPEntry(a)]
	return !oracleExcluded(a) || recorded
}

// reservedFor spells out, apart from the code, whether a is reserved
// (never bound nor guarded), and whether for every frontend (all) or for
// all but the ones served unbound on this host (host).
func reservedFor(a netip.Addr, owner Owner) (all, host bool) {
	r := owner.policy.Reserved
	if _, ok := r.exempt[a]; ok {
		return false, false
	}
	_, all = r.addrs[a]
	for _, p := range r.prefixes {
		all = all || p.Contains(a)
	}
	_, host = r.hostOnly[a]
	return all, host && !all
}

// reservedAddr: a is never bound nor guarded as a VIP.
func reservedAddr(a netip.Addr, owner Owner) bool {
	all, host := reservedFor(a, owner)
	return all || host
}

// claimsReserved is the oracle for frontends on a reserved address: all
// but a NodePort (the node address, a port in the range), and but the
// frontends served unbound on a host-only address.
func claimsReserved(k model.VSKey, owner Owner) bool {
	all, host := reservedFor(k.Addr, owner)
	_, unbound := owner.policy.Reserved.unbound[k]
	return (all || (host && !unbound)) && !oracleNodePort(k, owner)
}

// excludedVIP is inside testPolicy's excluded CIDRs.
var excludedVIP = netip.MustParseAddr("10.96.9.9")

// refused spells out, apart from the code, which desired frontends the
// diff must leave alone: one on a reserved address, one that exists and
// is not ours, one whose address is to be bound and carries a virtual
// server not ours.
func refused(k model.VSKey, desired, observed model.State, owner Owner) bool {
	return leftAlone(k, desired, observed, owner) || reservedRefused(k, owner)
}

// reservedRefused: a frontend refused for its reserved address; what is
// ours of it is removed.
func reservedRefused(k model.VSKey, owner Owner) bool {
	return claimsReserved(k, owner)
}

// leftAlone: a frontend refused and left as it is, in desired and observed.
func leftAlone(k model.VSKey, desired, observed model.State, owner Owner) bool {
	if claimsReserved(k, owner) {
		return false
	}
	if _, ok := observed.Services[k]; ok && !oracleClaims(k, observed, owner) {
		return true
	}
	_, vip := desired.Addrs[k.Addr]
	return vip && foreignAddr(k.Addr, observed, owner)
}

// foreignAddr tells whether a is not bound and carries a virtual server not ours.
func foreignAddr(a netip.Addr, observed model.State, owner Owner) bool {
	if _, bound := observed.Addrs[a]; bound {
		return false
	}
	for k := range observed.Services {
		if k.Addr == a && !oracleClaims(k, observed, owner) {
			return true
		}
	}
	return false
}

// entryKey is the frontend a set member names (zero for hairpin members).
func entryKey(e model.SetEntry) model.VSKey {
	k, _ := FrontendOf(e)
	return k
}

// expect is what applying a correct diff must leave: desired where desired
// speaks and is not refused, observed untouched where we do not own or
// refuse, nothing else.
func expect(desired, observed model.State, owner Owner) model.State {
	want := model.NewState()
	for k, v := range desired.Services {
		if !refused(k, desired, observed, owner) {
			want.Services[k] = v.Clone()
		}
	}
	for k, v := range observed.Services {
		_, wanted := desired.Services[k]
		if (wanted && leftAlone(k, desired, observed, owner)) || ((!wanted || reservedRefused(k, owner)) && !oracleOwns(k, observed, owner)) {
			want.Services[k] = v.Clone()
		}
	}
	for a := range desired.Addrs {
		if bindable(a, observed, owner) {
			want.Addrs[a] = struct{}{}
		}
	}
	for a := range observed.Addrs {
		if !oracleOwnsAddr(a, observed) {
			want.Addrs[a] = struct{}{}
		}
	}
	// Members of refused frontends, and of any frontend that exists and is
	// not ours, are neither added nor removed.
	refusedEntry := func(e model.SetEntry) bool {
		k := entryKey(e)
		if !k.Addr.IsValid() {
			return false
		}
		_, wanted := desired.Services[k]
		_, exists := observed.Services[k]
		return (exists && !oracleClaims(k, observed, owner)) || (wanted && leftAlone(k, desired, observed, owner))
	}
	// The VIP member of an address not bound, and the members of a
	// frontend refused for its reserved address, are not added.
	notAdded := func(e model.SetEntry) bool {
		if shim.KindOf(e) == shim.VIPs {
			_, vip := desired.Addrs[e.Addr()]
			return reservedAddr(e.Addr(), owner) || (vip && !bindable(e.Addr(), observed, owner))
		}
		k := entryKey(e)
		_, wanted := desired.Services[k]
		_, exists := observed.Services[k]
		// Nor one that would record as ours a virtual server no Service
		// names and that is not ours to delete.
		unwanted := !wanted && exists && !oracleOwns(k, observed, owner)
		return k.Addr.IsValid() && (reservedRefused(k, owner) || unwanted)
	}
	for e := range desired.Sets {
		if !refusedEntry(e) && !notAdded(e) {
			want.Sets[e] = struct{}{}
		}
	}
	for e := range observed.Sets {
		if refusedEntry(e) {
			want.Sets[e] = struct{}{}
		}
	}
	return want
}

// bindable: a desired address the diff binds: not reserved, and not
// carrying a virtual server not ours unless already bound.
func bindable(a netip.Addr, observed model.State, owner Owner) bool {
	return !foreignAddr(a, observed, owner) && !reservedAddr(a, owner)
}

// checkOps holds the invariants every single operation must keep: never
// one on a virtual server or frontend not ours, never a delete or an
// unbind inside the excluded CIDRs of what we did not record, never a
// bind of an address that carries a virtual server not ours.
func checkOps(t *testing.T, ops []model.Op, observed model.State, owner Owner) {
	t.Helper()
	for _, op := range ops {
		k := op.VS.Key
		if op.Kind == model.AddSetEntry || op.Kind == model.DeleteSetEntry {
			k = entryKey(op.Entry)
		}
		if _, ok := observed.Services[k]; ok && k.Addr.IsValid() && !oracleClaims(k, observed, owner) {
			t.Fatalf("%s: an operation on a virtual server not ours", op)
		}
		switch {
		case op.Kind == model.DeleteService && !oracleOwns(k, observed, owner):
			t.Fatalf("%s: deletes a virtual server not ours", op)
		case op.Kind == model.DeleteService && oracleExcluded(k.Addr) && !oracleRecorded(k, observed):
			t.Fatalf("%s: deletes a virtual server inside the excluded CIDRs that we did not record", op)
		case op.Kind == model.UnbindAddr && !oracleOwnsAddr(op.Addr, observed):
			t.Fatalf("%s: unbinds an address inside the excluded CIDRs that we did not record", op)
		}
		if op.Kind == model.BindAddr && foreignAddr(op.Addr, observed, owner) {
			t.Fatalf("%s: binds an address that carries a virtual server not ours", op)
		}
		// No plan binds or guards a host, Node, API-server or pod-CIDR
		// address, nor serves a frontend there but a NodePort.
		switch {
		case op.Kind == model.BindAddr && reservedAddr(op.Addr, owner):
			t.Fatalf("%s: binds a reserved address", op)
		case op.Kind == model.AddSetEntry && shim.KindOf(op.Entry) == shim.VIPs && reservedAddr(op.Entry.Addr(), owner):
			t.Fatalf("%s: guards a reserved address as a VIP", op)
		case op.Kind == model.AddSetEntry && shim.KindOf(op.Entry).NamesFrontend() && claimsReserved(entryKey(op.Entry), owner):
			t.Fatalf("%s: records a frontend on a reserved address", op)
		case (op.Kind == model.AddService || op.Kind == model.UpdateService || op.Kind == model.AddReal) && claimsReserved(op.VS.Key, owner):
			t.Fatalf("%s: serves a frontend on a reserved address", op)
		}
	}
}

// checkBound: every address the diff bound carries a virtual server it wanted.
func checkBound(t *testing.T, ops []model.Op, desired, got model.State) {
	t.Helper()
	for _, op := range ops {
		if op.Kind != model.BindAddr {
			continue
		}
		found := false
		for k := range got.Services {
			if _, wanted := desired.Services[k]; wanted && k.Addr == op.Addr {
				found = true
			}
		}
		if !found {
			t.Fatalf("%s: bound without its virtual server", op)
		}
	}
}

func FuzzDiff(f *testing.F) {
	f.Add([]byte{}, []byte{}, []byte{})
	f.Add([]byte{3, 1, 2, 0xff, 1, 9, 0, 7, 1}, []byte{2, 0x81, 1, 5, 0, 4, 2, 3}, []byte{})
	f.Add([]byte{1, 1, 2, 3, 1, 0xff}, []byte{1, 9, 2, 3, 0, 0x5a}, []byte{})
	f.Add([]byte{2, 4, 0, 1, 1, 0, 0, 1, 0x40}, []byte{1, 0x0c, 1, 0, 0}, []byte{})
	f.Add([]byte{3, 1, 2, 0xff, 1, 9, 0, 7, 1}, []byte{2, 0x81, 1, 5, 0, 4, 2, 3}, []byte{0x09})
	f.Add([]byte{2, 3, 1, 3, 1, 0x08, 4, 1, 2, 0}, []byte{2, 3, 9, 2, 1, 3, 2, 0x30}, []byte{0x89})
	f.Add([]byte{3, 1, 2, 0xff, 1, 9, 0, 7, 1}, []byte{2, 0x81, 1, 5, 0, 4, 2, 3}, []byte{0x80, 0x13, 0x11, 0x02})
	// A Service inside the excluded CIDRs over kube-proxy's virtual server
	// there (its address bound on our link) and another tool's beside it;
	// a NodePort outside the range, named, over one on the node address.
	f.Add([]byte{2, 0x05, 0, 1, 1, 0x4b, 0, 1, 0, 0}, []byte{3, 0x05, 0, 0x0d, 1, 0x4b, 0, 2, 0, 0x0b, 1, 0, 0, 0}, []byte{0, 0, 0, 0, 0x01})
	f.Fuzz(func(t *testing.T, d, o, r []byte) {
		desired, observed, reserved, nodePorts := genState(d), genState(o), genReserved(r), genNodePorts(r)
		owner := fuzzOwner(observed, reserved, nodePorts)
		// Without reserved addresses: a reserved address bound on the link
		// is unbound even when a Service asks for it.
		if ops := Diff(observed, observed, testOwner(observed)); len(ops) != 0 {
			t.Fatalf("Diff(s, s) not empty:\n%s", render(ops))
		}
		got := observed.Clone()
		ops := Diff(desired, observed, owner)
		checkOps(t, ops, observed, owner)
		checkStaged(t, desired, observed, owner, ops)
		for _, op := range ops {
			op.ApplyTo(&got)
		}
		if want := expect(desired, observed, owner); !got.Equal(want) {
			t.Fatalf("after ops:\n%s\ngot:\n%s\nwant:\n%s", render(ops), got.Dump(), want.Dump())
		}
		checkBound(t, ops, desired, got)
		// A fresh owner, as the next full sync builds: nothing the diff did
		// (no bind, no set member) may have made a virtual server not ours
		// look ours, so the next diff has nothing left to do.
		if again := Diff(desired, got, fuzzOwner(got, reserved, nodePorts)); len(again) != 0 {
			t.Fatalf("not converged, second diff:\n%s", render(again))
		}
	})
}

// checkStaged: the passes of Staged, laid end to end, are the plan.
func checkStaged(t *testing.T, desired, observed model.State, owner Owner, want []model.Op) {
	t.Helper()
	passes, _ := Staged(desired, observed, owner)
	var got []model.Op
	for _, pass := range passes {
		got = append(got, pass()...)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("staged passes:\n%s\nwant the plan:\n%s", render(got), render(want))
	}
}
