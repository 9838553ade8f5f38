package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

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
	// Serving is what lily serve holds on this Mac (absent off macOS and without a GPU working
	// set), the numbers the menu-bar app reads.
	Serving *syscheck.Serving `json:"serving,omitempty"`
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
	mac := sizeOnMac(runtime.GOOS, g, int64(wiredlimit.Memory()), macOS)
	checks = append(checks, parallelCheck(runtime.GOOS, mac), routeCheck(runtime.GOOS, g, macOS))
	failed := syscheck.Failed(checks)
	out := cmd.OutOrStdout()
	if output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(doctorOutput{OK: failed == 0, Checks: checks, Serving: mac.serving()}); err != nil {
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

// macServing is doctor's one sizing of lily serve on this Mac (macSizing), which its parallel
// line and its JSON serving block both read.
type macServing struct {
	workingSet int64 // the GPU's working set; 0: nothing sized (off macOS, or no working set)
	defaults   gpu.ServingDefaults
	sizing     served
	err        error // not one session fits
}

// sizeOnMac sizes lily serve on the probed GPU g of a Mac with memory bytes of memory and macOS
// version macOS (macSizing); nothing off macOS or where there is no GPU working set.
func sizeOnMac(goos string, g *syscheck.GPUInfo, memory int64, macOS string) macServing {
	if goos != "darwin" || g == nil || !g.Available || g.RecommendedMaxWorkingSet == 0 {
		return macServing{}
	}
	m := macServing{workingSet: int64(g.RecommendedMaxWorkingSet)}
	m.sizing, m.defaults, m.err = macSizing(m.workingSet, memory, gpu.MacDevice(g.Name, familyNamed(g.Family), macOS))
	return m
}

// serving is doctor's JSON "serving" block; nil where nothing was sized.
func (m macServing) serving() *syscheck.Serving {
	if m.workingSet == 0 {
		return nil
	}
	s := m.sizing
	out := &syscheck.Serving{WorkingSet: m.workingSet, KVBits: m.defaults.KVBits, VisionBytes: s.VisionBytes(), VisionNote: s.VisionOff}
	if m.err != nil {
		out.Error = m.err.Error()
		return out
	}
	out.Context, out.ContextNote, out.Parallel, out.ParallelNote, out.KVPages = s.Context, s.ContextWhy, s.Parallel, s.ParallelWhy, s.Pages
	out.PrefillChunk, out.PrefillSlice, out.PrefillRoute, out.PrefillRouteNote = s.Chunk(), s.Slice, s.Route.String(), s.RouteWhy
	return out
}

// parallelCheck is doctor's line on how many sequences lily serve runs at once on this Mac (m,
// sized on goos): skipped where there is no GPU working set to size them in, a warning where not
// one fits.
func parallelCheck(goos string, m macServing) syscheck.Check {
	c := syscheck.Check{Name: "parallel", Status: syscheck.Skip}
	switch {
	case goos != "darwin":
		c.Detail = "parallel sequences: sized on macOS only"
	case m.workingSet == 0:
		c.Detail = "parallel sequences: no GPU working set to size them in"
	case m.err != nil:
		c.Status, c.Detail = syscheck.Warn, fmt.Sprintf("parallel sequences: 0 (%s)", m.err)
	default:
		c.Status, c.Detail = syscheck.Pass, fmt.Sprintf("parallel sequences: %d (%s)", m.sizing.Parallel, m.sizing.ParallelWhy)
	}
	return c
}

// routeCheck is doctor's line on the route prefill chunks take on this Mac's GPU
// (gpu.ChoosePrefillRoute, unforced, as gpu.Size takes it) on macOS version macOS, and why;
// skipped off macOS, where it names the emulator's, and without a GPU, where there is none to
// choose.
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
	route, why, err := gpu.ChoosePrefillRoute(device, family, macOS, gpu.RouteChoice{})
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
