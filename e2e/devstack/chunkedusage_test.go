package devstack

import (
	"math"
	"testing"
)

// sameUsage fails unless usage got (a view's "usage") is want, GET's: the
// same figures, times within a millisecond (GET sums its jobs' at each call,
// in no set order; J's record holds the sum rounded to the millisecond).
func sameUsage(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := got.(map[string]any)
	w, _ := want.(map[string]any)
	if g == nil || w == nil {
		t.Fatalf("%s usage %v, GET's %v: want both", what, got, want)
	}
	for _, k := range []string{"wall_seconds", "cpu_seconds", "gpu_seconds", "input_bytes", "output_bytes"} {
		a, _ := g[k].(float64)
		b, ok := w[k].(float64)
		if !ok || math.Abs(a-b) > 0.0015 {
			t.Fatalf("%s usage %v, GET's %v: %s differs", what, got, want, k)
		}
	}
	if w["wall_seconds"].(float64) <= 0 {
		t.Fatalf("GET's usage %v: no wall time", want)
	}
}
