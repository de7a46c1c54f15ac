package model

import "fmt"

// PortRange is an inclusive range of ports (the NodePort range).
type PortRange struct{ First, Last uint16 }

// Contains tells whether p is in the range.
func (r PortRange) Contains(p uint16) bool { return p >= r.First && p <= r.Last }

func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// ParsePortRange reads "30000-32767".
func ParsePortRange(s string) (PortRange, error) {
	var r PortRange
	if _, err := fmt.Sscanf(s, "%d-%d", &r.First, &r.Last); err != nil || r.First == 0 || r.First > r.Last {
		return PortRange{}, fmt.Errorf("want FIRST-LAST with 0 < FIRST <= LAST <= 65535, got %q", s)
	}
	return r, nil
}
