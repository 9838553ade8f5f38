package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/gpu"
	"github.com/lilyformac/lily/metal/mtl"
	"github.com/lilyformac/lily/metal/plan"
	"github.com/lilyformac/lily/metal/profile"
)

// profileOptions are `lily bench --profile`'s own flags.
type profileOptions struct {
	on          bool
	chip        string
	rows        int    // --rows: time the step of 1 to rows sequences instead of each kernel
	contexts    []int  // --contexts: the cached positions --rows times them after
	calibration string // --calibration: where --rows writes the chip's calibration
}

func addProfileFlags(f *pflag.FlagSet, o *profileOptions) {
	f.BoolVar(&o.on, "profile", false, "time every kernel of the decode step (and with --prefill M of one chunk of M prompt tokens) on --backend metal or emu, each dispatch alone, against the plan's modeled bytes and FLOPs; "+
		fmt.Sprintf("--decode-steps steps are timed (default %d with --profile)", profile.DefaultSteps))
	var names []string
	for _, c := range plan.Chips {
		names = append(names, c.Name)
	}
	f.IntVar(&o.rows, "rows", 0, fmt.Sprintf("with --profile: instead of each kernel, time the decode step of 1 to N sequences at once (one row each; --rows alone: %d) at each --contexts, against the group model's time for the chip, and write the chip's calibration (--calibration); --decode-steps steps per shape (default %d)", decode.MaxRows, profile.DefaultRowsSteps))
	f.Lookup("rows").NoOptDefVal = strconv.Itoa(decode.MaxRows)
	f.IntSliceVar(&o.contexts, "contexts", nil, "with --profile --rows: the positions cached before the timed steps, comma-separated, each at least 1 (default on metal 1,4096,32768; on emu --ctx)")
	f.StringVar(&o.calibration, "calibration", "", "with --profile --rows: write the calibration to this file (default on metal: the chip's file in the user cache directory, lily/calibration/<chip>.json; on emu none, as its times are the CPU's)")
	f.StringVar(&o.chip, "chip", "", "with --profile: the chip whose peak bandwidth peak_share is a share of (default: this Mac's GPU; on emu none); with --rows: the chip modeled (required on emu); with --drafts: the chips modeled, comma-separated (default: the Max of each generation and M5 Pro): "+strings.Join(names, ", "))
}

// runBenchProfile runs the production decode step, and with --prefill one chunk, on a GPU
// backend with every dispatch timed, and prints the time per kernel against the plan's model.
func runBenchProfile(cmd *cobra.Command, o benchOptions) error {
	switch {
	case o.plan:
		return errors.New("--profile runs the kernels; --plan only models them: pick one")
	case o.trace != "":
		return errors.New("--profile and --agent-trace are exclusive")
	case o.backend != "emu" && o.backend != "metal":
		return fmt.Errorf("--profile times the Metal kernels: --backend metal (or emu, the emulator), not %s", o.backend)
	case o.prefill < 0:
		return fmt.Errorf("--prefill %d: expected a positive number of tokens", o.prefill)
	case o.profile.rows != 0 && o.prefill > 0:
		return errors.New("--rows times whole decode steps, --prefill a chunk's kernels: pick one")
	case o.profile.rows < 0 || o.profile.rows > decode.MaxRows:
		return fmt.Errorf("--rows %d: expected 1 to %d", o.profile.rows, decode.MaxRows)
	}
	if err := checkKVBits(o.kvBits, o.backend); err != nil {
		return err
	}
	chip, own, device, err := profileChip(o)
	if err != nil {
		return err
	}
	if o.profile.rows > 0 {
		return runBenchRows(cmd, o, chip, own, device)
	}
	po := profile.Options{Context: o.ctx, Prefill: o.prefill, Steps: profile.DefaultSteps, Warmup: o.warmup, Chip: chip, Device: device}
	if cmd.Flags().Changed("decode-steps") {
		po.Steps = o.steps
	}
	if err := o.useDemo(); err != nil {
		return err
	}
	out, err := profileModel(cmd.Context(), o, po)
	if err != nil {
		return err
	}
	return printProfile(cmd, o, out)
}

// printProfile prints a profile in --output's form.
func printProfile(cmd *cobra.Command, o benchOptions, out *profile.Output) error {
	if o.output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
	}
	out.Print(cmd.OutOrStdout())
	return nil
}

// profileChip is the chip a profile compares with (--chip, else on metal this Mac's GPU; on emu
// none), this Mac's own chip (none on emu or where the table lacks it) and the device's name.
func profileChip(o benchOptions) (chip, own plan.Chip, device string, err error) {
	device = "emu (the MSL emulator on the CPU)"
	if o.backend == "metal" {
		name, _, _, ok, reason := mtl.Probe()
		if !ok {
			return chip, own, "", fmt.Errorf("metal: %s", reason)
		}
		device = name
		own, _ = plan.ChipNamed(name)
		chip = own
	}
	if o.profile.chip != "" {
		c, ok := plan.ChipNamed(o.profile.chip)
		if !ok {
			return chip, own, "", fmt.Errorf("--chip %q: not in the chip table (M1 to M5, base, Pro, Max, Ultra)", o.profile.chip)
		}
		chip = c
	}
	return chip, own, device, nil
}

// profileModel opens the checkpoint in o.model on o.backend, sized for po, and profiles it
// (metal/profile).
func profileModel(ctx context.Context, o benchOptions, po profile.Options) (*profile.Output, error) {
	chunk := o.prefillChunk
	if po.Prefill > 0 {
		chunk = po.Prefill // the chunk mode profiled must be in the plan
	}
	b, cfg, closeBackend, err := openBackend(o.backend, o.model, backendOptions{ctx: po.Positions(), kvBits: o.kvBits, prefillChunk: chunk, prefillRoute: o.prefillRoute})
	if err != nil {
		return nil, err
	}
	defer closeBackend()
	g, ok := b.(*gpu.GPU)
	if !ok {
		return nil, fmt.Errorf("backend %s is not a GPU backend", o.backend)
	}
	return profile.Run(ctx, g, benchPrompt(po.PromptLen(), cfg.VocabSize), po)
}
