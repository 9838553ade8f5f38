package plan

import "strings"

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
// the prefill model has used it. M5's neural accelerators (about 70 TFLOP/s on an M5 Max) are
// reachable only through Metal 4 tensor ops, which these kernels do not use, so M5 chips are
// modelled at their ALUs' rate.
var Chips = []Chip{
	{"M1", 68.25e9, 2.6e12},
	{"M1 Pro", 200e9, 5.2e12},
	{"M1 Max", 400e9, 10.6e12},
	{"M1 Ultra", 800e9, 21e12},
	{"M2", 100e9, 3.6e12},
	{"M2 Pro", 200e9, 6.8e12},
	{"M2 Max", 400e9, 13.6e12},
	{"M2 Ultra", 800e9, 27.2e12},
	{"M3", 100e9, 3.6e12},
	{"M3 Pro", 150e9, 6.4e12},
	{"M3 Max", 400e9, 14.3e12},
	{"M3 Ultra", 819e9, 28.6e12},
	{"M4", 120e9, 4.3e12},
	{"M4 Pro", 273e9, 8.6e12},
	{"M4 Max", 546e9, 17.2e12},
	{"M5", 153e9, 4.5e12},
	{"M5 Pro", 307e9, 9e12},
	{"M5 Max", 614e9, 18e12},
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

// Seconds is the time model Lily's modelled rates use: work of bytes of DRAM traffic and flops
// FLOPs takes the longer of the two at 100% of the chip's peaks (traffic and compute overlap
// fully; no per-dispatch cost, which the plans' dispatch counts report beside it).
func (c Chip) Seconds(bytes int64, flops float64) float64 {
	return max(float64(bytes)/c.Bandwidth, flops/c.FLOPs)
}
