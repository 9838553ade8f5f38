package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/lifecycle"
	"github.com/lilyformac/lily/engine/lifecycle/syscheck"
	"github.com/lilyformac/lily/internal/wiredlimit"
	"github.com/lilyformac/lily/metal/gpu"
	"github.com/lilyformac/lily/metal/mtl"
)

// doctorOutput is the stable JSON contract of `lily doctor --output json`.
type doctorOutput struct {
	OK     bool             `json:"ok"` // no check failed
	Checks []syscheck.Check `json:"checks"`
}

func newDoctorCmd() *cobra.Command {
	var output, model, report string
	var selftest bool
	var only []string
	cmd := &cobra.Command{
		Use:   "doctor [--output json] [--model DIR] [--selftest [--only NAMES]] [--report FILE]",
		Short: "Check that this machine can run Lily, and how to fix what it cannot",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if report != "" {
				return runReport(cmd, report, output, model, only)
			}
			if selftest {
				return runSelftest(cmd, output, only)
			}
			return runDoctor(cmd, output, model)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&selftest, "selftest", false, "run every kernel on the GPU against its Go reference, then a tiny checkpoint against the CPU backend")
	f.StringSliceVar(&only, "only", nil, "with --selftest or --report: run only these cases and checks (a case's name, its kernel family such as qmv_q4, or e2e); coverage runs only without it")
	f.StringVar(&report, "report", "", "run the selftest, the system checks and a per-kernel profile, and write everything a maintainer needs to this JSON file (attach it to a bug report)")
	f.StringVar(&output, "output", "text", "text or json")
	f.StringVar(&model, "model", "", "checkpoint directory to check (default: the pulled one)")
	return cmd
}

func runDoctor(cmd *cobra.Command, output, model string) error {
	if output != "json" && output != "text" {
		return fmt.Errorf("--output %q: expected json or text", output)
	}
	cfg := syscheck.Config{DataDir: lifecycle.ModelsDir(), ModelDir: model, Context: productionContext}
	if model == "" {
		cfg.ModelDir, cfg.Repo, cfg.Revision = lifecycle.ModelDir(lifecycle.DefaultRepo), lifecycle.DefaultRepo, lifecycle.DefaultRevision
	}
	checks := syscheck.Run(cmd.Context(), cfg)
	var g *syscheck.GPUInfo
	var macOS string
	if runtime.GOOS == "darwin" {
		macOS = syscheck.Probe().OSVersion
		if syscheck.ProbeGPU != nil {
			info := syscheck.ProbeGPU()
			g = &info
		}
	}
	checks = append(checks, parallelCheck(runtime.GOOS, g, int64(wiredlimit.Memory())), routeCheck(runtime.GOOS, g, macOS))
	failed := syscheck.Failed(checks)
	out := cmd.OutOrStdout()
	if output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(doctorOutput{OK: failed == 0, Checks: checks}); err != nil {
			return err
		}
	} else {
		for _, c := range checks {
			fmt.Fprintf(out, "%-4s  %-10s  %s\n", c.Status, c.Name, c.Detail)
			if c.Fix != "" {
				fmt.Fprintf(out, "%s  fix: %s\n", strings.Repeat(" ", 16), c.Fix)
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("doctor: %d of %d checks failed", failed, len(checks))
	}
	return nil
}

// productionContext is the context lily serve would hold for the production model in a GPU
// working set of so many bytes on a Mac with memory bytes of memory: with that Mac's serving
// defaults (gpu.DefaultsFor), as serve picks them when --kv-bits and --prefill-chunk are not given.
func productionContext(workingSet, memory int64) (int, string, error) {
	d := gpu.DefaultsFor(memory)
	n, _, why, err := servedContext(workingSet, d.KVBits, d.PrefillChunk)
	return n, why, err
}

// servedParallel is what lily serve holds for the production model on the metal backend in a GPU
// working set of workingSet bytes with kvBits and prefillChunk (-1: by memory): the context and
// largest prefill chunk (as servedContext sizes them; 0 positions when not one session fits) and
// the sequences it runs at once, decode.Memory.Parallel at that context, with why.
func servedParallel(workingSet int64, kvBits, prefillChunk int) (positions, chunk, parallel int, why string) {
	c := config.Production()
	chunks, auto := chunkOptions("metal", prefillChunk)
	mem, chunks, err := gpu.MemoryFor(c, gpu.GPUOptions{WorkingSet: workingSet, KVBits: kvBits, Chunks: chunks, AutoChunks: auto})
	if err != nil {
		return 0, 0, 0, err.Error()
	}
	chunk = slices.Max(append([]int{0}, chunks...))
	if positions, _, err = gpu.ServedContext(mem, c, gpu.GPUOptions{WorkingSet: workingSet}); err != nil {
		return 0, chunk, 0, err.Error()
	}
	parallel, why = mem.Parallel(positions, workingSet)
	return positions, chunk, parallel, why
}

// parallelCheck is doctor's line on how many sequences lily serve runs at once on this Mac (its
// serving defaults, gpu.DefaultsFor memory bytes) in the GPU's working set; skipped where there
// is no GPU working set to size them in.
func parallelCheck(goos string, g *syscheck.GPUInfo, memory int64) syscheck.Check {
	c := syscheck.Check{Name: "parallel", Status: syscheck.Skip}
	switch {
	case goos != "darwin":
		c.Detail = "parallel sequences: sized on macOS only"
	case g == nil || !g.Available || g.RecommendedMaxWorkingSet == 0:
		c.Detail = "parallel sequences: no GPU working set to size them in"
	default:
		d := gpu.DefaultsFor(memory)
		_, _, n, why := servedParallel(int64(g.RecommendedMaxWorkingSet), d.KVBits, d.PrefillChunk)
		c.Status, c.Detail = syscheck.Pass, fmt.Sprintf("parallel sequences: %d (%s)", n, why)
		if n == 0 {
			c.Status = syscheck.Warn
		}
	}
	return c
}

// routeCheck is doctor's line on the route prefill chunks take on this Mac's GPU
// (gpu.ChoosePrefillRoute, unforced) on macOS version macOS, and why; skipped off macOS, where
// it names the emulator's, and without a GPU, where there is none to choose.
func routeCheck(goos string, g *syscheck.GPUInfo, macOS string) syscheck.Check {
	c := syscheck.Check{Name: "prefill", Status: syscheck.Skip}
	device, family := "emu", mtl.Family(0)
	switch {
	case goos == "darwin" && (g == nil || !g.Available):
		c.Detail = "prefill route: none (no Metal GPU)"
		return c
	case goos == "darwin":
		c.Status, device, family = syscheck.Pass, g.Name, familyNamed(g.Family)
	}
	route, why, err := gpu.ChoosePrefillRoute(device, family, macOS, "")
	if err != nil { // unforced, it cannot fail: say so rather than hide it
		c.Status, why = syscheck.Warn, err.Error()
	}
	c.Detail = fmt.Sprintf("prefill route: %s (%s)", route, why)
	return c
}

// familyNamed is the GPU family the Metal probe names ("Apple10"); 0 for anything else.
func familyNamed(s string) mtl.Family {
	n, err := strconv.Atoi(strings.TrimPrefix(s, "Apple"))
	if err != nil || !strings.HasPrefix(s, "Apple") || n < 1 {
		return 0
	}
	return mtl.FamilyApple7 + mtl.Family(n-7)
}
