package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/engine/lifecycle"
	"github.com/lilyformac/lily/engine/lifecycle/syscheck"
	"github.com/lilyformac/lily/internal/report"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/profile"
	"github.com/lilyformac/lily/metal/selftest"
)

// reportDevice wraps the selftest's device (tests inject failures); nil leaves it.
var reportDevice func(exec.Device) exec.Device

// runReport is `lily doctor --selftest --report path`: it prints the selftest's progress and
// writes the report (internal/report), rewritten after each phase. It fails when the selftest
// failed or something could not be gathered, after writing the file.
func runReport(cmd *cobra.Command, path, output, modelFlag string, only []string) error {
	if output != "json" && output != "text" {
		return fmt.Errorf("--output %q: expected json or text", output)
	}
	out := cmd.OutOrStdout()
	if output == "json" {
		out = io.Discard
	}
	if only == nil {
		only = selftestOnly
	}
	g := report.Gatherer{Path: path, Out: out, Model: modelFlag, Checks: doctorChecks(modelFlag), Only: only,
		RunSelftest: runSelftestOn, GPU: selftestGPU, Progress: func(res selftest.Result) { printSelftest(out, res) },
		Wrap: reportDevice, Profile: reportProfile}
	r, err := g.Gather(cmd.Context())
	if err != nil {
		return err
	}
	if output == "json" {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	st := r.Selftest
	fmt.Fprintf(out, "%d of %d selftest checks passed; wrote %s: attach it to a bug report\n", st.Passed, st.Passed+st.Failed, path)
	switch {
	case st.Failed > 0:
		return fmt.Errorf("selftest: %d of %d checks failed (the report is in %s)", st.Failed, st.Passed+st.Failed, path)
	case !r.OK:
		return fmt.Errorf("report: %s (the report is in %s)", strings.Join(r.Errors, "; "), path)
	}
	return nil
}

// doctorChecks is what lily doctor's system checks look at: --model, else the pinned pull.
func doctorChecks(model string) syscheck.Config {
	cfg := syscheck.Config{DataDir: lifecycle.ModelsDir(), ModelDir: model, Context: productionContext}
	if model == "" {
		cfg.ModelDir, cfg.Repo, cfg.Revision = lifecycle.ModelDir(lifecycle.DefaultRepo), lifecycle.DefaultRepo, lifecycle.DefaultRevision
	}
	return cfg
}

// reportProfile is the report's profile of model ("demo": the demo checkpoint) on backend.
func reportProfile(ctx context.Context, backend, model string, kvBits int, po profile.Options) (*profile.Output, error) {
	if model == "demo" {
		dir, err := demoDir()
		if err != nil {
			return nil, fmt.Errorf("demo model: %w", err)
		}
		model = dir
	}
	return profileModel(ctx, benchOptions{backend: backend, model: model, kvBits: kvBits, prefillChunk: -1}, po)
}
