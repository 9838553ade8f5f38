// Package syscheck answers "can this machine run Lily?" for `lily doctor` and the serve
// "checks" phase (before the pull and after it). OS facts are gathered per platform
// (facts_*.go); judging them is plain code that tests drive with made-up machines.
package syscheck

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lilyformac/lily/engine/lifecycle"
	"github.com/lilyformac/lily/engine/lifecycle/hub"
	"github.com/lilyformac/lily/internal/fsutil"
	"github.com/lilyformac/lily/internal/wiredlimit"
)

// Status is a check's verdict.
type Status string

const (
	Pass Status = "pass"
	Warn Status = "warn"
	Fail Status = "fail" // Lily cannot run until it is fixed
	Skip Status = "skip" // does not apply here
)

// Check is one line of the doctor's report.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"` // one line: what the user can do
}

// GPUInfo is what the Metal host reports about the default GPU.
type GPUInfo struct {
	Name                     string
	Family                   string // e.g. "Apple9"
	RecommendedMaxWorkingSet uint64 // bytes: MTLDevice.recommendedMaxWorkingSetSize
	Available                bool
	Reason                   string // why not, when !Available
}

// ProbeGPU is set (in an init function) by the darwin Metal package once it exists; while it
// is nil the GPU checks on macOS warn that the probe is not built yet.
var ProbeGPU func() GPUInfo

// Config says what to check.
type Config struct {
	DataDir        string // where checkpoints are stored: free space is measured here
	ModelDir       string // the checkpoint to check
	Repo, Revision string // what ModelDir should hold; "" accepts any completed pull
	ModelBytes     int64  // weights, if no pull has recorded the exact size (0: lifecycle.ModelBytes)
	RuntimeBytes   int64  // memory beyond the weights (0: lifecycle.RuntimeBytes)
	// Context, when set, is the context lily serve would hold in a GPU working set of so many
	// bytes on a Mac with memory bytes of memory (which decides its serving defaults), and why it
	// is less than the model's (the decode plan's memory model).
	Context ContextFunc
	// Machine, when set, stands in for this machine: the checks judge its facts instead of
	// probing the OS, the GPU and the disk (a test's made-up Mac).
	Machine *Machine
}

// Machine is what the checks read about the machine itself, as opposed to the checkpoint.
type Machine struct {
	System
	GPU       *GPUInfo // the Metal probe's answer; nil: no probe (off macOS, or not built)
	FreeBytes uint64   // free space at Config.DataDir
}

// ContextFunc is Config.Context.
type ContextFunc func(workingSet, memory int64) (positions int, why string, err error)

// UsefulContext is the least context Lily counts as useful, and promises on its smallest Mac
// (24 GB, with the GPU limit raised): a coding agent's system prompt and tools take 13,000 to
// 20,000 tokens before the conversation and its answers (up to 32,000 tokens each) begin.
const UsefulContext = 65536

// facts are what the OS reports (System); a zero field means unknown.
type facts = System

// Seams for tests.
var (
	probe     = probeSystem
	freeSpace = fsutil.FreeSpace
)

const (
	minMacOS  = 15
	minMemory = 24 << 30 // Apple's "24 GB" is 24 GiB in hw.memsize
)

// Run performs every check, in a stable order.
func Run(ctx context.Context, cfg Config) []Check {
	f, gpu, free := cfg.machine()
	model, m := checkModel(ctx, cfg)
	weights := orDefault(cfg.ModelBytes, lifecycle.ModelBytes)
	if m != nil {
		weights = m.Size()
	}
	// The weights already on disk: all of them in a complete pull of what is asked for, else
	// what a resumed pull would keep (the disk check wants room for the rest only).
	onDisk := weights
	if complete := m != nil && (cfg.Repo == "" || m.Repo == cfg.Repo && m.Revision == cfg.Revision); !complete {
		onDisk = hub.OnDisk(cfg.ModelDir)
	}
	need := weights + orDefault(cfg.RuntimeBytes, lifecycle.RuntimeBytes)
	return []Check{
		checkMacOS(f),
		checkMemory(f),
		checkChip(f),
		checkDisk(cfg.DataDir, free, weights, onDisk),
		model,
		checkGPU(f, gpu),
		checkGPUMemory(f, gpu, weights, need),
		checkContext(f, gpu, cfg.Context),
	}
}

// machine is what the checks read about this machine: Config.Machine, or the OS's answers.
func (cfg Config) machine() (facts, *GPUInfo, func(string) (uint64, error)) {
	if m := cfg.Machine; m != nil {
		return m.System, m.GPU, func(string) (uint64, error) { return m.FreeBytes, nil }
	}
	f := probe()
	var gpu *GPUInfo
	if f.OS == "darwin" && ProbeGPU != nil {
		g := ProbeGPU()
		gpu = &g
	}
	return f, gpu, freeSpace
}

// checkContext reports the context the GPU's working set leaves room for beside the weights.
func checkContext(f facts, gpu *GPUInfo, context ContextFunc) Check {
	switch {
	case f.OS != "darwin":
		return Check{Name: "context", Status: Skip, Detail: notMacOS}
	case context == nil || gpu == nil || !gpu.Available || gpu.RecommendedMaxWorkingSet == 0:
		return Check{Name: "context", Status: Skip, Detail: "no GPU working set to size the KV cache in"}
	}
	return ContextCheck(f.MemBytes, gpu.RecommendedMaxWorkingSet, context)
}

// ContextCheck judges the context lily serve holds in a GPU working set of workingSet bytes on a
// Mac with memBytes of memory (0: unknown): it fails when the weights do not fit, warns when
// less than UsefulContext or than the model's context fits, and then gives the exact
// iogpu.wired_limit_mb command for this Mac (wiredlimit), what it leaves macOS, how long it
// lasts and the context it gives, where raising the limit would serve more.
func ContextCheck(memBytes, workingSet uint64, context ContextFunc) Check {
	c := Check{Name: "context"}
	n, why, err := context(int64(workingSet), int64(memBytes))
	raise := ""
	if mb := wiredlimit.SuggestedMB(memBytes); mb<<20 > workingSet {
		if after, _, err := context(int64(mb)<<20, int64(memBytes)); err == nil && after > n {
			raise = fmt.Sprintf("%s; lily serve then holds %d positions", wiredlimit.Advice(memBytes), after)
		}
	}
	switch {
	case err != nil:
		c.Status, c.Detail, c.Fix = Fail, err.Error(), cmp.Or(raise, "use a Mac with more memory")
	case n < UsefulContext:
		c.Status, c.Fix = Warn, cmp.Or(raise, "use a Mac with more memory")
		c.Detail = fmt.Sprintf("lily serve holds only %d positions, less than the %d an agent's session needs: %s", n, UsefulContext, why)
	case why != "":
		c.Status, c.Detail, c.Fix = Warn, fmt.Sprintf("lily serve holds %d positions: %s", n, why), cmp.Or(raise, "pass --ctx to choose less")
	default:
		c.Status, c.Detail = Pass, fmt.Sprintf("lily serve holds the model's full %d positions", n)
	}
	return c
}

// Failed counts the failed checks.
func Failed(checks []Check) int {
	n := 0
	for _, c := range checks {
		if c.Status == Fail {
			n++
		}
	}
	return n
}

// Step is the serve "checks" phase: it fails with the first failed check's detail and fix.
func Step(cfg Config) lifecycle.Step { return step(cfg, "") }

// PreflightStep is the serve "checks" phase before the pull: the checks that need no weights on
// disk (macOS, memory, chip, free disk for what is left to download, the GPU and whether its
// working set holds the model at its expected size), so a Mac that cannot run the model is told
// before a 19 GB download rather than after it. The model check waits for Step after the pull:
// a partial or damaged directory is what the pull completes or repairs.
func PreflightStep(cfg Config) lifecycle.Step { return step(cfg, "model") }

// step runs the checks, less the one named skip, failing on the first failure.
func step(cfg Config, skip string) lifecycle.Step {
	return lifecycle.Step{Phase: lifecycle.PhaseChecks, Run: func(ctx context.Context, s *lifecycle.State) error {
		checks := Run(ctx, cfg)
		var warns []string
		for _, c := range checks {
			if c.Name == skip {
				continue
			}
			switch c.Status {
			case Fail:
				return fmt.Errorf("%s: %s; fix: %s", c.Name, c.Detail, c.Fix)
			case Warn:
				warns = append(warns, c.Name)
			}
		}
		detail := "all passed"
		if len(warns) > 0 {
			detail = "warnings: " + strings.Join(warns, ", ") + " (see lily doctor)"
		}
		s.SetProgress(1, detail)
		return nil
	}}
}

func orDefault(v, def int64) int64 {
	if v > 0 {
		return v
	}
	return def
}

var notMacOS = "not macOS"

func checkMacOS(f facts) Check {
	c := Check{Name: "macos"}
	if f.OS != "darwin" {
		c.Status, c.Detail = Skip, notMacOS
		return c
	}
	major, err := strconv.Atoi(strings.SplitN(f.OSVersion, ".", 2)[0])
	switch {
	case err != nil:
		c.Status, c.Detail = Warn, fmt.Sprintf("cannot read the macOS version (kern.osproductversion = %q)", f.OSVersion)
	case major < minMacOS:
		c.Status, c.Detail = Fail, fmt.Sprintf("macOS %s; Lily needs macOS %d or later", f.OSVersion, minMacOS)
		c.Fix = "update macOS in System Settings > General > Software Update"
	default:
		c.Status, c.Detail = Pass, "macOS "+f.OSVersion
	}
	return c
}

// gib renders memory sizes as Apple sells them: binary units, "GB".
func gib(n uint64) string { return fmt.Sprintf("%.1f GB", float64(n)/(1<<30)) }

func checkMemory(f facts) Check {
	c := Check{Name: "memory"}
	switch {
	case f.MemBytes == 0:
		c.Status, c.Detail = Skip, "not measured on "+f.OS
	// 5% slack: Linux reports memory minus what the kernel reserved; hw.memsize is exact.
	case f.MemBytes < minMemory*95/100:
		c.Status, c.Detail = Fail, fmt.Sprintf("%s (%s); the model needs at least %s", gib(f.MemBytes), f.MemSource, gib(minMemory))
		c.Fix = "use a Mac with 24 GB or more of memory"
	default:
		c.Status, c.Detail = Pass, fmt.Sprintf("%s (%s)", gib(f.MemBytes), f.MemSource)
	}
	return c
}

func checkChip(f facts) Check {
	c := Check{Name: "chip"}
	switch {
	case f.OS != "darwin":
		c.Status, c.Detail = Skip, notMacOS
	case strings.HasPrefix(f.Chip, "Apple"):
		c.Status, c.Detail = Pass, f.Chip
	default:
		c.Status, c.Detail = Warn, fmt.Sprintf("%q is not an Apple silicon chip", f.Chip)
		c.Fix = "Lily's Metal backend needs Apple silicon (M1 or later)"
	}
	return c
}

// checkDisk wants room for what is left to download of the weights: onDisk bytes of them are
// there already (all of them when the pull is complete; part when it was interrupted and will
// resume).
func checkDisk(dataDir string, measure func(string) (uint64, error), weights, onDisk int64) Check {
	c := Check{Name: "disk"}
	free, err := measure(dataDir)
	left := max(weights-onDisk, 0)
	needs := "the model needs " + hub.FormatBytes(weights)
	if onDisk > 0 {
		needs = fmt.Sprintf("the rest of the download needs %s (%s of %s already downloaded)", hub.FormatBytes(left), hub.FormatBytes(min(onDisk, weights)), hub.FormatBytes(weights))
	}
	switch {
	case err != nil:
		c.Status, c.Detail = Warn, fmt.Sprintf("cannot measure free space at %s: %v", dataDir, err)
	case left == 0:
		c.Status, c.Detail = Pass, fmt.Sprintf("%s free at %s", hub.FormatBytes(int64(free)), dataDir)
	case free < uint64(left):
		c.Status = Fail
		c.Detail = fmt.Sprintf("%s free at %s; %s", hub.FormatBytes(int64(free)), dataDir, needs)
		c.Fix = fmt.Sprintf("free up %s, or pull to another disk with `lily pull --dir DIR` and serve it with `lily serve --model DIR`", hub.FormatBytes(left-int64(free)))
	default:
		c.Status, c.Detail = Pass, fmt.Sprintf("%s free at %s (%s)", hub.FormatBytes(int64(free)), dataDir, needs)
	}
	return c
}

// checkModel checks the pull's marker and file sizes (cheap: a stat per file); it returns the
// marker when the checkpoint is complete.
func checkModel(ctx context.Context, cfg Config) (Check, *hub.Marker) {
	c := Check{Name: "model"}
	m, err := hub.Verify(ctx, cfg.ModelDir, hub.VerifyFast, nil)
	switch {
	case err == nil && (cfg.Repo == "" || m.Repo == cfg.Repo && m.Revision == cfg.Revision):
		c.Status, c.Detail = Pass, fmt.Sprintf("%s@%.12s, %d files, %s at %s", m.Repo, m.Revision, len(m.Files), hub.FormatBytes(m.Size()), cfg.ModelDir)
		return c, m
	case err == nil:
		c.Status, c.Detail = Warn, fmt.Sprintf("%s holds %s@%.12s, not the pinned %s@%.12s", cfg.ModelDir, m.Repo, m.Revision, cfg.Repo, cfg.Revision)
		c.Fix = "run `lily pull` to update it"
		return c, m
	case errors.Is(err, hub.ErrMismatch):
		c.Status, c.Detail = Fail, fmt.Sprintf("damaged: %v", err)
		c.Fix = "run `lily pull`: it re-checks every file and downloads only the damaged ones"
	case !errors.Is(err, hub.ErrNotPulled):
		c.Status, c.Detail = Warn, err.Error()
	default:
		_, errDir := os.Stat(cfg.ModelDir)
		_, errLock := os.Stat(filepath.Join(cfg.ModelDir, hub.LockName))
		switch {
		case errDir != nil:
			c.Status, c.Detail, c.Fix = Warn, "not downloaded to "+cfg.ModelDir, "run `lily pull` to download it"
		case errLock == nil:
			c.Status, c.Detail, c.Fix = Warn, "download into "+cfg.ModelDir+" has not finished", "run `lily pull` to resume it"
		default:
			c.Status, c.Detail = Warn, cfg.ModelDir+" was not pulled by lily (no "+hub.MarkerName+"): its files cannot be verified"
			c.Fix = "use `lily pull` for a verified copy, or keep using this one at your own risk"
		}
	}
	return c, nil
}

func checkGPU(f facts, gpu *GPUInfo) Check {
	c := Check{Name: "gpu"}
	switch {
	case f.OS != "darwin":
		c.Status, c.Detail = Skip, notMacOS
	case gpu == nil:
		c.Status, c.Detail = Warn, "Metal probe not built yet"
	case !gpu.Available:
		c.Status, c.Detail = Fail, "no usable Metal GPU: "+gpu.Reason
		c.Fix = "run Lily on an Apple silicon Mac, outside a VM or sandbox that hides the GPU"
	default:
		c.Status, c.Detail = Pass, fmt.Sprintf("%s (GPU family %s)", gpu.Name, gpu.Family)
	}
	return c
}

// checkGPUMemory compares the GPU's working-set budget with what the model needs. macOS caps
// the memory the GPU may wire at about two thirds of RAM on smaller Macs (~16 GB of 24 GB),
// which is below this model's need; an administrator can raise the cap until the next reboot.
func checkGPUMemory(f facts, gpu *GPUInfo, weights, need int64) Check {
	c := Check{Name: "gpu-memory"}
	if f.OS != "darwin" {
		c.Status, c.Detail = Skip, notMacOS
		return c
	}
	needs := fmt.Sprintf("%s needed (model %s + runtime %s)", hub.FormatBytes(need), hub.FormatBytes(weights), hub.FormatBytes(need-weights))
	// Suggest this Mac's limit (all but what macOS keeps) where it holds the need.
	raise := ""
	if mb := wiredlimit.SuggestedMB(f.MemBytes); mb > 0 && mb<<20 >= uint64(need) {
		raise = wiredlimit.Advice(f.MemBytes)
	}
	if gpu != nil && !gpu.Available {
		c.Status, c.Detail = Skip, "no Metal GPU"
		return c
	}
	var budget uint64
	var source string
	switch {
	case gpu != nil:
		budget, source = gpu.RecommendedMaxWorkingSet, "Metal recommendedMaxWorkingSetSize"
	case f.WiredLimitMB > 0:
		budget, source = f.WiredLimitMB<<20, "iogpu.wired_limit_mb"
	}
	switch {
	case budget >= uint64(need):
		c.Status, c.Detail = Pass, fmt.Sprintf("GPU working set %s (%s) ≥ %s", hub.FormatBytes(int64(budget)), source, needs)
	case budget > 0:
		c.Status = Fail
		c.Detail = fmt.Sprintf("GPU working set %s (%s) < %s; macOS limits how much memory the GPU may wire", hub.FormatBytes(int64(budget)), source, needs)
		c.Fix = raise
		if raise == "" || wiredlimit.SuggestedMB(f.MemBytes)<<20 <= budget {
			c.Fix = "this Mac has too little memory for the model; use one with more"
		}
	case f.MemBytes > 0 && f.MemBytes < 32<<30:
		c.Status = Warn
		c.Detail = fmt.Sprintf("not measured (Metal probe not built yet); on a %s Mac macOS lets the GPU wire about two thirds of memory by default, less than the %s", gib(f.MemBytes), needs)
		c.Fix = raise
	default:
		c.Status, c.Detail = Warn, "not measured (Metal probe not built yet); "+needs
	}
	return c
}
