package gpu

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/lilyformac/lily/engine/draft"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/plan"
)

// emuChip is the chip the emulator prices its steps as (it has none of its own): the drafting
// gate then decides on the emulator as it would on that Mac, so tests run the path a Mac takes.
const emuChip = "M4 Max"

// draftCost prices the backend's steps for the drafting gate (engine/draft), and says from what:
// the plan's model of a step of grouped rows (decode.GroupModel) on the device's chip, scaled by
// that Mac's calibration when `lily bench --profile --rows` has measured one. None (the gate then
// prices rows alike and does not draft) without multi-row steps, whose rows are where drafts
// are verified cheaply, or on a chip Lily has no peaks for.
func draftCost(step *decode.Step, rows int, d Device) (draft.Cost, string) {
	if rows < 2 {
		return nil, "one sequence at a time (parallel 1): no multi-row step to verify drafts in"
	}
	chip, emu := d.Chip, d.Name == "emu"
	if emu {
		c, _ := plan.ChipNamed(emuChip)
		chip = &c
	}
	if chip == nil {
		return nil, fmt.Sprintf("no model of %q's peaks (plan.Chips): drafts are not priced, so none are made", d.Name)
	}
	m, err := decode.NewGroupModel(step.Config, step.MaxCtx, step.KVBits, *chip)
	if err != nil {
		return nil, fmt.Sprintf("no model of the step: %v", err)
	}
	if emu {
		return m, fmt.Sprintf("the plan's model at the %s's peaks (the emulator has no chip of its own)", chip.Name)
	}
	path, err := decode.CalibrationPath(chip.Name)
	if err != nil {
		return m, fmt.Sprintf("the plan's model at the %s's peaks (%v)", chip.Name, err)
	}
	cost, err := decode.Calibrated(m, path)
	switch {
	case err == nil:
		return cost, fmt.Sprintf("the plan's model calibrated on this %s (%s)", chip.Name, path)
	case errors.Is(err, fs.ErrNotExist):
		return m, fmt.Sprintf("the plan's model at the %s's peaks, not yet calibrated (lily bench --profile --rows)", chip.Name)
	default:
		return m, fmt.Sprintf("the plan's model at the %s's peaks: %v", chip.Name, err)
	}
}
