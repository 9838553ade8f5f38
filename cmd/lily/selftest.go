package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/internal/report"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/gpu"
	"github.com/lilyformac/lily/metal/selftest"
)

// selftestOutput is the JSON of `lily doctor --selftest --output json`.
type selftestOutput struct {
	OK       bool           `json:"ok"`
	Device   string         `json:"device"`   // "metal" or "emu"
	Emulated bool           `json:"emulated"` // the kernels ran on the MSL emulator, not a GPU
	Checks   []report.Check `json:"checks"`
}

// selftestChunk is the end-to-end check's largest prefill chunk: its 25-token batched prompt
// runs one of 16 and one of 8 (gpu.Buckets), the 16- and 8-row tiles.
const selftestChunk = 16

// selftestGPU is the GPU decode backend the end-to-end check compares with engine/cpu: Metal on
// macOS, the emulator elsewhere (gpu.NewEmu fails off Linux).
func selftestGPU(w *model.Weights) (selftest.OwnedBackend, error) {
	const maxCtx = 64
	if runtime.GOOS == "darwin" {
		b, err := gpu.NewMetal(w, gpu.GPUOptions{MaxCtx: maxCtx, Chunks: gpu.Buckets(selftestChunk)})
		if err != nil {
			return nil, err
		}
		return b, nil
	}
	b, err := gpu.NewEmu(w, gpu.EmuOptions{GPUOptions: gpu.GPUOptions{MaxCtx: maxCtx, Chunks: gpu.Buckets(selftestChunk)}})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// selftestOnly restricts the checks (tests); nil runs them all.
var selftestOnly []string

// runSelftest is `lily doctor --selftest`: every kernel against its Go reference on the device,
// then the demo checkpoint end to end against the CPU backend.
func runSelftest(cmd *cobra.Command, output string, only []string) error {
	if output != "json" && output != "text" {
		return fmt.Errorf("--output %q: expected json or text", output)
	}
	if only == nil {
		only = selftestOnly
	}
	out := cmd.OutOrStdout()
	start := time.Now()
	dev, name, err := selftest.DefaultDevice()
	if err != nil {
		return fmt.Errorf("selftest: device: %w", err)
	}
	if c, ok := dev.(exec.Closer); ok { // exec.MetalDevice: queue, libraries, pipelines
		defer c.Close()
	}
	emulated := name != "metal"
	if output == "text" {
		if emulated {
			fmt.Fprintf(out, "selftest on %s: the MSL emulator on the CPU (%s/%s), not a GPU — run it on a Mac to test Metal\n", name, runtime.GOOS, runtime.GOARCH)
		} else {
			fmt.Fprintln(out, "selftest on the Metal GPU")
		}
	}
	opts := selftest.Options{Only: only, GPU: selftestGPU}
	if output == "text" {
		opts.Progress = func(r selftest.Result) { printSelftest(out, r) }
	}
	results := runSelftestOn(cmd.Context(), dev, opts)
	failed := selftest.Failed(results)
	if output == "json" {
		o := selftestOutput{OK: failed == 0, Device: name, Emulated: emulated, Checks: []report.Check{}}
		for _, r := range results {
			o.Checks = append(o.Checks, report.CheckOf(r))
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(o); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(out, "%d of %d checks passed in %.1f s\n", len(results)-failed, len(results), time.Since(start).Seconds())
	}
	if failed > 0 {
		return fmt.Errorf("selftest: %d of %d checks failed", failed, len(results))
	}
	return nil
}

func printSelftest(w io.Writer, r selftest.Result) {
	status := "PASS"
	if !r.Pass {
		status = "FAIL"
	}
	if r.Skipped != "" {
		fmt.Fprintf(w, "SKIP  %-18s %s (%s)\n", r.Case, r.Shape, r.Skipped)
		return
	}
	fmt.Fprintf(w, "%s  %-18s worst=%-9.3g tol=%-7.3g %6d ms  %s\n", status, r.Case, r.WorstError, r.Tolerance, r.Duration.Milliseconds(), r.Shape)
	if !r.Pass && r.Worst != "" {
		fmt.Fprintf(w, "      %s (%s): worst at %s\n", r.Case, r.Kernel, r.Worst)
	}
	if r.Err != nil {
		fmt.Fprintf(w, "      %s: %v\n", r.Case, r.Err)
	}
}

// runSelftestOn runs the selftest's cases and checks on dev, then the demo checkpoint end to end
// (opts.Weights is loaded here); a checkpoint that does not load is a failed "e2e" result.
func runSelftestOn(ctx context.Context, dev exec.Device, opts selftest.Options) []selftest.Result {
	var loadErr error
	if !selftestSelected(opts.Only, "e2e") {
		// no end-to-end check: nothing to load
	} else if dir, err := demoDir(); err != nil {
		loadErr = fmt.Errorf("demo checkpoint: %w", err)
	} else if w, err := model.Load(dir); err != nil {
		loadErr = fmt.Errorf("demo checkpoint: %w", err)
	} else {
		defer w.Close()
		opts.Weights = w
	}
	results := selftest.Run(ctx, dev, opts)
	if loadErr != nil {
		r := selftest.Result{Case: "e2e", Kernel: "e2e", WorstError: math.NaN(), Err: loadErr}
		if opts.Progress != nil {
			opts.Progress(r)
		}
		results = append(results, r)
	}
	return results
}

// selftestSelected says whether only (selftest.Options.Only) asks for name: no entries ask for all.
func selftestSelected(only []string, name string) bool {
	return len(only) == 0 || slices.Contains(only, name)
}
