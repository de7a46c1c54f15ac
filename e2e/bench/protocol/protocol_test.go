package protocol

import "testing"

func TestAddressPlan(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{VIP(0).String(), "10.96.1.0"},
		{VIP(9999).String(), "10.96.40.15"},
		{VIP(MaxServices - 1).String(), "10.96.255.237"},
		{RollVIP(0).String(), "10.96.255.240"},
		{RollVIP(MaxRolls - 1).String(), "10.96.255.254"},
		{RollPod(0).String(), "10.32.0.1"},
		{RollName(3), "bench-roll-03"},
		{Endpoint(0, 9).String(), "10.128.0.9"},
		{Endpoint(9999, 15).String(), "10.130.112.255"},
		{Fresh(0).String(), "10.64.0.1"},
		{ServiceName(42), "bench-00042"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %s, want %s", tc.got, tc.want)
		}
	}
}
