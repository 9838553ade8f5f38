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

	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/cases"
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

func emuBackend(w *model.Weights) (OwnedBackend, error) {
	b, err := gpu.NewEmu(w, gpu.EmuOptions{GPUOptions: gpu.GPUOptions{MaxCtx: 64, Chunks: gpu.Buckets(16)}, Threads: emu.Shuffle, GroupOrder: emu.Shuffle, Seed: 3})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// TestSelftestEmu runs every case, the coverage check and the end-to-end check on tiny-a, on the
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
		t.Logf("%-5v %-18s worst %.3g tol %.3g  %v  (%s)", r.Pass, r.Case, r.WorstError, r.Tolerance, r.Duration.Round(1e6), r.Shape)
		if !r.Pass || r.Err != nil {
			t.Errorf("%s: pass %v, worst %g (tol %g) at %s, err %v", r.Case, r.Pass, r.WorstError, r.Tolerance, r.Worst, r.Err)
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
// element) and fails a pipeline: each case reports the failure with its error and its worst
// element.
func TestSelftestReportsFailures(t *testing.T) {
	d := device(t)
	const qmv, conv, embed, argmax = "qmv_q4/2048x2048", "conv1d_step/c8192_g256_4steps", "embed_q4/1000x2048_tok777", "argmax_partial/n248320_g128_tg256_model"
	const gdn = "gdn_step/hk16_hv32_dk128_dv128_nsg32_2steps"
	corrupt := func(check string, out []byte) {
		switch check {
		case qmv: // one row off by 0.05 (about 2e-4 of Σ|w·x|)
			f := cases.F32s(out[:4])[0]
			copy(out, cases.Encode([]float32{f + 0.05}))
		case gdn: // an element the kernel "did not write"
			copy(out, []byte{0xFF, 0xFF, 0xFF, 0xFF})
		case argmax: // step.token
			if len(out) == 8 {
				copy(out[4:], cases.Encode([]uint32{12345}))
			}
		case "conv1d_step/c8192_g256_4steps": // u[0] (not the window) off by 0.5
			if len(out) == 4*8192 {
				copy(out, cases.Encode([]float32{cases.F32s(out[:4])[0] + 0.5}))
			}
		}
	}
	rs := Run(context.Background(), d, Options{Only: []string{qmv, gdn, argmax, conv, embed}, corrupt: corrupt})
	got := map[string]Result{}
	for _, r := range rs {
		got[r.Case] = r
		t.Logf("%s: pass %v worst %g at %s err %v", r.Case, r.Pass, r.WorstError, r.Worst, r.Err)
	}
	if r := got[qmv]; r.Pass || !(r.WorstError > r.Tolerance) || !strings.HasPrefix(r.Worst, "y[0] = ") { // and off the float64 product
		t.Errorf("%s corrupted: %+v, want a failure by its worst error at y[0]", qmv, r)
	}
	if r := got[gdn]; r.Pass || !math.IsNaN(r.WorstError) || !strings.Contains(r.Worst, "y[0] = NaN") {
		t.Errorf("%s with a NaN output: %+v, want a NaN failure at y[0]", gdn, r)
	}
	if r := got[argmax]; r.Pass || r.Err == nil || !strings.Contains(r.Err.Error(), "chose id 12345") || !strings.HasPrefix(r.Worst, "step.token = 12345, want ") {
		t.Errorf("argmax corrupted: %+v, want a wrong-id failure", r)
	}
	if r := got[conv]; r.Pass || r.Err != nil || !(r.WorstError > r.Tolerance) || r.Tolerance != 1e-6 || r.Kernel != "conv1d_step" ||
		!strings.Contains(r.Worst, ": u[0] = ") {
		t.Errorf("%s corrupted: %+v, want a failure by its worst error at u[0] against the emulator's tolerance", conv, r)
	}
	if r := got[embed]; !r.Pass || r.WorstError != 0 {
		t.Errorf("%s (untouched) failed: %+v", embed, r)
	}
	if len(rs) != 5 || Failed(rs) != 4 {
		t.Fatalf("%d results, %d failed; want 5 and 4", len(rs), Failed(rs))
	}

	const router, routerNorm = "moe_router/h2048_e64_k8_i512_si512_tg1024", "moe_router_norm/h2048_e64_k8_i512_si512_tg1024"
	rs = Run(context.Background(), failingDevice{d, "moe_router"}, Options{Only: []string{router, routerNorm}})
	if len(rs) != 2 || rs[0].Pass || rs[0].Err == nil || !strings.Contains(rs[0].Err.Error(), "injected pipeline failure") || !rs[1].Pass {
		t.Fatalf("failing pipeline: %+v", rs)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if rs := Run(ctx, d, Options{Only: []string{"qmv_q8/256x2048"}}); len(rs) != 1 || rs[0].Pass || !errors.Is(rs[0].Err, context.Canceled) {
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
	bad := func(w *model.Weights) (OwnedBackend, error) {
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

// noTensor is a device without tensor ops: the emulator with exec.TensorDevice hidden.
type noTensor struct{ exec.Device }

// TestSelftestSkipsTensorCases: on a device without tensor ops each tensor-op case is skipped,
// saying why, and passes; on the emulator the same cases run.
func TestSelftestSkipsTensorCases(t *testing.T) {
	var only []string
	for _, c := range cases.All() {
		if c.Tensor && !c.Heavy {
			only = append(only, c.Name)
		}
	}
	if len(only) == 0 {
		t.Fatal("no tensor-op cases")
	}
	for _, r := range Run(context.Background(), noTensor{device(t)}, Options{Only: only}) {
		if !r.Pass || !strings.Contains(r.Skipped, "does not run tensor-op kernels") || r.Duration != 0 {
			t.Errorf("%s on a device without tensor ops: pass %v, skipped %q", r.Case, r.Pass, r.Skipped)
		}
	}
	for _, r := range Run(context.Background(), device(t), Options{Only: only[:1]}) {
		if !r.Pass || r.Skipped != "" || r.Duration == 0 {
			t.Errorf("%s on the emulator: pass %v, skipped %q, err %v", r.Case, r.Pass, r.Skipped, r.Err)
		}
	}
}
