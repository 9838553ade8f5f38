//go:build linux

package cases

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/metal/emu"
)

// library compiles every kernel for the emulator, or fails the test saying how to get a clang.
func library(t *testing.T, opts emu.Options) *emu.Library {
	t.Helper()
	lib, err := EmuLibrary(opts)
	if errors.Is(err, emu.ErrNoClang) {
		t.Fatalf("%v (the emulator tests need clang 17 or later: apt-get install clang-19)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return lib
}

// TestCases runs every case on the emulator in every thread order (a Heavy case in one, chosen
// by its name) and under AddressSanitizer (Heavy cases excepted), against the emulator's
// tolerance; each run must make the pipelines of exactly the case's declared instances. A
// tensor-op case draws a new cooperative-tensor layout for each run (EmuDevice's seed): four
// orders and ASan are five layouts, and a Heavy one runs in three.
func TestCases(t *testing.T) {
	lib, asan := library(t, emu.Options{}), library(t, emu.Options{ASan: true})
	for _, c := range All() {
		t.Run(c.Name, func(t *testing.T) {
			orders := emu.Orders
			if c.Heavy {
				h := fnv.New32a()
				h.Write([]byte(c.Name))
				orders = []emu.Order{emu.Orders[h.Sum32()%uint32(len(emu.Orders))]}
			}
			check := func(how string, r Result) {
				t.Helper()
				if !r.Pass {
					t.Errorf("%s: %s", how, r.Failure())
				}
				t.Logf("%s: worst %.3g (tolerance %.3g) at %s", how, r.Error, r.Tolerance, r.Worst)
				if want := c.Instances(); !slicesEqualSet(r.Ran, want) && r.Err == nil {
					t.Errorf("%s: made pipelines %v, the case declares %v", how, r.Ran, want)
				}
			}
			for i, o := range orders {
				check(o.String(), Run(c, EmuDevice(lib, o, uint64(i+1)), Options{Kind: Emu}))
			}
			for seed := uint64(len(orders) + 1); c.Tensor && seed <= 3; seed++ {
				check(fmt.Sprintf("%s, layout %d", orders[0], seed), Run(c, EmuDevice(lib, orders[0], seed), Options{Kind: Emu}))
			}
			if !c.Heavy {
				check("ASan", Run(c, EmuDevice(asan, emu.Shuffle, 7), Options{Kind: Emu}))
			}
		})
	}
}

func slicesEqualSet(a, b []string) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(s string) bool { return !slices.Contains(b, s) })
}

// TestCaseNames: names are unique, "<kernel>/<tag>" with the first declared instance, and every
// case declares a kernel, a shape, a tolerance that is no stricter on Metal than on the emulator.
func TestCaseNames(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range All() {
		if seen[c.Name] {
			t.Errorf("two cases named %s", c.Name)
		}
		seen[c.Name] = true
		if len(c.Kernels) == 0 || c.Shape == "" || c.Run == nil || !strings.HasPrefix(c.Name, c.Instances()[0]) || !strings.Contains(c.Name, "/") {
			t.Errorf("%s: kernels %v, shape %q", c.Name, c.Kernels, c.Shape)
		}
		if c.Tol.Metal < c.Tol.Emu {
			t.Errorf("%s: Metal tolerance %g below the emulator's %g", c.Name, c.Tol.Metal, c.Tol.Emu)
		}
	}
	t.Logf("%d cases", len(seen))
}

// TestRunReportsWorstElement: a corrupted output element fails its case with the kernel, the
// shape, the element and its error; an unwritten one with NaN; a corrupted copy structurally.
func TestRunReportsWorstElement(t *testing.T) {
	lib := library(t, emu.Options{})
	byName := map[string]Case{}
	for _, c := range All() {
		byName[c.Name] = c
	}
	dev := EmuDevice(lib, emu.Shuffle, 1)
	corrupt := func(what string, at int, v []byte) func(Case, string, []byte) {
		return func(_ Case, buf string, out []byte) {
			if buf == what {
				copy(out[4*at:], v)
			}
		}
	}
	r := Run(byName["add_rmsnorm/h200_rows2_tg96"], dev, Options{Kind: Emu, Corrupt: corrupt("out", 17, []byte{0, 0, 0x80, 0x40})}) // 4.0
	if r.Pass || r.Err != nil || !(r.Error > r.Tolerance) || !strings.HasPrefix(r.Worst, "out[17] = 4, want ") ||
		!strings.Contains(r.Failure(), "add_rmsnorm/h200_rows2_tg96 (kernel add_rmsnorm, shape 2 rows of 200, threadgroups of 96): error ") {
		t.Errorf("a wrong element: %+v\n%s", r, r.Failure())
	}
	r = Run(byName["conv1d_step/c31_g32_3steps"], dev, Options{Kind: Metal, Corrupt: corrupt("u", 30, []byte{0xFF, 0xFF, 0xFF, 0xFF})})
	if r.Pass || r.Tolerance != 1e-5 || r.Worst != "step 0: u[30] = NaN, want "+r.Worst[len("step 0: u[30] = NaN, want "):] || !strings.Contains(r.Failure(), "error NaN") {
		t.Errorf("an unwritten element: %+v\n%s", r, r.Failure())
	}
	r = Run(byName["conv1d_chunk/c31_g32_t1+bf16in"], dev, Options{Kind: Emu, Corrupt: corrupt("window", 3, []byte{0, 0, 0, 0})})
	if r.Pass || r.Err == nil || !strings.HasPrefix(r.Err.Error(), "window[3] = 0 (0x0), want ") {
		t.Errorf("a corrupted window: %+v", r)
	}
	r = Run(byName["sample_probe/f32_add"], dev, Options{Kind: Metal, Corrupt: corrupt("out", 10, []byte{1})})
	if r.Pass || r.Err == nil || !strings.HasPrefix(r.Err.Error(), "1 of 65536 wrong, first f32_add(") || r.Error != 1 {
		t.Errorf("a corrupted soft-float result: %+v", r)
	}
	r = Run(byName["moe_router/h2048_e64_k8_i512_si512_tg1024"], dev, Options{Kind: Emu, Corrupt: corrupt("ids", 1, []byte{63, 0, 0, 0})})
	if r.Pass || r.Err == nil || !strings.Contains(r.Err.Error(), "expert ids [") {
		t.Errorf("a corrupted expert id: %+v", r)
	}
}
