package model

import "testing"

func TestPortRange(t *testing.T) {
	for s, want := range map[string]PortRange{
		"30000-32767": {30000, 32767},
		"1-65535":     {1, 65535},
		"80-80":       {80, 80},
	} {
		r, err := ParsePortRange(s)
		if err != nil || r != want {
			t.Errorf("%q: %v %v, want %v", s, r, err, want)
		}
	}
	r, _ := ParsePortRange("30000-32767")
	if !r.Contains(30000) || !r.Contains(32767) || r.Contains(29999) || r.Contains(32768) {
		t.Errorf("Contains wrong for %v", r)
	}
	for _, bad := range []string{
		"3-1", "x", "0-5", "", "-", "30000", "30000-", "-32767",
		"30000-32767xyz", "30000x-32767", "30000-32767-40000", " 30000-32767", "30000 -32767", "30000-32767 ",
		"+30000-32767", "30000-+32767", "30000--32767", "30000-65536", "70000-80000", "0x10-0x20", "30000+2767",
	} {
		if r, err := ParsePortRange(bad); err == nil {
			t.Errorf("%q accepted as %v", bad, r)
		}
	}
}
