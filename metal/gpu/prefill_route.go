package gpu

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/mtl"
	"github.com/lilyformac/lily/metal/plan"
)

// noTensorKernels is why the tensor route cannot run in a build whose plan has no tensor-op forms.
const noTensorKernels = "no tensor-op kernels in this build yet"

// ParsePrefillRoute reads a --prefill-route value: "tensor" or "simdgroup" force that route;
// "auto" (or nothing) leaves it to ChoosePrefillRoute.
func ParsePrefillRoute(s string) (r plan.Route, auto bool, err error) {
	switch s {
	case "", "auto":
		return plan.Simdgroup, true, nil
	case "simdgroup":
		return plan.Simdgroup, false, nil
	case "tensor":
		return plan.Tensor, false, nil
	}
	return plan.Simdgroup, false, fmt.Errorf("--prefill-route %q: expected tensor, simdgroup or auto", s)
}

// ChoosePrefillRoute is the one place that picks the prefill chunks' route
// (decode.Options.PrefillRoute) for a GPU: device is its name ("Apple M5 Max"; "emu" for the
// emulator), family its highest Apple GPU family (0: none), macOS the system's version ("26.2",
// "26.2 (25C56)"; "": unknown), forced a --prefill-route value. Auto takes the tensor route
// where it can run and has something to run: an Apple10 GPU (M5's neural accelerators), macOS
// mtl.TensorOpsMinMacOS or later (mtl.TensorOps), and kernels with tensor-op forms in this
// build; else the simdgroup route. The reason says why, in words; forcing the tensor route
// where it cannot run is an error that says why.
func ChoosePrefillRoute(device string, family mtl.Family, macOS, forced string) (plan.Route, string, error) {
	return choosePrefillRoute(device, family, macOS, forced, len(decode.TensorKernels()) > 0)
}

// choosePrefillRoute is ChoosePrefillRoute with whether the build has tensor-op kernels given.
func choosePrefillRoute(device string, family mtl.Family, macOS, forced string, kernels bool) (plan.Route, string, error) {
	if device == "emu" {
		return emuRoute(forced, kernels)
	}
	why := tensorBlocker(device, family, macOS, kernels)
	return decideRoute(forced, why, fmt.Sprintf("%s on macOS %s: the neural accelerators, through Metal 4 tensor ops", gpuName(device, family), macOS))
}

// emuRoute is the emulator's route: it runs tensor ops (on layouts it draws at random) as well as
// simdgroup matrices, so it stands in for either Mac; the simdgroup route unless forced, so the
// goldens keep checking the route every Mac before M5 takes.
func emuRoute(forced string, kernels bool) (plan.Route, string, error) {
	why := ""
	if !kernels {
		why = noTensorKernels
	}
	if _, auto, err := ParsePrefillRoute(forced); err == nil && auto {
		return plan.Simdgroup, "the emulator runs either route: simdgroup unless --prefill-route tensor", nil
	}
	return decideRoute(forced, why, "forced by --prefill-route")
}

// deviceRoute is ChoosePrefillRoute for the device a GPU backend runs on: the emulator by
// emuRoute, a Metal device by whether it compiled the tensor-op kernels (exec.TensorOps, the
// same gate as mtl.TensorOps).
func deviceRoute(name string, dev exec.Device, forced string) (plan.Route, string, error) {
	kernels := len(decode.TensorKernels()) > 0
	if name == "emu" {
		return emuRoute(forced, kernels)
	}
	ok, why := exec.TensorOps(dev)
	switch {
	case !ok:
		return decideRoute(forced, why, "")
	case !kernels:
		return decideRoute(forced, noTensorKernels, "")
	}
	return decideRoute(forced, "", why)
}

// decideRoute applies forced (a --prefill-route value) to a device on which the tensor route
// cannot run for the reason blocked ("": it can, for the reason can): auto takes the tensor
// route where it can run, forcing tensor where it cannot is an error that says why, forcing
// simdgroup always works.
func decideRoute(forced, blocked, can string) (plan.Route, string, error) {
	r, auto, err := ParsePrefillRoute(forced)
	switch {
	case err != nil:
		return plan.Simdgroup, "", err
	case !auto && r == plan.Simdgroup:
		return r, "forced by --prefill-route", nil
	case blocked != "" && auto:
		return plan.Simdgroup, blocked, nil
	case blocked != "":
		return plan.Simdgroup, blocked, fmt.Errorf("--prefill-route tensor: %s", blocked)
	case !auto:
		return plan.Tensor, "forced by --prefill-route", nil
	}
	return plan.Tensor, can, nil
}

// withFallbacks is why with, on the tensor route, the chunk dispatches that keep their simdgroup
// form because their tensor form cannot run the model's shape (plan.Plan.Fallbacks), so
// PrefillRoute says so.
func withFallbacks(why string, step *decode.Step) string {
	if step.LargestChunk() == 0 {
		return why
	}
	fb := step.Plan.Fallbacks(decode.ChunkModes(step.LargestChunk()).Run)
	if len(fb) == 0 {
		return why
	}
	return why + "; the simdgroup form where a tensor form cannot run the shape: " + strings.Join(fb, "; ")
}

// tensorBlocker is why the tensor route cannot run, or "" where it can: the GPU and macOS as
// mtl.TensorOps judges them (the gate the Metal device compiles tensor-op kernels behind), then
// this build's kernels.
func tensorBlocker(device string, family mtl.Family, macOS string, kernels bool) string {
	switch ok, _ := mtl.TensorOps(family, macOS); {
	case !ok && family < mtl.FamilyApple10:
		return gpuName(device, family) + " has no neural accelerators"
	case !ok:
		return fmt.Sprintf("macOS %s: tensor ops need %s", cmp.Or(macOS, "version unknown"), mtl.TensorOpsMinMacOS)
	case !kernels:
		return noTensorKernels
	}
	return ""
}

// gpuName is the device as the reasons name it: "M4 Max (Apple9)", "emu".
func gpuName(device string, family mtl.Family) string {
	name := cmp.Or(strings.TrimPrefix(device, "Apple "), "this GPU")
	if family == 0 {
		return name
	}
	return fmt.Sprintf("%s (%s)", name, family)
}
