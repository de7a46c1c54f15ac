package model

import "testing"

// The rule text is ipvsadm -S's, option for option and in its order
// (ipvsadm.c print_service_entry with FMT_RULE); the VM check
// scripts/ipvsadm-vm.sh compares ipvsadm's -S output with the real tool's.
func TestRuleText(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{ServiceRule{Scheduler: "rr"}.String(), "-s rr"},
		{ServiceRule{Scheduler: "wlc", Flags: FlagPersistent, Timeout: 600, Mask: "255.255.255.0"}.String(), "-s wlc -p 600 -M 255.255.255.0"},
		// the mask goes with persistence only
		{ServiceRule{Scheduler: "rr", Timeout: 600, Mask: "255.255.255.0"}.String(), "-s rr"},
		{ServiceRule{Scheduler: "mh", Flags: FlagPersistent | FlagOnePacket | FlagSchedSH2, Timeout: 60, PE: "sip"}.String(),
			"-s mh -p 60 --pe sip -o -b mh-port"},
		{ServiceRule{Scheduler: "sh", Flags: FlagSchedSH1 | FlagSchedSH2 | FlagSched3}.String(), "-s sh -b sh-fallback,sh-port"},
		{ServiceRule{Scheduler: "rr", Flags: FlagSchedSH1 | FlagSched3}.String(), "-s rr -b flag-1,flag-3"},
		{ServiceRule{Scheduler: "rr", Flags: FlagHashed}.String(), "-s rr"},
		{ServiceRule{Scheduler: "sh", Flags: FlagSched3}.String(), "-s sh -b "}, // ipvsadm's quirk, kept
		{RealRule{Addr: "pod-a:http", Forward: Tunnel, Weight: 2}.String(), "-r pod-a:http -i -w 2"},
		{RealRule{Addr: "10.0.0.2:80", Forward: Local, Weight: 1}.String(), "-r 10.0.0.2:80 -g -w 1"},
		{RealRule{Addr: "10.0.0.2:80", Forward: Bypass, Weight: 1}.String(), "-r 10.0.0.2:80 (null) -w 1"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
