//go:build linux

package selftest

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/emu"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/gpu"
	"github.com/lilyformac/lily/metal/kernels"
)

var (
	devOnce sync.Once
	dev     exec.Device
	devErr  error
)

// device compiles every kernel for the emulator once per test process.
func device(t *testing.T) exec.Device {
	t.Helper()
	devOnce.Do(func() { dev, _, devErr = DefaultDevice() })
	if errors.Is(devErr, emu.ErrNoClang) {
		t.Fatalf("%v (the emulator needs clang 17 or later: apt-get install clang-19)", devErr)
	}
	if devErr != nil {
		t.Fatal(devErr)
	}
	return dev
}

func emuBackend(w *model.Weights) (backend.Backend, error) {
	b, err := gpu.NewEmu(w, gpu.EmuOptions{MaxCtx: 64, Threads: emu.Shuffle, GroupOrder: emu.Shuffle, Seed: 3, Chunks: gpu.Buckets(16)})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// TestSelftestEmu runs every check, the coverage check and the end-to-end check on tiny-a, on the
// emulator: all pass.
func TestSelftestEmu(t *testing.T) {
	w, err := model.Load("../../testdata/golden/tiny-a")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rs := Run(context.Background(), device(t), Options{Weights: w, GPU: emuBackend})
	if len(rs) != len(Names())+2 {
		t.Fatalf("%d results, want %d checks + coverage + e2e", len(rs), len(Names()))
	}
	for _, r := range rs {
		t.Logf("%-5v %-18s worst %.3g tol %.3g  %v  (%s)", r.Pass, r.Kernel, r.WorstError, r.Tolerance, r.Duration.Round(1e6), r.Shape)
		if !r.Pass || r.Err != nil {
			t.Errorf("%s: pass %v, worst %g (tol %g), err %v", r.Kernel, r.Pass, r.WorstError, r.Tolerance, r.Err)
		}
	}
	if rs[len(rs)-2].Kernel != "coverage" || rs[len(rs)-1].Kernel != "e2e" || Failed(rs) != 0 {
		t.Fatalf("%d failed", Failed(rs))
	}
}

// failingDevice fails one kernel's pipeline.
type failingDevice struct {
	exec.Device
	kernel string
}

func (d failingDevice) Pipeline(kernel string, c map[int]any) (exec.Pipeline, error) {
	if kernel == d.kernel {
		return nil, errors.New("injected pipeline failure")
	}
	return d.Device.Pipeline(kernel, c)
}

// TestSelftestReportsFailures corrupts outputs after the step (a wrong value, an unwritten
// element) and fails a pipeline: each check reports the failure with its error.
func TestSelftestReportsFailures(t *testing.T) {
	d := device(t)
	corrupt := func(check string, out []byte) {
		switch check {
		case "qmv_q4": // one row off by 0.05 (about 2e-4 of Σ|w·x|)
			f := f32s(out[:4])[0]
			copy(out, enc([]float32{f + 0.05}))
		case "gdn_step": // an element the kernel "did not write"
			copy(out, []byte{0xFF, 0xFF, 0xFF, 0xFF})
		case "argmax": // step.token
			if len(out) == 8 {
				copy(out[4:], enc([]uint32{12345}))
			}
		}
	}
	rs := Run(context.Background(), d, Options{Only: []string{"qmv_q4", "gdn_step", "argmax", "conv1d_step"}, corrupt: corrupt})
	got := map[string]Result{}
	for _, r := range rs {
		got[r.Kernel] = r
		t.Logf("%s: pass %v worst %g err %v", r.Kernel, r.Pass, r.WorstError, r.Err)
	}
	if r := got["qmv_q4"]; r.Pass || !(r.WorstError > r.Tolerance) || r.Err != nil {
		t.Errorf("qmv_q4 corrupted: %+v, want a failure by its worst error", r)
	}
	if r := got["gdn_step"]; r.Pass || !math.IsNaN(r.WorstError) {
		t.Errorf("gdn_step with a NaN output: %+v, want a NaN failure", r)
	}
	if r := got["argmax"]; r.Pass || r.Err == nil || !strings.Contains(r.Err.Error(), "chose id 12345") {
		t.Errorf("argmax corrupted: %+v, want a wrong-id failure", r)
	}
	if r := got["conv1d_step"]; !r.Pass {
		t.Errorf("conv1d_step (untouched) failed: %+v", r)
	}
	if len(rs) != 4 || Failed(rs) != 3 {
		t.Fatalf("%d results, %d failed; want 4 and 3", len(rs), Failed(rs))
	}

	rs = Run(context.Background(), failingDevice{d, "moe_router"}, Options{Only: []string{"moe_router", "moe_router_norm"}})
	if len(rs) != 2 || rs[0].Pass || rs[0].Err == nil || !strings.Contains(rs[0].Err.Error(), "injected pipeline failure") || !rs[1].Pass {
		t.Fatalf("failing pipeline: %+v", rs)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if rs := Run(ctx, d, Options{Only: []string{"qmv_q8"}}); len(rs) != 1 || rs[0].Pass || !errors.Is(rs[0].Err, context.Canceled) {
		t.Fatalf("cancelled: %+v", rs)
	}
}

// TestEndToEndDetectsWrongBackend compares engine/cpu with a GPU backend on different weights
// (a corrupted final norm): the logits differ beyond the tolerance.
func TestEndToEndDetectsWrongBackend(t *testing.T) {
	w, err := model.Load("../../testdata/golden/tiny-a")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	bad := func(w *model.Weights) (backend.Backend, error) {
		w2 := *w
		w2.FinalNorm = append([]float32(nil), w.FinalNorm...)
		for i := range w2.FinalNorm {
			w2.FinalNorm[i] *= 1.5
		}
		return emuBackend(&w2)
	}
	r := EndToEnd(context.Background(), w, bad, E2EOptions{Steps: 2})
	t.Logf("pass %v worst %g err %v", r.Pass, r.WorstError, r.Err)
	if r.Pass || !(r.WorstError > r.Tolerance) {
		t.Fatalf("a wrong GPU backend passed: %+v", r)
	}
}

// TestDefaultDeviceCompilesEveryShippedFile: the selftest's device has every kernel of every
// embedded .metal file.
func TestDefaultDeviceCompilesEveryShippedFile(t *testing.T) {
	have := device(t).(*exec.EmuDevice).Lib.Kernels()
	for _, name := range kernels.Files() {
		for _, k := range exec.KernelNames(kernels.Source(name)) {
			if !slices.Contains(have, k) {
				t.Errorf("%s: kernel %s not compiled by DefaultDevice", name, k)
			}
		}
	}
}
