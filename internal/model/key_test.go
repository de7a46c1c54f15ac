package model

import (
	"net/netip"
	"slices"
	"testing"
)

func TestKeyAndServerText(t *testing.T) {
	v6 := NewVSKey(UDP, netip.MustParseAddr("fd00::1"), 53)
	for _, tc := range []struct{ got, want string }{
		{NewVSKey(TCP, netip.MustParseAddr("10.0.0.1"), 80).String(), "-t 10.0.0.1:80"},
		{v6.String(), "-u [fd00::1]:53"},
		{NewVSKey(SCTP, netip.MustParseAddr("10.0.0.1"), 9).String(), "--sctp-service 10.0.0.1:9"},
		{VSKey{FWMark: 7}.String(), "-f 7"},
		{VirtualServer{Key: v6, Scheduler: "sh", Flags: FlagPersistent | FlagSchedSH1 | FlagSchedSH2, Timeout: 60}.String(), "-u [fd00::1]:53 -s sh -p 60 -b sh-fallback,sh-port"},
		{VirtualServer{Key: v6, Scheduler: "mh", Flags: FlagSchedSH2}.String(), "-u [fd00::1]:53 -s mh -b mh-port"},
		{RealServer{Addr: netip.MustParseAddrPort("[fd00::2]:53"), Weight: 0}.String(), "-r [fd00::2]:53 -m -w 0"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestMappedAddressesAreUnmapped(t *testing.T) {
	k := NewVSKey(TCP, netip.MustParseAddr("::ffff:10.0.0.1"), 80)
	if !k.Addr.Is4() || k != NewVSKey(TCP, netip.MustParseAddr("10.0.0.1"), 80) {
		t.Fatalf("key %v keeps the mapped form", k)
	}
}

func TestVirtualServerEqualIgnoresKernelFlags(t *testing.T) {
	a := VirtualServer{Key: VSKey{FWMark: 1}, Scheduler: "rr", Flags: FlagPersistent, Timeout: 5}
	b := a
	b.Flags |= FlagHashed
	if !a.Equal(b) {
		t.Fatal("the kernel's hashed flag made services differ")
	}
	for _, change := range []func(*VirtualServer){
		func(v *VirtualServer) { v.Scheduler = "lc" },
		func(v *VirtualServer) { v.Timeout = 6 },
		func(v *VirtualServer) { v.Flags = 0 },
		func(v *VirtualServer) { v.Key.FWMark = 2 },
	} {
		c := a
		change(&c)
		if a.Equal(c) {
			t.Errorf("%v equals %v", a, c)
		}
	}
}

func TestKeyOrder(t *testing.T) {
	keys := []VSKey{
		NewVSKey(UDP, netip.MustParseAddr("10.0.0.2"), 53),
		NewVSKey(TCP, netip.MustParseAddr("10.0.0.2"), 80),
		NewVSKey(TCP, netip.MustParseAddr("10.0.0.2"), 53),
		NewVSKey(TCP, netip.MustParseAddr("10.0.0.1"), 443),
	}
	slices.SortFunc(keys, VSKey.Compare)
	var got []string
	for _, k := range keys {
		got = append(got, k.String())
	}
	want := []string{"-t 10.0.0.1:443", "-t 10.0.0.2:53", "-t 10.0.0.2:80", "-u 10.0.0.2:53"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}
