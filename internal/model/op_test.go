package model

import (
	"net/netip"
	"testing"
)

// TestOpKinds: every kind has its name, what it writes, and whether it
// removes; the constant order is the apply order.
func TestOpKinds(t *testing.T) {
	for _, tc := range []struct {
		kind    OpKind
		name    string
		target  OpTarget
		removes bool
	}{
		{AddService, "add-service", TargetTable, false},
		{UpdateService, "update-service", TargetTable, false},
		{AddReal, "add-real", TargetTable, false},
		{UpdateReal, "update-real", TargetTable, false},
		{AddSetEntry, "add-set-entry", TargetMember, false},
		{BindAddr, "bind-addr", TargetAddr, false},
		{DeleteReal, "delete-real", TargetTable, true},
		{DeleteService, "delete-service", TargetTable, true},
		{UnbindAddr, "unbind-addr", TargetAddr, true},
		{DeleteSetEntry, "delete-set-entry", TargetMember, true},
	} {
		if got := tc.kind.String(); got != tc.name {
			t.Errorf("kind %d is %q, want %q", tc.kind, got, tc.name)
		}
		if got := tc.kind.Target(); got != tc.target {
			t.Errorf("%s writes %d, want %d", tc.kind, got, tc.target)
		}
		if got := tc.kind.Removes(); got != tc.removes {
			t.Errorf("%s removes: %v, want %v", tc.kind, got, tc.removes)
		}
	}
	if got := OpKind(200).String(); got != "kind(200)" {
		t.Errorf("an unknown kind is %q", got)
	}
	if OpKind(200).Removes() {
		t.Error("an unknown kind removes")
	}
}

// TestOpStringAndApplyTo: an operation prints as the command that makes
// it, and folds into a state as the kernel would hold it.
func TestOpStringAndApplyTo(t *testing.T) {
	vip := netip.MustParseAddr("10.96.0.10")
	k := NewVSKey(TCP, vip, 80)
	vs := VirtualServer{Key: k, Scheduler: "rr"}
	rs := RealServer{Addr: netip.MustParseAddrPort("10.244.1.5:8080"), Weight: 1, Forward: Masq}
	member := NewSetEntry("KUBE-IPVS-VIPS", vip, 0, 0)
	s := NewState()
	for _, tc := range []struct {
		op   Op
		text string
		dump string
	}{
		{Op{Kind: AddService, VS: vs}, "-A -t 10.96.0.10:80 -s rr", "-A -t 10.96.0.10:80 -s rr\n"},
		{Op{Kind: AddReal, VS: vs, RS: rs}, "-a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 1",
			"-A -t 10.96.0.10:80 -s rr\n  -a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 1\n"},
		{Op{Kind: UpdateReal, VS: vs, RS: RealServer{Addr: rs.Addr, Weight: 0, Forward: Masq}}, "-e -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 0",
			"-A -t 10.96.0.10:80 -s rr\n  -a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 0\n"},
		{Op{Kind: BindAddr, Addr: vip}, "ip addr add 10.96.0.10/32",
			"-A -t 10.96.0.10:80 -s rr\n  -a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 0\naddr 10.96.0.10\n"},
		{Op{Kind: DeleteReal, VS: vs, RS: rs}, "-d -t 10.96.0.10:80 -r 10.244.1.5:8080", "-A -t 10.96.0.10:80 -s rr\naddr 10.96.0.10\n"},
		{Op{Kind: DeleteService, VS: vs}, "-D -t 10.96.0.10:80", "addr 10.96.0.10\n"},
		{Op{Kind: UnbindAddr, Addr: vip}, "ip addr del 10.96.0.10/32", ""},
	} {
		if got := tc.op.String(); got != tc.text {
			t.Errorf("%s prints %q, want %q", tc.op.Kind, got, tc.text)
		}
		want := tc.text
		switch tc.op.Kind {
		case BindAddr:
			want = "ip route add local 10.96.0.10/32 table local"
		case UnbindAddr:
			want = "ip route del local 10.96.0.10/32 table local"
		}
		if got := tc.op.Command(true); got != want {
			t.Errorf("%s with local routes prints %q, want %q", tc.op.Kind, got, want)
		}
		tc.op.ApplyTo(&s)
		if got := s.Dump(); got != tc.dump {
			t.Errorf("after %s:\n%s\nwant:\n%s", tc.op, got, tc.dump)
		}
	}
	if _, ok := s.Addrs[vip]; ok {
		t.Error("the address is still bound after its unbind")
	}
	Op{Kind: AddSetEntry, Entry: member}.ApplyTo(&s)
	if _, ok := s.Sets[member]; !ok {
		t.Error("the member added is not in the state")
	}
	Op{Kind: DeleteSetEntry, Entry: member}.ApplyTo(&s)
	if len(s.Sets) != 0 {
		t.Errorf("members left after the delete: %v", s.Sets)
	}
}
