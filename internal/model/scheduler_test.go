package model

import (
	"net/netip"
	"strings"
	"testing"
)

func TestSchedulerValidate(t *testing.T) {
	all := strings.Fields(SchedulerList())
	for _, name := range all {
		s := Scheduler(name)
		if err := s.Validate(); err != nil || !s.Valid() {
			t.Errorf("%s: valid %v, %v", s, s.Valid(), err)
		}
	}
	for _, s := range []Scheduler{"", "RR", "fastest", "rr "} {
		err := s.Validate()
		if s.Valid() || err == nil || !strings.Contains(err.Error(), "want one of rr wrr lc") {
			t.Errorf("%q: valid %v, error %v", s, s.Valid(), err)
		}
	}
	if len(all) != 14 || all[0] != string(SchedRR) {
		t.Errorf("schedulers %v", all)
	}
	for s, want := range map[Scheduler]bool{SchedSH: true, SchedMH: true, SchedRR: false, "wrr": false} {
		if s.HashFlags() != want {
			t.Errorf("%s takes hash flags: %v, want %v", s, s.HashFlags(), want)
		}
	}
}

func TestFamiliesHas(t *testing.T) {
	v4, v6, mapped := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1"), netip.MustParseAddr("::ffff:10.0.0.1")
	for _, tt := range []struct {
		f              Families
		v4, v6, mapped bool
	}{
		{Families{IPv4: true}, true, false, true},
		{Families{IPv6: true}, false, true, false},
		{Families{IPv4: true, IPv6: true}, true, true, true},
		{Families{}, false, false, false},
	} {
		if tt.f.Has(v4) != tt.v4 || tt.f.Has(v6) != tt.v6 || tt.f.Has(mapped) != tt.mapped {
			t.Errorf("%+v: %v %v %v", tt.f, tt.f.Has(v4), tt.f.Has(v6), tt.f.Has(mapped))
		}
	}
}
