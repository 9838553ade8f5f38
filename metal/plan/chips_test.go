package plan

import (
	"math"
	"strings"
	"testing"
)

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

// TestChipTensorOps: only M5 chips have neural accelerators, each at about 1,024 FLOP per core
// per cycle (40 cores at 1.75 GHz on the Max), several times its ALUs' rate; the chips before
// have none.
func TestChipTensorOps(t *testing.T) {
	for _, c := range Chips {
		m5 := strings.HasPrefix(c.Name, "M5")
		if c.HasTensorOps() != m5 || c.Peak(Tensor) != c.TensorFLOPs || c.Peak(Simdgroup) != c.FLOPs {
			t.Errorf("%s: tensor ops %v (%g FLOP/s), want %v", c.Name, c.HasTensorOps(), c.TensorFLOPs, m5)
		}
		if m5 && c.TensorFLOPs < 3*c.FLOPs {
			t.Errorf("%s: tensor ops %g FLOP/s against the ALUs' %g", c.Name, c.TensorFLOPs, c.FLOPs)
		}
	}
	if c, _ := ChipNamed("M5 Max"); c.TensorFLOPs != 1024*40*1.75e9 {
		t.Errorf("M5 Max: %g tensor FLOP/s", c.TensorFLOPs)
	}
}

// TestChipTime: tensor-op FLOPs take the neural accelerators' time, added to the ALU FLOPs'
// time, against the traffic's; a chip without neural accelerators cannot time them, and work
// without them times as Seconds does.
func TestChipTime(t *testing.T) {
	m5, _ := ChipNamed("M5 Max")
	w := Work{Bytes: int64(m5.Bandwidth / 10), FLOPs: m5.FLOPs/2 + m5.TensorFLOPs, TensorFLOPs: m5.TensorFLOPs}
	if got, err := m5.Time(w); err != nil || math.Abs(got-1.5) > 1e-9 {
		t.Errorf("M5 Max: %g s (%v), want 1.5: half a second on the ALUs and one on tensor ops", got, err)
	}
	if got, err := m5.Time(Work{Bytes: int64(2 * m5.Bandwidth), FLOPs: m5.TensorFLOPs, TensorFLOPs: m5.TensorFLOPs}); err != nil || got != 2 {
		t.Errorf("M5 Max, bandwidth-bound: %g s (%v), want 2", got, err)
	}
	m4, _ := ChipNamed("M4 Max")
	if _, err := m4.Time(w); err == nil || !strings.Contains(err.Error(), "M4 Max has no neural accelerators") {
		t.Errorf("M4 Max with tensor FLOPs: %v", err)
	}
	alu := Work{Bytes: 1e9, FLOPs: 3e13}
	for _, c := range []Chip{m4, m5} {
		if got, err := c.Time(alu); err != nil || got != c.Seconds(alu.Bytes, alu.FLOPs) {
			t.Errorf("%s: ALU work %g s (%v), Seconds %g", c.Name, got, err, c.Seconds(alu.Bytes, alu.FLOPs))
		}
	}
}

func TestRouteString(t *testing.T) {
	if Simdgroup.String() != "simdgroup" || Tensor.String() != "tensor" || Route(7).String() != "Route(7)" {
		t.Errorf("routes %v %v %v", Simdgroup, Tensor, Route(7))
	}
}
