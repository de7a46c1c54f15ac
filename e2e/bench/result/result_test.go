package result

import (
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	for _, tc := range []struct{ p, want float64 }{{50, 5}, {99, 10}, {100, 10}, {0, 1}, {10, 1}, {11, 2}} {
		if got := Percentile(xs, tc.p); got != tc.want {
			t.Errorf("p%v: got %v, want %v", tc.p, got, tc.want)
		}
	}
	if xs[0] != 5 {
		t.Error("Percentile sorted its input")
	}
	if !math.IsNaN(Percentile(nil, 50)) || !math.IsNaN(Max(nil)) {
		t.Error("empty: want NaN")
	}
	if Max(xs) != 10 {
		t.Error("Max")
	}
}
