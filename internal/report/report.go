// Package report gathers `lily doctor --selftest --report FILE`: the build, the machine, the
// selftest with every pipeline's limits, the kernels' profiles and the doctor's checks, in one
// JSON file rewritten after each phase.
package report

import (
	"encoding/json"
	"runtime"
	"runtime/debug"

	"github.com/lilyformac/lily/engine/lifecycle/syscheck"
	"github.com/lilyformac/lily/internal/fsutil"
	"github.com/lilyformac/lily/metal/profile"
)

// Schema is the version of the report's format.
const Schema = 1

// Report is everything a maintainer needs from a Mac they cannot see. Off macOS the same
// report comes from the emulator, with the Mac's fields null.
type Report struct {
	SchemaVersion int    `json:"schema_version"`
	Created       string `json:"created"` // RFC 3339, UTC
	// Complete is false while the report is being gathered: the file is rewritten after each
	// phase, so a crash or a hung GPU still leaves what came before it.
	Complete  bool             `json:"complete"`
	OK        bool             `json:"ok"` // the selftest passed and nothing failed to be gathered
	Lily      Build            `json:"lily"`
	System    System           `json:"system"`
	GPU       *GPU             `json:"gpu"` // null off macOS
	Selftest  Selftest         `json:"selftest"`
	Pipelines []Pipeline       `json:"pipelines"` // the load-time limits of every pipeline the selftest made
	Residency Residency        `json:"residency"`
	Profiles  []ModelProfile   `json:"profiles"` // the demo model's, then the installed model's
	Checks    []syscheck.Check `json:"checks"`   // lily doctor's system checks
	Errors    []string         `json:"errors"`   // what could not be gathered
}

// Build is what the binary knows of its own build.
type Build struct {
	Version    string `json:"version"`               // the main module's version ("(devel)" from a checkout)
	Commit     string `json:"commit"`                // vcs.revision ("" when the build has none: go run, go test)
	CommitTime string `json:"commit_time,omitempty"` // vcs.time
	Modified   bool   `json:"modified"`              // vcs.modified: built from a tree with changes
	Go         string `json:"go"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
}

// System is the machine.
type System struct {
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

// GPU is the Metal device as the binding sees it (gpu_darwin.go).
type GPU struct {
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

// Selftest is `lily doctor --selftest` as the report has it.
type Selftest struct {
	Device   string   `json:"device"` // "metal" or "emu"
	Emulated bool     `json:"emulated"`
	Kind     string   `json:"kind"`           // the tolerances applied: "metal" or "emu"
	Only     []string `json:"only,omitempty"` // --only
	OK       bool     `json:"ok"`
	Passed   int      `json:"passed"`
	Failed   int      `json:"failed"`
	Seconds  float64  `json:"seconds"`
	Checks   []Check  `json:"checks"`   // every case and check, coverage and e2e included
	E2E      *Check   `json:"e2e"`      // the end-to-end check again; null when it did not run
	Coverage *Check   `json:"coverage"` // null when not run (--only)
	Error    string   `json:"error,omitempty"`
}

// Pipeline is one pipeline's limits as exec.New checks them before the first dispatch.
type Pipeline struct {
	Kernel                  string `json:"kernel"`
	Constants               string `json:"constants,omitempty"` // its function constants: "0=true 1=2048"
	MaxTotalThreadsPerGroup int    `json:"max_total_threads_per_threadgroup"`
	ThreadExecutionWidth    int    `json:"thread_execution_width"`
	StaticThreadgroupMemory int    `json:"static_threadgroup_memory_bytes"`
	MaxThreadgroupMemory    int    `json:"max_threadgroup_memory_bytes"`
	Error                   string `json:"error,omitempty"` // it could not be made
}

// Residency says whether the selftest device's weights would stay wired.
type Residency struct {
	// Status is "resident" (an MTLResidencySet keeps weights and KV wired), "not_resident"
	// (macOS before 15: Detail says why) or "n/a" (the emulator).
	Status                string   `json:"status"`
	Detail                string   `json:"detail,omitempty"`
	PipelineCacheWarnings []string `json:"pipeline_cache_warnings"`
}

// ModelProfile is `lily bench --profile` of one model: its decode step and a prefill chunk.
type ModelProfile struct {
	Model     string        `json:"model"` // "demo" or the checkpoint's directory
	Backend   string        `json:"backend"`
	Context   int           `json:"context,omitempty"` // positions cached before the decode step and the chunk
	Prefill   int           `json:"prefill,omitempty"` // the chunk's tokens
	Steps     int           `json:"steps,omitempty"`   // decode steps timed
	Seconds   float64       `json:"seconds,omitempty"`
	Decode    *profile.Step `json:"decode"`
	PrefillCk *profile.Step `json:"prefill_chunk"`
	Skipped   string        `json:"skipped,omitempty"`
	Error     string        `json:"error,omitempty"`
}

// CurrentBuild is what the binary knows of its own build.
func CurrentBuild() Build {
	l := Build{Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
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

// Save writes the report to path as indented JSON, replacing the file whole (fsutil.WriteFileAtomic).
func (r *Report) Save(path string) error {
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(path, append(raw, '\n'), 0o644)
}
