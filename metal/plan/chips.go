package plan

import (
	"fmt"
	"strings"
)

// Chip is an Apple silicon chip's peak rates, for the models that turn bytes and FLOPs into time
// (`lily bench --plan --prefill` per chip) and for a profile's share of peak bandwidth.
type Chip struct {
	Name string // as Metal's device name spells it after "Apple ": "M4 Max"
	// Bandwidth is the peak unified-memory bandwidth in bytes/s, as Apple publishes it for the
	// chip's top configuration.
	Bandwidth float64
	// FLOPs is the GPU's peak float32 throughput in FLOP/s, the rate the kernels' simdgroup
	// matrices run at (Apple GPUs since M1 run half and float simdgroup products at the same rate,
	// on the shader ALUs: cores × 128 lanes × 2 FLOP × clock), for the top GPU configuration.
	FLOPs float64
	// TensorFLOPs is the peak FP16 matrix throughput of the GPU cores' neural accelerators in
	// FLOP/s, which only Metal 4 tensor ops (mpp::tensor_ops::matmul2d) reach; 0 where the chip
	// has none (M1 to M4).
	TensorFLOPs float64
}

// Chips are the Apple silicon chips, M1 to M5, base, Pro, Max and Ultra: the one table Lily's
// models read.
//
// Bandwidth: Apple's published unified-memory bandwidth (apple.com newsroom and tech specs of
// each chip's Macs): M1 68.25 GB/s; M1 Pro 200, M1 Max 400, M1 Ultra 800; M2 100, M2 Pro 200,
// M2 Max 400, M2 Ultra 800; M3 100, M3 Pro 150, M3 Max 400 (300 on the 30-core-GPU binning),
// M3 Ultra 819; M4 120, M4 Pro 273, M4 Max 546 (410 on the 32-core-GPU binning); M5 153, M5 Pro
// 307, M5 Max 614. There is no M4 Ultra, and no M5 Ultra yet.
//
// FLOPs: Apple's figures where it gave them (M1 2.6, M1 Pro 5.2, M1 Max 10.4, M1 Ultra 21; M2
// 3.6, M2 Pro 6.8, M2 Max 13.6, M2 Ultra 27.2 TFLOP/s), otherwise cores × 128 × 2 × the GPU's
// clock: M3 10 cores, Pro 18, Max 40, Ultra 80 at about 1.4 GHz; M4 10, Pro 20, Max 40 at about
// 1.68 GHz; M5 10, Pro 20, Max 40 at about 1.75 GHz. M1 Max is kept at 10.6 (its 1.296 GHz) as
// the prefill model has used it. FLOPs is the ALUs' rate on every chip, M5 included: what
// simdgroup-matrix kernels get.
//
// TensorFLOPs, M5 only, is an estimate, not a published figure: microbenchmarks of the A19's GPU
// neural accelerators (Taras Zakharko, "Investigating the GPU Neural Accelerators on Apple
// A19/M5") measure about 1,024 FP16 FLOP per GPU core per cycle, scaled here to M5's cores and
// clock: 1024 × 10, 20, 40 cores × 1.75 GHz = 17.9, 35.8, 71.7 TFLOP/s.
var Chips = []Chip{
	{"M1", 68.25e9, 2.6e12, 0},
	{"M1 Pro", 200e9, 5.2e12, 0},
	{"M1 Max", 400e9, 10.6e12, 0},
	{"M1 Ultra", 800e9, 21e12, 0},
	{"M2", 100e9, 3.6e12, 0},
	{"M2 Pro", 200e9, 6.8e12, 0},
	{"M2 Max", 400e9, 13.6e12, 0},
	{"M2 Ultra", 800e9, 27.2e12, 0},
	{"M3", 100e9, 3.6e12, 0},
	{"M3 Pro", 150e9, 6.4e12, 0},
	{"M3 Max", 400e9, 14.3e12, 0},
	{"M3 Ultra", 819e9, 28.6e12, 0},
	{"M4", 120e9, 4.3e12, 0},
	{"M4 Pro", 273e9, 8.6e12, 0},
	{"M4 Max", 546e9, 17.2e12, 0},
	{"M5", 153e9, 4.5e12, 17.92e12},
	{"M5 Pro", 307e9, 9e12, 35.84e12},
	{"M5 Max", 614e9, 18e12, 71.68e12},
}

// ChipNamed finds a chip by its name or a device name that holds it ("Apple M4 Max",
// "m4 max"): the longest name that matches as whole words, so "Apple M4 Pro" is M4 Pro, not M4.
func ChipNamed(name string) (Chip, bool) {
	words := " " + strings.ToLower(strings.Join(strings.Fields(name), " ")) + " "
	best := -1
	for i, c := range Chips {
		if strings.Contains(words, " "+strings.ToLower(c.Name)+" ") && (best < 0 || len(c.Name) > len(Chips[best].Name)) {
			best = i
		}
	}
	if best < 0 {
		return Chip{}, false
	}
	return Chips[best], true
}

// Seconds is Time for work whose FLOPs all run on the shader ALUs (no tensor ops), which every
// chip can time.
func (c Chip) Seconds(bytes int64, flops float64) float64 {
	t, _ := c.Time(Work{Bytes: bytes, FLOPs: flops})
	return t
}

// Work is what a plan, or part of one, costs: Bytes of DRAM traffic and FLOPs of matrix work, of
// which TensorFLOPs run on tensor ops (Dispatch.Tensor) and the rest on the shader ALUs.
type Work struct {
	Bytes              int64
	FLOPs, TensorFLOPs float64
}

// Time is the time model Lily's modelled rates use: work takes the longer of its traffic and its
// compute at 100% of the chip's peaks (traffic and compute overlap fully; no per-dispatch cost,
// which the plans' dispatch counts report beside it). The ALU and the tensor-op FLOPs add: they
// are different dispatches, ordered by barriers, so one does not hide the other. Tensor FLOPs on
// a chip without neural accelerators are an error: the route that put them there was wrong.
func (c Chip) Time(w Work) (float64, error) {
	compute := (w.FLOPs - w.TensorFLOPs) / c.FLOPs
	if w.TensorFLOPs > 0 {
		if !c.HasTensorOps() {
			return 0, fmt.Errorf("plan: %s has no neural accelerators for %.4g tensor-op FLOPs", c.Name, w.TensorFLOPs)
		}
		compute += w.TensorFLOPs / c.TensorFLOPs
	}
	return max(float64(w.Bytes)/c.Bandwidth, compute), nil
}

// HasTensorOps reports whether the chip's GPU cores have neural accelerators (TensorFLOPs).
func (c Chip) HasTensorOps() bool { return c.TensorFLOPs > 0 }

// Peak is the chip's peak matrix throughput on route r, in FLOP/s: 0 for Tensor on a chip
// without neural accelerators.
func (c Chip) Peak(r Route) float64 {
	if r == Tensor {
		return c.TensorFLOPs
	}
	return c.FLOPs
}
