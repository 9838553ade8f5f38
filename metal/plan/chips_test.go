package plan

import "testing"

// TestChipNamed: Metal's device names find their chip, the longest name winning; every
// generation M1–M5 has its base, Pro and Max, with Apple's bandwidth figures.
func TestChipNamed(t *testing.T) {
	for name, want := range map[string]float64{"Apple M4 Max": 546e9, "Apple M4 Pro": 273e9, "Apple M4": 120e9, "m1 ultra": 800e9, "M5 Max": 614e9, "Apple M3 Ultra": 819e9} {
		if c, ok := ChipNamed(name); !ok || c.Bandwidth != want {
			t.Errorf("ChipNamed(%q) = %+v, %v; want %g B/s", name, c, ok, want)
		}
	}
	for _, name := range []string{"", "emu", "Apple M9", "M44 Max"} {
		if c, ok := ChipNamed(name); ok {
			t.Errorf("ChipNamed(%q) = %+v", name, c)
		}
	}
	for _, gen := range []string{"M1", "M2", "M3", "M4", "M5"} {
		for _, tier := range []string{"", " Pro", " Max"} {
			if c, ok := ChipNamed(gen + tier); !ok || c.Bandwidth <= 0 || c.FLOPs <= 0 {
				t.Errorf("no %s%s in the chip table", gen, tier)
			}
		}
	}
}

// TestChipSeconds: work takes the longer of its traffic over the bandwidth and its FLOPs over
// the peak.
func TestChipSeconds(t *testing.T) {
	c, _ := ChipNamed("M4 Max")
	if got, want := c.Seconds(int64(c.Bandwidth), c.FLOPs/2), 1.0; got != want {
		t.Errorf("bandwidth-bound: %g s, want %g", got, want)
	}
	if got, want := c.Seconds(int64(c.Bandwidth/4), 2*c.FLOPs), 2.0; got != want {
		t.Errorf("compute-bound: %g s, want %g", got, want)
	}
}
