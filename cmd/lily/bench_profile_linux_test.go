//go:build linux

package main

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/config"
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
