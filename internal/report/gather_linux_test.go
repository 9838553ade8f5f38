//go:build linux

package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/lifecycle/syscheck"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/profile"
	"github.com/lilyformac/lily/metal/selftest"
)

// TestGather runs the phases with a made-up selftest and profiles: the file is written after
// each phase with complete false, what the selftest's device made is in pipelines, the
// emulator profiles a few positions of each model, and a profile's failure is an error of the
// report, which is then complete but not ok.
func TestGather(t *testing.T) {
	dir := t.TempDir()
	path, model := filepath.Join(dir, "report.json"), filepath.Join(dir, "model")
	onDisk := func(what string) Report {
		var r Report
		raw, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(raw, &r)
		}
		if err != nil || r.Complete {
			t.Fatalf("%s: the file: %v, complete %v", what, err, r.Complete)
		}
		return r
	}
	var out bytes.Buffer
	var progress []string
	var profiled []profile.Options
	g := Gatherer{Path: path, Out: &out, Model: model, Checks: syscheck.Config{DataDir: dir, ModelDir: model}, Only: []string{"qmv_q8"},
		Wrap: func(exec.Device) exec.Device { return fakeDevice{} },
		RunSelftest: func(ctx context.Context, dev exec.Device, opts selftest.Options) []selftest.Result {
			if r := onDisk("the selftest"); r.System.OS != "linux" || len(r.Checks) == 0 || r.Selftest.Checks != nil {
				t.Errorf("before the selftest: %+v", r)
			}
			if opts.Kind != "emu" || len(opts.Only) != 1 || opts.GPU != nil {
				t.Errorf("options %+v", opts)
			}
			dev.Pipeline("qmv_q8", map[int]any{0: true})
			res := []selftest.Result{{Case: "qmv_q8/256x2048", Pass: true}, {Case: "coverage", Pass: true}, {Case: "e2e", WorstError: math.NaN(), Err: errors.New("no demo")}}
			for _, r := range res {
				opts.Progress(r)
			}
			return res
		},
		Progress: func(r selftest.Result) { progress = append(progress, r.Case) },
		Profile: func(ctx context.Context, backend, m string, kvBits int, o profile.Options) (*profile.Output, error) {
			r := onDisk("profile " + m)
			if r.Selftest.Failed != 1 || len(r.Profiles) != len(profiled) || backend != "emu" || kvBits != 16 {
				t.Errorf("profile %s on %s (%d bits): %+v", m, backend, kvBits, r)
			}
			profiled = append(profiled, o)
			if m != "demo" {
				return nil, errors.New("not a checkpoint")
			}
			return &profile.Output{Profile: &profile.Step{Mode: "sample"}}, nil
		},
	}
	r, err := g.Gather(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	want, _ := json.MarshalIndent(r, "", "  ")
	if string(raw) != string(want)+"\n" || !r.Complete || r.OK {
		t.Fatalf("the file:\n%s\nthe report: %+v", raw, r)
	}
	st := r.Selftest
	if st.Device != "emu" || !st.Emulated || st.Passed != 2 || st.Failed != 1 || st.OK || st.E2E == nil || st.E2E.Failure != "no demo" || st.Coverage == nil || !st.Coverage.Pass || len(st.Checks) != 3 || strings.Join(progress, ",") != "qmv_q8/256x2048,coverage,e2e" {
		t.Errorf("selftest %+v, progress %v", st, progress)
	}
	if len(r.Pipelines) != 1 || r.Pipelines[0].Constants != "0=true" || r.Residency.Status != "n/a" {
		t.Errorf("pipelines %+v, residency %+v", r.Pipelines, r.Residency)
	}
	wantOpts := profile.Options{Context: 4, Prefill: 8, Steps: 1, Device: "emu (the MSL emulator on the CPU)"}
	if len(profiled) != 2 || profiled[0] != wantOpts || profiled[1] != wantOpts {
		t.Errorf("profiled with %+v", profiled)
	}
	p := r.Profiles
	if len(p) != 2 || p[0].Model != "demo" || p[0].Decode == nil || p[0].Error != "" || p[1].Model != model || p[1].Error != "not a checkpoint" || p[1].Backend != "emu" {
		t.Errorf("profiles %+v", p)
	}
	if len(r.Errors) != 1 || r.Errors[0] != "profile "+model+": not a checkpoint" {
		t.Errorf("errors %q", r.Errors)
	}
	for _, line := range []string{"writing the report to " + path, "selftest on emu", "profiling demo on emu: a decode step after 4 tokens, a prefill chunk of 8"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("no %q in\n%s", line, out.String())
		}
	}

	// A report that cannot be written stops the gathering.
	g.Path = filepath.Join(dir, "missing", "report.json")
	if _, err := g.Gather(context.Background()); err == nil || !strings.HasPrefix(err.Error(), "report: ") {
		t.Errorf("unwritable: %v", err)
	}
}
