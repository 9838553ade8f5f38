//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/internal/report"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/profile"
)

// TestDoctorReport runs `lily doctor --selftest --report FILE` on the emulator with two kernel
// cases (TestDoctorSelftest runs the end-to-end check, too slow to repeat here), one made to fail (its kernel's dispatches are dropped, so
// its output stays unwritten), and checks the file: the build, the system with the Mac's fields
// null, every case with its error or its failure, the pipelines' limits, the demo model's
// per-kernel profile of a decode step and a prefill chunk, and the doctor's system checks.
func TestDoctorReport(t *testing.T) {
	isolate(t, nil) // no pulled model
	const broken = "conv1d_step"
	reportDevice = func(d exec.Device) exec.Device {
		return &dropDevice{Device: d, kernel: broken, names: map[exec.Pipeline]string{}}
	}
	t.Cleanup(func() { reportDevice = nil })
	path := filepath.Join(t.TempDir(), "lily-report.json")
	out, err := execute(t, "doctor", "--selftest", "--report", path, "--only", "qmv_q8/256x2048,conv1d_step/c8192_g256_4steps")
	if err == nil || !strings.Contains(err.Error(), "1 of 2 checks failed") || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v\n%s", err, out)
	}
	if !strings.Contains(out, "FAIL  conv1d_step/c8192_g256_4steps") || !strings.Contains(out, "wrote "+path+": attach it to a bug report") {
		t.Fatalf("output:\n%s", out)
	}
	raw, rerr := os.ReadFile(path)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if tmp, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*.tmp")); len(tmp) > 0 {
		t.Errorf("temporary files left: %v", tmp)
	}

	// The shape: every top-level field, the Mac's fields null.
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"schema_version", "created", "complete", "ok", "lily", "system", "gpu", "selftest", "pipelines", "residency", "profiles", "checks", "errors"} {
		if top[k] == nil {
			t.Errorf("no %q in the report", k)
		}
	}
	var sys map[string]json.RawMessage
	json.Unmarshal(top["system"], &sys)
	for _, k := range []string{"macos", "chip", "wired_limit_mb", "suggested_wired_limit_mb"} {
		if string(sys[k]) != "null" {
			t.Errorf("system.%s = %s off macOS, want null", k, sys[k])
		}
	}
	if string(top["gpu"]) != "null" {
		t.Errorf("gpu = %s off macOS, want null", top["gpu"])
	}

	var r report.Report
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	if !r.Complete || r.OK || r.SchemaVersion != report.Schema || r.Lily.Go == "" || r.Lily.OS != "linux" || r.System.OS != "linux" || r.System.MemoryBytes == 0 {
		t.Fatalf("report %+v", r)
	}

	// Every case, the failed one recorded with its unwritten element.
	st := r.Selftest
	if st.Device != "emu" || !st.Emulated || st.Kind != "emu" || st.OK || st.Passed != 1 || st.Failed != 1 || len(st.Checks) != 2 || st.E2E != nil || st.Coverage != nil {
		t.Fatalf("selftest %+v", st)
	}
	for _, c := range st.Checks {
		switch c.Case {
		case "qmv_q8/256x2048":
			if !c.Pass || c.Error == nil || c.Tolerance <= 0 || c.Kernel == "" || c.Shape == "" {
				t.Errorf("%+v", c)
			}
		case "conv1d_step/c8192_g256_4steps":
			if c.Pass || c.Error != nil || c.Kernel != broken || !strings.Contains(c.Shape, "8192 channels") || !strings.Contains(c.Worst, "NaN") {
				t.Errorf("the failed case: %+v", c)
			}
		default:
			t.Errorf("unexpected check %+v", c)
		}
	}
	for _, k := range []string{`"case"`, `"kernel"`, `"shape"`, `"error": null`, `"tolerance"`, `"pass": false`, `"worst"`, `"e2e": null`, `"coverage": null`} {
		if !strings.Contains(string(top["selftest"]), k) {
			t.Errorf("the selftest has no %s", k)
		}
	}

	// The pipelines the cases made, with the limits exec.New checks.
	var kernels []string
	for _, p := range r.Pipelines {
		kernels = append(kernels, p.Kernel)
		if p.Error != "" || p.MaxTotalThreadsPerGroup < 32 || p.ThreadExecutionWidth != exec.SIMDWidth || p.MaxThreadgroupMemory <= 0 {
			t.Errorf("pipeline %+v", p)
		}
	}
	if !slices.Contains(kernels, "qmv_q8") || !slices.Contains(kernels, broken) {
		t.Errorf("pipelines %v", kernels)
	}
	if r.Residency.Status != "n/a" {
		t.Errorf("residency %+v", r.Residency)
	}

	// The demo model's profile; the installed model's is skipped (none is pulled).
	if len(r.Profiles) != 2 || r.Profiles[0].Model != "demo" || !strings.Contains(r.Profiles[1].Skipped, "run `lily pull`") || r.Profiles[1].Decode != nil {
		t.Fatalf("profiles %+v", r.Profiles)
	}
	demo := r.Profiles[0]
	if demo.Error != "" || demo.Backend != "emu" || demo.Decode == nil || demo.PrefillCk == nil || demo.PrefillCk.Chunk != demo.Prefill {
		t.Fatalf("demo profile %+v", demo)
	}
	for _, p := range []*profile.Step{demo.Decode, demo.PrefillCk} {
		if len(p.Kernels) < 5 || p.StepBytes <= 0 || p.Kernels[0].Kernel == "" || p.Kernels[0].MS <= 0 {
			t.Errorf("profile %+v", p)
		}
	}

	// The doctor's system checks.
	var names []string
	for _, c := range r.Checks {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "macos,memory,chip,disk,model,gpu,gpu-memory,context" {
		t.Errorf("checks %v", names)
	}

	// --only restricts the plain selftest as it does the report's.
	reportDevice = nil
	out, err = execute(t, "doctor", "--selftest", "--only", "qmv_q8/256x2048", "--output", "json")
	var got selftestOutput
	if jerr := json.Unmarshal([]byte(out), &got); jerr != nil || err != nil || len(got.Checks) != 1 || got.Checks[0].Case != "qmv_q8/256x2048" || !got.OK {
		t.Fatalf("--only: %v %v:\n%s", err, jerr, out)
	}
}

// dropDevice drops every dispatch of one kernel: its outputs stay as the case pre-filled them
// (NaN), as on a GPU that did not run it.
type dropDevice struct {
	exec.Device
	kernel string
	names  map[exec.Pipeline]string
}

func (d *dropDevice) Pipeline(kernel string, constants map[int]any) (exec.Pipeline, error) {
	p, err := d.Device.Pipeline(kernel, constants)
	if err == nil {
		d.names[p] = kernel
	}
	return p, err
}

func (d *dropDevice) Begin() (exec.Encoder, error) {
	e, err := d.Device.Begin()
	if err != nil {
		return nil, err
	}
	return &dropEncoder{Encoder: e, d: d}, nil
}

type dropEncoder struct {
	exec.Encoder
	d    *dropDevice
	drop bool
}

func (e *dropEncoder) SetPipeline(p exec.Pipeline) {
	e.drop = e.d.names[p] == e.d.kernel
	e.Encoder.SetPipeline(p)
}

func (e *dropEncoder) Dispatch(threadgroups, group [3]int) {
	if !e.drop {
		e.Encoder.Dispatch(threadgroups, group)
	}
}
