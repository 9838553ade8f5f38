//go:build linux

package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/draft"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/gpu"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
	"github.com/lilyformac/lily/metal/profile"
)

// TestBenchProfile: `bench --profile --demo --backend emu --prefill M` times every kernel the
// decode step runs (in a sampled request's mode, as `bench --plan` models it) and, in a second
// object, every kernel of a chunk of M prompt tokens: each kernel's modeled bytes add up to the
// step's (plan.Stats, within 1%: the readback's 24 bytes), the slowest comes first, and
// peak_share is the achieved bandwidth over the chip table's.
func TestBenchProfile(t *testing.T) {
	out, err := execute(t, "bench", "--profile", "--demo", "--backend", "emu", "--ctx", "4", "--decode-steps", "1",
		"--prefill", "8", "--warmup=false", "--chip", "M4 Max", "--output", "json")
	if err != nil {
		t.Fatal(err, out)
	}
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err, out)
	}
	for _, obj := range []string{"profile", "prefill_profile"} {
		for _, k := range []string{"device", "step_bytes", "kernels"} {
			if raw[obj][k] == nil {
				t.Fatalf("%s has no %q: %s", obj, k, out)
			}
		}
	}
	var p profile.Output
	if err := json.Unmarshal([]byte(out), &p); err != nil || p.Profile == nil || p.PrefillProfile == nil {
		t.Fatal(err, out)
	}
	dir, err := demoDir()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	step, err := decode.Build(cfg, decode.Options{MaxCtx: 16, Chunks: []int{8}})
	if err != nil {
		t.Fatal(err)
	}
	m4, _ := plan.ChipNamed("M4 Max")
	var defined []string // every kernel the sources define, as [[host_name]] or function name
	for _, f := range gpu.KernelFiles {
		defined = append(defined, exec.KernelNames(kernels.Source(f))...)
	}
	for _, c := range []struct {
		p    *profile.Step
		mode string
	}{{p.Profile, decode.ModeSample}, {p.PrefillProfile, decode.ChunkModes(8).Run}} {
		want := []string{"step_copy"} // the readback every step of a session ends with
		for _, d := range step.Plan.Dispatches {
			if d.RunsIn(c.mode) && !slices.Contains(want, d.Kernel) {
				want = append(want, d.Kernel)
			}
		}
		var got []string
		var bytes int64
		for i, k := range c.p.Kernels {
			got = append(got, k.Kernel)
			bytes += k.Bytes
			if i > 0 && k.MS > c.p.Kernels[i-1].MS {
				t.Fatalf("%s: %s (%g ms) after %s (%g ms): not sorted by time", c.mode, k.Kernel, k.MS, c.p.Kernels[i-1].Kernel, k.MS)
			}
			if !slices.Contains(defined, k.Kernel) {
				t.Fatalf("%s: kernel %q is not spelled as in the .metal sources", c.mode, k.Kernel)
			}
			if k.Dispatches < 1 || k.MS <= 0 || k.Bytes <= 0 {
				t.Fatalf("%s: kernel %+v", c.mode, k)
			}
			if share := float64(k.Bytes) / (k.MS / 1e3) / m4.Bandwidth; share <= 0 || math.Abs(share-k.PeakShare) > share*1e-4 {
				t.Fatalf("%s: %s peak_share %g, want %g of M4 Max's %g B/s", c.mode, k.Kernel, k.PeakShare, share, m4.Bandwidth)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: kernels %v, want every kernel of the plan %v", c.mode, got, want)
		}
		if r := float64(bytes) / float64(c.p.StepBytes); c.p.StepBytes <= 0 || r < 0.99 || r > 1.01 {
			t.Fatalf("%s: the kernels' bytes %d against step_bytes %d", c.mode, bytes, c.p.StepBytes)
		}
		if c.p.Mode != c.mode || c.p.Chip != "M4 Max" || c.p.PeakGBs != 546 || c.p.Steps != 1 || c.p.Timing != "wall" || !strings.HasPrefix(c.p.Device, "emu") {
			t.Fatalf("%s: %+v", c.mode, c.p)
		}
	}
	if p.PrefillProfile.Chunk != 8 || p.PrefillProfile.Context != 4 {
		t.Fatalf("prefill profile %+v", p.PrefillProfile)
	}
	if _, err := execute(t, "bench", "--profile", "--demo", "--backend", "cpu"); err == nil || !strings.Contains(err.Error(), "--backend metal") {
		t.Fatalf("--profile on cpu: %v", err)
	}
	if _, err := execute(t, "bench", "--profile", "--demo", "--backend", "emu", "--chip", "M9"); err == nil || !strings.Contains(err.Error(), "chip table") {
		t.Fatalf("--chip M9: %v", err)
	}
}

// TestBenchProfileRows: `bench --profile --rows=2 --demo --backend emu` times the decode step of
// one and of two sequences at each --contexts, and the verify step of one sequence's group of
// one and of two rows, against the group model of the demo checkpoint on the chip named, and
// writes the calibration that model then accepts: at every measured shape the calibrated cost
// is the measured time, plain and verifying.
func TestBenchProfileRows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m4-max.json")
	out, err := execute(t, "bench", "--profile", "--rows=2", "--demo", "--backend", "emu", "--contexts", "3,1", "--decode-steps", "1",
		"--warmup=false", "--chip", "M4 Max", "--calibration", path, "--output", "json")
	if err != nil {
		t.Fatal(err, out)
	}
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err, out)
	}
	for _, k := range []string{"device", "kernel_timing", "chip", "shapes", "calibration"} {
		if raw["rows_profile"][k] == nil {
			t.Fatalf("rows_profile has no %q: %s", k, out)
		}
	}
	var p profile.Output
	if err := json.Unmarshal([]byte(out), &p); err != nil || p.RowsProfile == nil || p.Profile != nil {
		t.Fatal(err, out)
	}
	r := p.RowsProfile
	if r.Chip != "M4 Max" || r.KVBits != 16 || r.Steps != 1 || r.KernelTiming != "wall" || r.CalibrationFile != path || len(r.Shapes) != 4 {
		t.Fatalf("%+v", r)
	}
	dir, err := demoDir()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	m4, _ := plan.ChipNamed("M4 Max")
	m, err := decode.NewGroupModel(cfg, 3+2+1, 16, m4) // the context the bench sizes: 3 cached, 2 steps, 1 spare
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range r.Shapes {
		want := []int{3, 1}[i/2]
		one := r.Shapes[i-i%2]
		modeled := m.Step(slices.Repeat([]draft.Group{{Rows: 1, Ctx: want}}, s.Rows))
		switch {
		case s.Rows != 1+i%2 || s.Context != want:
			t.Errorf("shape %d: %d rows at %d, want %d at %d", i, s.Rows, s.Context, 1+i%2, want)
		case !(s.StepS > 0 && s.KernelsS > 0) || !near(s.ModeledS, modeled, 1e-5) || !near(s.Ratio, s.StepS/s.ModeledS, 1e-5):
			t.Errorf("shape %+v: modeled %g s", s, modeled)
		case !near(s.VsOne, s.StepS/one.StepS, 1e-5) || !near(s.ModeledVsOne, s.ModeledS/one.ModeledS, 1e-5):
			t.Errorf("shape %+v against %+v", s, one)
		case s.Rows == 2 && !(s.ModeledVsOne > 1 && s.ModeledVsOne < 2): // the weights read once for both
			t.Errorf("two sequences modeled at %g times one", s.ModeledVsOne)
		case !(s.VerifyS > 0) || !near(s.VerifyModeledS, m.Step([]draft.Group{{Rows: s.Rows, Ctx: want}}), 1e-5) || !near(s.VerifyVsOne, s.VerifyS/one.StepS, 1e-5):
			t.Errorf("shape %+v: the verify step", s)
		}
	}
	cost, err := decode.Calibrated(m, path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range r.Shapes {
		if got := cost.Step(slices.Repeat([]draft.Group{{Rows: 1, Ctx: s.Context}}, s.Rows)); !near(got, s.StepS, 1e-5) {
			t.Errorf("calibrated %d rows at %d: %g s, measured %g", s.Rows, s.Context, got, s.StepS)
		}
		if got := cost.Step([]draft.Group{{Rows: s.Rows, Ctx: s.Context}}); s.Rows > 1 && !near(got, s.VerifyS, 1e-5) {
			t.Errorf("calibrated verify group of %d rows at %d: %g s, measured %g", s.Rows, s.Context, got, s.VerifyS)
		}
	}
	if c, err := decode.ReadCalibration(path); err != nil || c.Model != "demo" || !strings.HasPrefix(c.Device, "emu") {
		t.Errorf("calibration %+v: %v", c, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--rows"}, "needs --chip"},
		{[]string{"--rows=2", "--prefill", "8", "--chip", "M4 Max"}, "pick one"},
		{[]string{"--rows=9", "--chip", "M4 Max"}, "--rows 9: expected 1 to 8"},
	} {
		args := append([]string{"bench", "--profile", "--demo", "--backend", "emu"}, c.args...)
		if _, err := execute(t, args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

func near(a, b, rel float64) bool { return math.Abs(a-b) <= rel*math.Max(math.Abs(a), math.Abs(b)) }
