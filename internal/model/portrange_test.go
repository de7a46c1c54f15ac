package model

import "testing"

func TestPortRange(t *testing.T) {
	r, err := ParsePortRange("30000-32767")
	if err != nil || !r.Contains(30000) || !r.Contains(32767) || r.Contains(29999) {
		t.Fatalf("range %v %v", r, err)
	}
	for _, bad := range []string{"3-1", "x", "0-5"} {
		if _, err := ParsePortRange(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
