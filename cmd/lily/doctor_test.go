package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/lifecycle/hub"
	"github.com/lilyformac/lily/engine/lifecycle/syscheck"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/mtl"
)

func TestDoctorJSON(t *testing.T) {
	isolate(t, map[string][]byte{"config.json": []byte("{}")})
	out, err := execute(t, "doctor", "--output", "json")
	var got doctorOutput
	if jerr := json.Unmarshal([]byte(out), &got); jerr != nil {
		t.Fatalf("%v:\n%s", jerr, out)
	}
	var names []string
	for _, c := range got.Checks {
		names = append(names, c.Name)
		if runtime.GOOS != "darwin" && (c.Name == "macos" || c.Name == "chip" || c.Name == "context" || c.Name == "parallel" || c.Name == "prefill" || strings.HasPrefix(c.Name, "gpu")) && c.Status != syscheck.Skip {
			t.Errorf("%s: %s on %s, want skip", c.Name, c.Status, runtime.GOOS)
		}
	}
	if strings.Join(names, ",") != "macos,memory,chip,disk,model,gpu,gpu-memory,context,parallel,prefill" {
		t.Fatalf("checks %v", names)
	}
	if got.OK != (err == nil) || got.OK != (syscheck.Failed(got.Checks) == 0) {
		t.Fatalf("ok=%v but err=%v", got.OK, err)
	}
	if runtime.GOOS != "darwin" && strings.Contains(out, `"serving"`) {
		t.Fatalf("a serving block off macOS:\n%s", out)
	}
}

// TestDoctorServing: doctor's serving block, which the menu-bar app reads, is the same sizing
// (gpu.Size with the Mac's serving defaults) as its context, parallel and prefill lines; where
// the weights do not fit it says why; off macOS or without a GPU working set there is none.
func TestDoctorServing(t *testing.T) {
	mac := func(gb int) *syscheck.GPUInfo {
		return &syscheck.GPUInfo{Name: "Apple M5 Max", Family: "Apple10", Available: true, RecommendedMaxWorkingSet: uint64(decode.MacWorkingSet(gb))}
	}
	for _, gb := range []int{64, 32} {
		g, mem := mac(gb), int64(gb)<<30
		m := sizeOnMac("darwin", g, mem, "26.2")
		s := m.serving()
		ctx, why, err := productionContext(decode.MacWorkingSet(gb), mem)
		if s == nil || err != nil || s.Error != "" || s.Context != ctx || s.ContextNote != why || s.KVBits != 16 || s.WorkingSet != decode.MacWorkingSet(gb) {
			t.Fatalf("%d GB: %+v; context check %d (%q), %v", gb, s, ctx, why, err)
		}
		if p := parallelCheck("darwin", m); p.Detail != fmt.Sprintf("parallel sequences: %d (%s)", s.Parallel, s.ParallelNote) {
			t.Errorf("%d GB: serving %d parallel (%s), the check says %q", gb, s.Parallel, s.ParallelNote, p.Detail)
		}
		if r := routeCheck("darwin", g, "26.2"); r.Detail != fmt.Sprintf("prefill route: %s (%s)", s.PrefillRoute, s.PrefillRouteNote) {
			t.Errorf("%d GB: serving route %s (%s), the check says %q", gb, s.PrefillRoute, s.PrefillRouteNote, r.Detail)
		}
		if s.PrefillChunk < 1 || s.PrefillSlice < 1 || s.PrefillSlice > s.PrefillChunk || s.KVPages < 1 {
			t.Errorf("%d GB: chunk %d, slice %d, %d pages", gb, s.PrefillChunk, s.PrefillSlice, s.KVPages)
		}
	}
	if s := sizeOnMac("darwin", mac(24), 24<<30, "26.2").serving(); s == nil || s.Error == "" || s.Context != 0 || s.KVBits != 8 {
		t.Errorf("24 GB at macOS's default limit: %+v, want why the weights do not fit", s)
	}
	if s := sizeOnMac("linux", mac(64), 64<<30, "").serving(); s != nil {
		t.Errorf("off macOS: %+v", s)
	}
	if s := sizeOnMac("darwin", &syscheck.GPUInfo{Available: true}, 64<<30, "26.2").serving(); s != nil {
		t.Errorf("no working set: %+v", s)
	}
}

func TestDoctorTextAndExitCode(t *testing.T) {
	isolate(t, nil)
	// A damaged pull makes the model check fail, whatever the machine.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.bin"), []byte("short"), 0o644)
	raw, _ := json.Marshal(hub.Marker{Repo: "org/tiny", Revision: "v1", Files: []hub.File{{Path: "a.bin", Size: 10, SHA256: "00"}}})
	os.WriteFile(filepath.Join(dir, hub.MarkerName), raw, 0o644)

	out, err := execute(t, "doctor", "--model", dir)
	if err == nil || !regexp.MustCompile(`^doctor: \d of 10 checks failed$`).MatchString(err.Error()) {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(out, "fail  model       damaged") || !strings.Contains(out, "fix: run `lily pull`") {
		t.Fatalf("output:\n%s", out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !regexp.MustCompile(`^(pass|warn|fail|skip)  \S|^ {18}fix: `).MatchString(line) {
			t.Errorf("unexpected line %q", line)
		}
	}
	if _, err := execute(t, "doctor", "--output", "yaml"); err == nil || !strings.Contains(err.Error(), "expected json or text") {
		t.Fatalf("bad --output: %v", err)
	}
}

// TestParallelCheck: doctor's line on the sequences lily serve runs at once, from the GPU's
// working set with the Mac's serving defaults: the most on a 64 GB Mac, one on 32 GB (its
// context, less the vision tower's memory, fills the working set: an eighth of it would not make
// room for more, decode.Memory.RoomForParallel), none on 24 GB at macOS's default limit; skipped
// off macOS or without a working set.
func TestParallelCheck(t *testing.T) {
	mac := func(gb int) syscheck.Check {
		ws := decode.MacWorkingSet(gb)
		return parallelCheck("darwin", sizeOnMac("darwin", &syscheck.GPUInfo{Available: true, RecommendedMaxWorkingSet: uint64(ws)}, int64(gb)<<30, ""))
	}
	ctx32, _, err := productionContext(decode.MacWorkingSet(32), 32<<30)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c      syscheck.Check
		status syscheck.Status
		detail string
	}{
		{mac(64), syscheck.Pass, fmt.Sprintf("parallel sequences: %d (each can hold %d positions", decode.MaxParallel, decode.ParallelContext)},
		{mac(32), syscheck.Pass, fmt.Sprintf("parallel sequences: 1 (one session of %d positions fills", ctx32)},
		{mac(24), syscheck.Warn, "parallel sequences: 0 ("},
		{parallelCheck("linux", sizeOnMac("linux", nil, 0, "")), syscheck.Skip, "parallel sequences: sized on macOS only"},
		{parallelCheck("darwin", sizeOnMac("darwin", &syscheck.GPUInfo{}, 64<<30, "")), syscheck.Skip, "parallel sequences: no GPU working set"},
	} {
		if tc.c.Name != "parallel" || tc.c.Status != tc.status || !strings.HasPrefix(tc.c.Detail, tc.detail) || strings.Contains(tc.c.Detail, "\n") {
			t.Errorf("%+v, want %s %q…", tc.c, tc.status, tc.detail)
		}
	}
}

// TestRouteCheck: doctor's line on the prefill route names the route and why, in one line: the
// simdgroup route on every GPU while no kernel has a tensor-op form, and off macOS the
// emulator's, which has no neural accelerators.
func TestRouteCheck(t *testing.T) {
	mac := func(name, family, macOS string) syscheck.Check {
		return routeCheck("darwin", &syscheck.GPUInfo{Name: name, Family: family, Available: true}, macOS)
	}
	m5 := "prefill route: tensor (M5 Max (Apple10) on macOS 26.2: the neural accelerators"
	for _, tc := range []struct {
		c      syscheck.Check
		status syscheck.Status
		detail string
	}{
		{mac("Apple M4 Max", "Apple9", "26.2"), syscheck.Pass, "prefill route: simdgroup (M4 Max (Apple9) has no neural accelerators)"},
		{mac("Apple M5 Max", "Apple10", "26.1"), syscheck.Pass, "prefill route: simdgroup (macOS 26.1: tensor ops need 26.2)"},
		{mac("Apple M5 Max", "Apple10", "26.2"), syscheck.Pass, m5},
		{routeCheck("linux", nil, ""), syscheck.Skip, "prefill route: simdgroup (the emulator runs either route: simdgroup unless --prefill-route tensor)"},
		{routeCheck("darwin", &syscheck.GPUInfo{}, "15.5"), syscheck.Skip, "prefill route: none (no Metal GPU)"},
		{routeCheck("darwin", nil, "15.5"), syscheck.Skip, "prefill route: none (no Metal GPU)"},
	} {
		if tc.c.Name != "prefill" || tc.c.Status != tc.status || !strings.HasPrefix(tc.c.Detail, tc.detail) || strings.Contains(tc.c.Detail, "\n") {
			t.Errorf("%+v, want %s %q", tc.c, tc.status, tc.detail)
		}
	}
	for s, want := range map[string]mtl.Family{"Apple10": mtl.FamilyApple10, "Apple7": mtl.FamilyApple7, "": 0, "Metal4": 0, "Apple": 0} {
		if got := familyNamed(s); got != want {
			t.Errorf("familyNamed(%q) = %v, want %v", s, got, want)
		}
	}
}
