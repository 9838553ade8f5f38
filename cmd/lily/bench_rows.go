package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/engine/lifecycle/hub"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/gpu"
	"github.com/lilyformac/lily/metal/plan"
	"github.com/lilyformac/lily/metal/profile"
)

// defaultRowsContexts are the contexts `bench --profile --rows` times on metal: next to nothing
// cached, a short conversation, and an agent's long one (decode.ParallelContext).
var defaultRowsContexts = []int{1, 4096, decode.ParallelContext}

// runBenchRows times the decode step of 1 to --rows sequences at each --contexts against the
// group model for chip (own: this Mac's chip on metal) and writes the shapes as the chip's
// calibration (decode.Calibrated reads it).
func runBenchRows(cmd *cobra.Command, o benchOptions, chip, own plan.Chip, device string) error {
	switch {
	case chip.Name == "" && o.backend == "emu":
		return errors.New("--rows on emu needs --chip: the modeled step it is compared with is a chip's")
	case chip.Name == "":
		return fmt.Errorf("--rows: %s is not in the chip table: --chip names the chip to model it as", device)
	case o.backend == "metal" && own.Name != "" && chip.Name != own.Name:
		return fmt.Errorf("--rows on metal measures this Mac's %s: --chip %s would file its times as another chip's", own.Name, chip.Name)
	}
	ro := profile.RowsOptions{MaxRows: o.profile.rows, Contexts: o.profile.contexts, Steps: profile.DefaultRowsSteps, Warmup: o.warmup, Device: device}
	if cmd.Flags().Changed("decode-steps") {
		ro.Steps = o.steps
	}
	if len(ro.Contexts) == 0 {
		ro.Contexts = []int{o.ctx}
		if o.backend == "metal" {
			ro.Contexts = defaultRowsContexts
		}
	}
	path, err := calibrationFile(o, chip)
	if err != nil {
		return err
	}
	if err := o.useDemo(); err != nil {
		return err
	}
	rows, model, err := profileRows(cmd.Context(), o, ro, chip)
	if err != nil {
		return err
	}
	if path != "" {
		if err := rows.Calibration(model, checkpointName(o)).Write(path); err != nil {
			return fmt.Errorf("calibration: %w", err)
		}
		rows.CalibrationFile = path
	}
	return printProfile(cmd, o, &profile.Output{RowsProfile: rows})
}

// calibrationFile is where --rows writes the calibration: --calibration, else on metal the
// chip's file in the user cache directory; none on emu, whose times are the CPU's, no Mac's.
func calibrationFile(o benchOptions, chip plan.Chip) (string, error) {
	if o.profile.calibration != "" || o.backend != "metal" {
		return o.profile.calibration, nil
	}
	return decode.CalibrationPath(chip.Name)
}

// profileRows opens the checkpoint in o.model on o.backend for ro's sequences and positions and
// times its steps (profile.RunRows) against the group model of its plan on chip.
func profileRows(ctx context.Context, o benchOptions, ro profile.RowsOptions, chip plan.Chip) (*profile.Rows, *decode.GroupModel, error) {
	b, cfg, closeBackend, err := openBackend(o.backend, o.model, backendOptions{ctx: ro.Positions(), kvBits: o.kvBits,
		prefillChunk: o.prefillChunk, prefillRoute: o.prefillRoute, parallel: ro.MaxRows})
	if err != nil {
		return nil, nil, err
	}
	defer closeBackend()
	g, ok := b.(*gpu.GPU)
	if !ok {
		return nil, nil, fmt.Errorf("backend %s is not a GPU backend", o.backend)
	}
	st := g.Step()
	if ro.Model, err = decode.NewGroupModel(cfg, st.MaxCtx, st.KVBits, chip); err != nil {
		return nil, nil, err
	}
	rows, err := profile.RunRows(ctx, g, benchPrompt(ro.PromptLen(), cfg.VocabSize), ro)
	return rows, ro.Model, err
}

// checkpointName names o.model in a calibration, for people: the Hub repository and revision it
// was pulled from, else its directory's name.
func checkpointName(o benchOptions) string {
	if o.demo {
		return "demo"
	}
	if m, err := hub.ReadMarker(o.model); err == nil {
		return m.Repo + "@" + m.Revision
	}
	return filepath.Base(o.model)
}
