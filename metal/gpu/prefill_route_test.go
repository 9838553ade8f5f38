package gpu

import (
	"strings"
	"testing"

	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/mtl"
	"github.com/lilyformac/lily/metal/plan"
)

// TestChoosePrefillRoute: auto takes the tensor route only on an Apple10 GPU with macOS 26.2 or
// later and tensor-op kernels in the build, and says why not otherwise; forcing simdgroup always
// works, forcing tensor fails where it cannot run, with the reason.
func TestChoosePrefillRoute(t *testing.T) {
	for _, tc := range []struct {
		device  string
		family  mtl.Family
		macOS   string
		forced  string
		kernels bool
		route   plan.Route
		reason  string // a part of the reason
		err     string // a part of the error; "" none
	}{
		{"Apple M5 Max", mtl.FamilyApple10, "26.2", "", true, plan.Tensor, "M5 Max (Apple10) on macOS 26.2: the neural accelerators", ""},
		{"Apple M5", mtl.FamilyApple10, "27.0 (26A1)", "auto", true, plan.Tensor, "M5 (Apple10) on macOS 27.0", ""},
		{"Apple M5 Pro", mtl.FamilyApple10, "26.3.1", "tensor", true, plan.Tensor, "forced by --prefill-route", ""},
		{"Apple M4 Max", mtl.FamilyApple9, "26.2", "", true, plan.Simdgroup, "M4 Max (Apple9) has no neural accelerators", ""},
		{"Apple M1", mtl.FamilyApple7, "15.5", "auto", true, plan.Simdgroup, "M1 (Apple7) has no neural accelerators", ""},
		{"emu", 0, "", "", true, plan.Simdgroup, "the emulator runs either route: simdgroup unless --prefill-route tensor", ""},
		{"emu", 0, "", "tensor", true, plan.Tensor, "forced by --prefill-route", ""},
		{"emu", 0, "", "tensor", false, plan.Simdgroup, "no tensor-op kernels", "--prefill-route tensor: no tensor-op kernels in this build yet"},
		{"Apple M5 Max", mtl.FamilyApple10, "26.1", "", true, plan.Simdgroup, "macOS 26.1: tensor ops need 26.2", ""},
		{"Apple M5 Max", mtl.FamilyApple10, "26.1.4 (25B1)", "", true, plan.Simdgroup, "macOS 26.1.4 (25B1): tensor ops need 26.2", ""},
		{"Apple M5 Max", mtl.FamilyApple10, "", "", true, plan.Simdgroup, "macOS version unknown: tensor ops need 26.2", ""},
		{"Apple M5 Max", mtl.FamilyApple10, "26.2", "", false, plan.Simdgroup, "no tensor-op kernels in this build yet", ""},
		{"Apple M5 Max", mtl.FamilyApple10, "26.2", "simdgroup", true, plan.Simdgroup, "forced by --prefill-route", ""},
		{"Apple M4 Max", mtl.FamilyApple9, "26.2", "simdgroup", false, plan.Simdgroup, "forced by --prefill-route", ""},
		{"Apple M4 Max", mtl.FamilyApple9, "26.2", "tensor", true, plan.Simdgroup, "no neural accelerators", "--prefill-route tensor: M4 Max (Apple9) has no neural accelerators"},
		{"Apple M5 Max", mtl.FamilyApple10, "15.6", "tensor", true, plan.Simdgroup, "tensor ops need 26.2", "--prefill-route tensor: macOS 15.6: tensor ops need 26.2"},
		{"Apple M5 Max", mtl.FamilyApple10, "26.2", "tensor", false, plan.Simdgroup, "no tensor-op kernels", "--prefill-route tensor: no tensor-op kernels in this build yet"},
		{"Apple M5 Max", mtl.FamilyApple10, "26.2", "Tensor", true, plan.Simdgroup, "", `prefill route "Tensor": expected tensor, simdgroup or auto`},
		{"Apple M5 Max", mtl.FamilyApple10, "26.2", "ane", true, plan.Simdgroup, "", "expected tensor, simdgroup or auto"},
	} {
		forced, err := ParsePrefillRoute(tc.forced)
		route, reason := plan.Simdgroup, ""
		if err == nil {
			route, reason, err = macDevice(tc.device, tc.family, tc.macOS, tc.kernels).route(forced)
		}
		if route != tc.route || !strings.Contains(reason, tc.reason) || tc.reason == "" && reason != "" {
			t.Errorf("%s (%s) macOS %q forced %q kernels %v: %s, %q; want %s, %q", tc.device, tc.family, tc.macOS, tc.forced, tc.kernels, route, reason, tc.route, tc.reason)
		}
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s macOS %q forced %q: error %v, want %q", tc.device, tc.macOS, tc.forced, err, tc.err)
		}
	}
}

// TestChoosePrefillRouteBuild: the build's own answer follows its tensor-op kernels (the dense
// and grouped GEMMs have them: the tensor route on an M5 Max on macOS 26.2).
func TestChoosePrefillRouteBuild(t *testing.T) {
	route, reason, err := ChoosePrefillRoute("Apple M5 Max", mtl.FamilyApple10, "26.2", RouteChoice{})
	if want := len(decode.TensorKernels()) > 0; err != nil || (route == plan.Tensor) != want {
		t.Fatalf("%s, %q, %v with tensor-op kernels %v", route, reason, err, decode.TensorKernels())
	}
}
