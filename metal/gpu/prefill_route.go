package gpu

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/mtl"
	"github.com/lilyformac/lily/metal/plan"
)

// noTensorKernels is why the tensor route cannot run in a build whose plan has no tensor-op forms.
const noTensorKernels = "no tensor-op kernels in this build yet"

// RouteChoice is a --prefill-route value, parsed once where the flag is read (it is a
// pflag.Value): the zero value, auto, leaves the route to the device; Forced takes Route.
type RouteChoice struct {
	Route  plan.Route
	Forced bool
}

// ParsePrefillRoute reads a --prefill-route value: "tensor" or "simdgroup" force that route;
// "auto" (or nothing) leaves it to the device (Size).
func ParsePrefillRoute(s string) (RouteChoice, error) {
	switch s {
	case "", "auto":
		return RouteChoice{}, nil
	case "simdgroup":
		return RouteChoice{Route: plan.Simdgroup, Forced: true}, nil
	case "tensor":
		return RouteChoice{Route: plan.Tensor, Forced: true}, nil
	}
	return RouteChoice{}, fmt.Errorf("prefill route %q: expected tensor, simdgroup or auto", s)
}

// String is the value as the flag takes it: auto, tensor or simdgroup.
func (c RouteChoice) String() string {
	if !c.Forced {
		return "auto"
	}
	return c.Route.String()
}

// Set parses a flag's value (ParsePrefillRoute).
func (c *RouteChoice) Set(s string) error {
	v, err := ParsePrefillRoute(s)
	if err == nil {
		*c = v
	}
	return err
}

// Type names the flag's values in --help.
func (*RouteChoice) Type() string { return "route" }

// ChoosePrefillRoute is the prefill chunks' route (decode.Options.PrefillRoute) on a Mac's GPU
// (MacDevice): device is its name ("Apple M5 Max"; "emu" for the emulator), family its highest
// Apple GPU family (0: none), macOS the system's version ("26.2", "26.2 (25C56)"; "": unknown).
// Auto takes the tensor route where it can run and has something to run: an Apple10 GPU (M5's
// neural accelerators), macOS mtl.TensorOpsMinMacOS or later (mtl.TensorOps), and kernels with
// tensor-op forms in this build; else the simdgroup route. The reason says why, in words;
// forcing the tensor route where it cannot run is an error that says why.
func ChoosePrefillRoute(device string, family mtl.Family, macOS string, forced RouteChoice) (plan.Route, string, error) {
	return MacDevice(device, family, macOS).route(forced)
}

// emuRoute is the emulator's route: it runs tensor ops (on layouts it draws at random) as well as
// simdgroup matrices, so it stands in for either Mac; the simdgroup route unless forced, so the
// goldens keep checking the route every Mac before M5 takes. blocked is why the tensor route
// cannot run ("": it can).
func emuRoute(forced RouteChoice, blocked string) (plan.Route, string, error) {
	if !forced.Forced {
		return plan.Simdgroup, "the emulator runs either route: simdgroup unless --prefill-route tensor", nil
	}
	return decideRoute(forced, blocked, "forced by --prefill-route")
}

// decideRoute applies forced to a device on which the tensor route cannot run for the reason
// blocked ("": it can, for the reason can): auto takes the tensor route where it can run, forcing
// tensor where it cannot is an error that says why, forcing simdgroup always works.
func decideRoute(forced RouteChoice, blocked, can string) (plan.Route, string, error) {
	switch {
	case forced.Forced && forced.Route == plan.Simdgroup:
		return plan.Simdgroup, "forced by --prefill-route", nil
	case blocked != "" && !forced.Forced:
		return plan.Simdgroup, blocked, nil
	case blocked != "":
		return plan.Simdgroup, blocked, fmt.Errorf("--prefill-route tensor: %s", blocked)
	case forced.Forced:
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
