package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/engine/lifecycle"
	"github.com/lilyformac/lily/engine/lifecycle/syscheck"
	"github.com/lilyformac/lily/internal/wiredlimit"
	"github.com/lilyformac/lily/metal/cases"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/gpu"
	"github.com/lilyformac/lily/metal/plan"
	"github.com/lilyformac/lily/metal/selftest"
)

// reportSchema is the version of the report's format.
const reportSchema = 1

// report is `lily doctor --selftest --report FILE`: everything a maintainer needs from a Mac
// they cannot see. Off macOS the same report comes from the emulator, with the Mac's fields null.
type report struct {
	SchemaVersion int    `json:"schema_version"`
	Created       string `json:"created"` // RFC 3339, UTC
	// Complete is false while the report is being gathered: the file is rewritten after each
	// phase, so a crash or a hung GPU still leaves what came before it.
	Complete  bool             `json:"complete"`
	OK        bool             `json:"ok"` // the selftest passed and nothing failed to be gathered
	Lily      reportLily       `json:"lily"`
	System    reportSystem     `json:"system"`
	GPU       *reportGPU       `json:"gpu"` // null off macOS
	Selftest  reportSelftest   `json:"selftest"`
	Pipelines []reportPipeline `json:"pipelines"` // the load-time limits of every pipeline the selftest made
	Residency reportResidency  `json:"residency"`
	Profiles  []reportProfile  `json:"profiles"` // the demo model's, then the installed model's
	Checks    []syscheck.Check `json:"checks"`   // lily doctor's system checks
	Errors    []string         `json:"errors"`   // what could not be gathered
}

type reportLily struct {
	Version    string `json:"version"`               // the main module's version ("(devel)" from a checkout)
	Commit     string `json:"commit"`                // vcs.revision ("" when the build has none: go run, go test)
	CommitTime string `json:"commit_time,omitempty"` // vcs.time
	Modified   bool   `json:"modified"`              // vcs.modified: built from a tree with changes
	Go         string `json:"go"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
}

type reportSystem struct {
	OS           string  `json:"os"`
	MacOS        *string `json:"macos"` // product version and build, "15.5 (24F74)"; null off macOS
	Chip         *string `json:"chip"`  // machdep.cpu.brand_string; null off macOS
	CPUs         int     `json:"cpus"`
	MemoryBytes  uint64  `json:"memory_bytes"`
	MemorySource string  `json:"memory_source"`
	// WiredLimitMB is iogpu.wired_limit_mb now (0: macOS's default limit), and
	// SuggestedWiredLimitMB the value lily doctor suggests (wiredlimit); both null off macOS.
	WiredLimitMB          *uint64 `json:"wired_limit_mb"`
	SuggestedWiredLimitMB *uint64 `json:"suggested_wired_limit_mb"`
}

// reportGPU is the Metal device as the binding sees it (report_darwin.go).
type reportGPU struct {
	Name        string `json:"name"`
	Family      string `json:"family"`       // the highest of Apple7…Apple10 it supports ("none")
	MetalFamily string `json:"metal_family"` // Metal4 or Metal3 ("none")
	// Families is supportsFamily: for each family Lily cares about.
	Families                      map[string]bool `json:"families"`
	RecommendedMaxWorkingSetBytes uint64          `json:"recommended_max_working_set_bytes"`
	MaxThreadgroupMemoryBytes     int             `json:"max_threadgroup_memory_bytes"`
	MaxBufferBytes                uint64          `json:"max_buffer_bytes"`
	UnifiedMemory                 bool            `json:"unified_memory"`
	Error                         string          `json:"error,omitempty"` // no device could be opened
}

type reportSelftest struct {
	Device   string          `json:"device"` // "metal" or "emu"
	Emulated bool            `json:"emulated"`
	Kind     string          `json:"kind"`           // the tolerances applied: "metal" or "emu"
	Only     []string        `json:"only,omitempty"` // --only
	OK       bool            `json:"ok"`
	Passed   int             `json:"passed"`
	Failed   int             `json:"failed"`
	Seconds  float64         `json:"seconds"`
	Checks   []selftestCheck `json:"checks"`   // every case and check, coverage and e2e included
	E2E      *selftestCheck  `json:"e2e"`      // the end-to-end check again; null when it did not run
	Coverage *selftestCheck  `json:"coverage"` // null when not run (--only)
	Error    string          `json:"error,omitempty"`
}

// reportPipeline is one pipeline's limits as exec.New checks them before the first dispatch.
type reportPipeline struct {
	Kernel                  string `json:"kernel"`
	Constants               string `json:"constants,omitempty"` // its function constants: "0=true 1=2048"
	MaxTotalThreadsPerGroup int    `json:"max_total_threads_per_threadgroup"`
	ThreadExecutionWidth    int    `json:"thread_execution_width"`
	StaticThreadgroupMemory int    `json:"static_threadgroup_memory_bytes"`
	MaxThreadgroupMemory    int    `json:"max_threadgroup_memory_bytes"`
	Error                   string `json:"error,omitempty"` // it could not be made
}

type reportResidency struct {
	// Status is "resident" (an MTLResidencySet keeps weights and KV wired), "not_resident"
	// (macOS before 15: Detail says why) or "n/a" (the emulator).
	Status                string   `json:"status"`
	Detail                string   `json:"detail,omitempty"`
	PipelineCacheWarnings []string `json:"pipeline_cache_warnings"`
}

// reportProfile is `lily bench --profile` of one model: its decode step and a prefill chunk.
type reportProfile struct {
	Model     string       `json:"model"` // "demo" or the checkpoint's directory
	Backend   string       `json:"backend"`
	Context   int          `json:"context,omitempty"` // positions cached before the decode step and the chunk
	Prefill   int          `json:"prefill,omitempty"` // the chunk's tokens
	Steps     int          `json:"steps,omitempty"`   // decode steps timed
	Seconds   float64      `json:"seconds,omitempty"`
	Decode    *stepProfile `json:"decode"`
	PrefillCk *stepProfile `json:"prefill_chunk"`
	Skipped   string       `json:"skipped,omitempty"`
	Error     string       `json:"error,omitempty"`
}

// reportDevice wraps the selftest's device (tests inject failures); nil leaves it.
var reportDevice func(exec.Device) exec.Device

// runReport is `lily doctor --selftest --report path`: it prints the selftest's progress and
// writes the report, rewritten after each phase. It fails when the selftest failed or something
// could not be gathered, after writing the file.
func runReport(cmd *cobra.Command, path, output, modelFlag string, only []string) error {
	if output != "json" && output != "text" {
		return fmt.Errorf("--output %q: expected json or text", output)
	}
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	if output == "json" {
		out = io.Discard
	}
	if only == nil {
		only = selftestOnly
	}
	r := &report{SchemaVersion: reportSchema, Created: time.Now().UTC().Format(time.RFC3339), Lily: lilyBuild(),
		Pipelines: []reportPipeline{}, Profiles: []reportProfile{}, Errors: []string{}}
	save := func() error {
		raw, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		return writeFileAtomic(path, append(raw, '\n'))
	}
	fail := func(format string, a ...any) { r.Errors = append(r.Errors, fmt.Sprintf(format, a...)) }

	// The machine, and lily doctor's checks of it.
	sys := syscheck.Probe()
	r.System = reportSystem{OS: sys.OS, CPUs: runtime.NumCPU(), MemoryBytes: sys.MemBytes, MemorySource: sys.MemSource}
	var macOSBuild string
	r.GPU, macOSBuild = reportProbeGPU()
	if sys.OS == "darwin" {
		version, chip := sys.OSVersion, sys.Chip
		if macOSBuild != "" {
			version = macOSBuild
		}
		r.System.MacOS, r.System.Chip = &version, &chip
		current, suggested := wiredlimit.CurrentMB(), wiredlimit.SuggestedMB(sys.MemBytes)
		r.System.WiredLimitMB, r.System.SuggestedWiredLimitMB = &current, &suggested
	}
	cfg := syscheck.Config{DataDir: lifecycle.ModelsDir(), ModelDir: modelFlag, Context: productionContext}
	if modelFlag == "" {
		cfg.ModelDir, cfg.Repo, cfg.Revision = lifecycle.ModelDir(lifecycle.DefaultRepo), lifecycle.DefaultRepo, lifecycle.DefaultRevision
	}
	r.Checks = syscheck.Run(ctx, cfg)
	if err := save(); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	fmt.Fprintf(out, "writing the report to %s\n", path)

	// The selftest, with every pipeline's limits and the device's residency.
	r.Selftest = reportSelftest{Only: only, Checks: []selftestCheck{}}
	start := time.Now()
	dev, name, err := selftest.DefaultDevice()
	if err != nil {
		r.Selftest.Error = fmt.Sprintf("device: %v", err)
		fail("selftest: device: %v", err)
	} else {
		r.Selftest.Device, r.Selftest.Emulated, r.Selftest.Kind = name, name != "metal", string(cases.Metal)
		if name == "emu" {
			r.Selftest.Kind = string(cases.Emu)
		}
		fmt.Fprintf(out, "selftest on %s\n", name)
		run := dev
		if reportDevice != nil {
			run = reportDevice(run)
		}
		rec := &pipelineRecorder{Device: run}
		opts := selftest.Options{Only: only, GPU: selftestGPU, Kind: cases.Kind(r.Selftest.Kind), Progress: func(res selftest.Result) { printSelftest(out, res) }}
		results := runSelftestOn(ctx, rec, opts)
		for _, res := range results {
			c := selftestCheckOf(res)
			r.Selftest.Checks = append(r.Selftest.Checks, c)
			switch res.Case {
			case "e2e":
				r.Selftest.E2E = &c
			case "coverage":
				r.Selftest.Coverage = &c
			}
		}
		r.Selftest.Failed = selftest.Failed(results)
		r.Selftest.Passed = len(results) - r.Selftest.Failed
		r.Selftest.OK = r.Selftest.Failed == 0
		r.Pipelines = rec.list()
		r.Residency = deviceResidency(dev)
		if c, ok := dev.(exec.Closer); ok { // exec.MetalDevice: free it before the profiles load models
			c.Close()
		}
	}
	r.Selftest.Seconds = time.Since(start).Round(time.Millisecond).Seconds()
	if err := save(); err != nil {
		return fmt.Errorf("report: %w", err)
	}

	// The per-kernel profile of the demo model, then of the installed model where one is.
	backendName, chip := "emu", plan.Chip{}
	device := "emu (the MSL emulator on the CPU)"
	if runtime.GOOS == "darwin" {
		backendName = "metal"
		if r.GPU != nil && r.GPU.Name != "" {
			device = r.GPU.Name
			chip, _ = plan.ChipNamed(r.GPU.Name)
		}
	}
	profiles := []reportProfile{{Model: "demo"}}
	installed, err := lifecycle.ResolveModelDir(modelFlag) // --model, else the pinned pull where it is complete
	switch {
	case err != nil:
		profiles = append(profiles, reportProfile{Model: lifecycle.ModelDir(lifecycle.DefaultRepo), Skipped: err.Error()})
	case backendName == "emu" && modelFlag == "":
		profiles = append(profiles, reportProfile{Model: installed, Skipped: "the emulator profiles an installed model only when --model names it (the 35B checkpoint would take hours)"})
	default:
		profiles = append(profiles, reportProfile{Model: installed})
	}
	for _, p := range profiles {
		m := p.Model
		p.Backend = backendName
		if p.Skipped != "" {
			r.Profiles = append(r.Profiles, p)
			continue
		}
		p.Context, p.Prefill, p.Steps = 4, 8, 1
		o := benchOptions{backend: backendName, model: m, kvBits: 16, prefillChunk: -1}
		if backendName == "metal" {
			p.Context, p.Prefill, p.Steps, o.warmup = 1024, 512, profileSteps, true
			o.kvBits = gpu.DefaultsFor(int64(sys.MemBytes)).KVBits
		}
		o.ctx, o.prefill = p.Context, p.Prefill
		fmt.Fprintf(out, "profiling %s on %s: a decode step after %d tokens, a prefill chunk of %d\n", m, backendName, p.Context, p.Prefill)
		start := time.Now()
		if m == "demo" {
			if o.model, err = demoDir(); err != nil {
				p.Error = fmt.Sprintf("demo model: %v", err)
			}
		}
		if p.Error == "" {
			if po, err := profileModel(ctx, o, p.Steps, chip, device); err != nil {
				p.Error = err.Error()
			} else {
				p.Decode, p.PrefillCk = po.Profile, po.PrefillProfile
			}
		}
		if p.Error != "" {
			fail("profile %s: %s", m, p.Error)
		}
		p.Seconds = time.Since(start).Round(time.Millisecond).Seconds()
		r.Profiles = append(r.Profiles, p)
		if err := save(); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}

	r.Complete, r.OK = true, r.Selftest.OK && r.Selftest.Error == "" && len(r.Errors) == 0
	if err := save(); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if output == "json" {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "%d of %d selftest checks passed; wrote %s: attach it to a bug report\n", r.Selftest.Passed, r.Selftest.Passed+r.Selftest.Failed, path)
	switch {
	case r.Selftest.Failed > 0:
		return fmt.Errorf("selftest: %d of %d checks failed (the report is in %s)", r.Selftest.Failed, r.Selftest.Passed+r.Selftest.Failed, path)
	case !r.OK:
		return fmt.Errorf("report: %s (the report is in %s)", strings.Join(r.Errors, "; "), path)
	}
	return nil
}

// lilyBuild is what the binary knows of its own build.
func lilyBuild() reportLily {
	l := reportLily{Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return l
	}
	l.Version = bi.Main.Version
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			l.Commit = s.Value
		case "vcs.time":
			l.CommitTime = s.Value
		case "vcs.modified":
			l.Modified = s.Value == "true"
		}
	}
	return l
}

// deviceResidency is the selftest device's residency: whether its weights would stay wired.
func deviceResidency(dev exec.Device) reportResidency {
	m, ok := dev.(*exec.MetalDevice)
	if !ok {
		return reportResidency{Status: "n/a", Detail: "the emulator has no residency", PipelineCacheWarnings: []string{}}
	}
	r := reportResidency{Status: "resident", PipelineCacheWarnings: []string{}}
	if m.NotResident != nil {
		r.Status, r.Detail = "not_resident", m.NotResident.Error()
	}
	for _, w := range m.Warnings {
		r.PipelineCacheWarnings = append(r.PipelineCacheWarnings, w.Error())
	}
	return r
}

// pipelineRecorder notes every distinct pipeline the selftest makes with the limits exec.New
// checks it against (exec.Pipeline, exec.Limited).
type pipelineRecorder struct {
	exec.Device
	mu    sync.Mutex
	seen  map[string]bool
	pipes []reportPipeline
}

func (r *pipelineRecorder) Pipeline(kernel string, constants map[int]any) (exec.Pipeline, error) {
	p, err := r.Device.Pipeline(kernel, constants)
	keys := make([]int, 0, len(constants))
	for k := range constants {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var cs []string
	for _, k := range keys {
		cs = append(cs, fmt.Sprintf("%d=%v", k, constants[k]))
	}
	rp := reportPipeline{Kernel: kernel, Constants: strings.Join(cs, " ")}
	if err != nil {
		rp.Error = err.Error()
	} else {
		rp.MaxTotalThreadsPerGroup = p.MaxThreads()
		if l, ok := p.(exec.Limited); ok {
			rp.ThreadExecutionWidth, rp.StaticThreadgroupMemory, rp.MaxThreadgroupMemory = l.ThreadExecutionWidth(), l.StaticThreadgroupMemoryLength(), l.MaxThreadgroupMemoryLength()
		}
	}
	key := rp.Kernel + "\x00" + rp.Constants
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	if !r.seen[key] {
		r.seen[key] = true
		r.pipes = append(r.pipes, rp)
	}
	return p, err
}

// list is the pipelines by kernel, then constants.
func (r *pipelineRecorder) list() []reportPipeline {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]reportPipeline{}, r.pipes...)
	slices.SortStableFunc(out, func(a, b reportPipeline) int {
		return strings.Compare(a.Kernel+"\x00"+a.Constants, b.Kernel+"\x00"+b.Constants)
	})
	return out
}

// writeFileAtomic writes data to a temporary file beside path, syncs it and renames it over
// path, so a reader finds the old report or the new one, never a torn one.
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil { // the rename itself, durable where the OS allows
		d.Sync()
		d.Close()
	}
	return nil
}
