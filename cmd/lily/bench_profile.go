package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lilyformac/lily/metal/gpu"
	"github.com/lilyformac/lily/metal/mtl"
	"github.com/lilyformac/lily/metal/plan"
	"github.com/lilyformac/lily/metal/profile"
)

// profileOptions are `lily bench --profile`'s own flags.
type profileOptions struct {
	on   bool
	chip string
}

func addProfileFlags(f *pflag.FlagSet, o *profileOptions) {
	f.BoolVar(&o.on, "profile", false, "time every kernel of the decode step (and with --prefill M of one chunk of M prompt tokens) on --backend metal or emu, each dispatch alone, against the plan's modeled bytes and FLOPs; "+
		fmt.Sprintf("--decode-steps steps are timed (default %d with --profile)", profile.DefaultSteps))
	var names []string
	for _, c := range plan.Chips {
		names = append(names, c.Name)
	}
	f.StringVar(&o.chip, "chip", "", "with --profile: the chip whose peak bandwidth peak_share is a share of (default: this Mac's GPU; on emu none); with --drafts: the chips modeled, comma-separated (default: the Max of each generation and M5 Pro): "+strings.Join(names, ", "))
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
	}
	if err := checkKVBits(o.kvBits, o.backend); err != nil {
		return err
	}
	var chip plan.Chip
	device := "emu (the MSL emulator on the CPU)"
	if o.backend == "metal" {
		name, _, _, ok, reason := mtl.Probe()
		if !ok {
			return fmt.Errorf("metal: %s", reason)
		}
		device = name
		chip, _ = plan.ChipNamed(name)
	}
	if o.profile.chip != "" {
		c, ok := plan.ChipNamed(o.profile.chip)
		if !ok {
			return fmt.Errorf("--chip %q: not in the chip table (M1 to M5, base, Pro, Max, Ultra)", o.profile.chip)
		}
		chip = c
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
	if o.output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
	}
	out.Print(cmd.OutOrStdout())
	return nil
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
