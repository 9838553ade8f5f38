package syscheck

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/lifecycle"
	"github.com/lilyformac/lily/engine/lifecycle/hub"
)

// mac returns the facts of a Mac with mem GiB of memory on macOS ver.
func mac(mem uint64, ver string) facts {
	return facts{OS: "darwin", OSVersion: ver, MemBytes: mem << 30, MemSource: "hw.memsize", Chip: "Apple M2"}
}

// fake installs made-up facts, free space and GPU probe for one test.
func fake(t *testing.T, f facts, free uint64, gpu *GPUInfo) {
	oldProbe, oldFree, oldGPU := probe, freeSpace, ProbeGPU
	t.Cleanup(func() { probe, freeSpace, ProbeGPU = oldProbe, oldFree, oldGPU })
	probe = func() facts { return f }
	freeSpace = func(string) (uint64, error) { return free, nil }
	ProbeGPU = nil
	if gpu != nil {
		ProbeGPU = func() GPUInfo { return *gpu }
	}
}

func byName(checks []Check) map[string]Check {
	m := map[string]Check{}
	for _, c := range checks {
		m[c.Name] = c
	}
	return m
}

func expect(t *testing.T, c Check, status Status, detail, fix string) {
	t.Helper()
	if c.Status != status || !strings.Contains(c.Detail, detail) || !strings.Contains(c.Fix, fix) {
		t.Errorf("%s: got %s %q fix %q; want %s containing %q, fix containing %q", c.Name, c.Status, c.Detail, c.Fix, status, detail, fix)
	}
	if strings.Contains(c.Detail+c.Fix, "\n") {
		t.Errorf("%s: not one line", c.Name)
	}
}

// pulledDir writes a tiny completed pull: one 10-byte file and its marker.
func pulledDir(t *testing.T) string {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.bin"), make([]byte, 10), 0o644)
	m := hub.Marker{Repo: "org/tiny", Revision: "abc", Files: []hub.File{{Path: "a.bin", Size: 10, SHA256: "00"}}}
	raw, _ := json.Marshal(m)
	os.WriteFile(filepath.Join(dir, hub.MarkerName), raw, 0o644)
	return dir
}

func TestMac24GBWithoutMetalProbeExplainsWiredLimit(t *testing.T) {
	fake(t, mac(24, "15.5"), 500e9, nil)
	c := byName(Run(context.Background(), Config{DataDir: t.TempDir(), ModelDir: filepath.Join(t.TempDir(), "none")}))
	expect(t, c["macos"], Pass, "macOS 15.5", "")
	expect(t, c["memory"], Pass, "24.0 GB (hw.memsize)", "")
	expect(t, c["chip"], Pass, "Apple M2", "")
	expect(t, c["disk"], Pass, "500.0 GB free", "")
	expect(t, c["model"], Warn, "not downloaded", "lily pull")
	expect(t, c["gpu"], Warn, "Metal probe not built yet", "")
	expect(t, c["gpu-memory"], Warn, "about two thirds of memory", "sudo sysctl iogpu.wired_limit_mb=20480")
	if n := Failed(Run(context.Background(), Config{DataDir: t.TempDir(), ModelDir: t.TempDir()})); n != 0 {
		t.Fatalf("%d failures", n)
	}
}

func TestMacFailures(t *testing.T) {
	fake(t, mac(16, "14.6"), 5e9, &GPUInfo{Name: "Apple M1", Family: "Apple7", RecommendedMaxWorkingSet: 10 << 30, Available: true})
	checks := Run(context.Background(), Config{DataDir: "/data", ModelDir: t.TempDir()})
	c := byName(checks)
	expect(t, c["macos"], Fail, "macOS 14.6; Lily needs macOS 15", "Software Update")
	expect(t, c["memory"], Fail, "16.0 GB (hw.memsize); the model needs at least 24.0 GB", "24 GB or more")
	expect(t, c["disk"], Fail, "5.0 GB free at /data; the model needs 19.4 GB", "free up 14.4 GB")
	expect(t, c["gpu"], Pass, "Apple M1 (GPU family Apple7)", "")
	expect(t, c["gpu-memory"], Fail, "GPU working set 10.7 GB (Metal recommendedMaxWorkingSetSize) < 20.9 GB needed", "too little memory")
	expect(t, c["model"], Warn, "was not pulled by lily", "")
	if Failed(checks) != 4 {
		t.Fatalf("%d failures, want 4", Failed(checks))
	}
}

func TestGPUWorkingSet(t *testing.T) {
	for _, tc := range []struct {
		name   string
		f      facts
		gpu    *GPUInfo
		status Status
		detail string
		fix    string
	}{
		{"24 GB default limit", mac(24, "15.0"), &GPUInfo{Name: "Apple M3", Family: "Apple9", RecommendedMaxWorkingSet: 16 << 30, Available: true},
			Fail, "17.2 GB (Metal recommendedMaxWorkingSetSize) < 20.9 GB needed (model 19.4 GB + runtime 1.5 GB)", "sudo sysctl iogpu.wired_limit_mb=20480"},
		{"64 GB", mac(64, "26.0"), &GPUInfo{Name: "Apple M4 Max", Family: "Apple9", RecommendedMaxWorkingSet: 48 << 30, Available: true},
			Pass, "51.5 GB (Metal recommendedMaxWorkingSetSize) ≥ 20.9 GB needed", ""},
		{"limit raised, no probe", func() facts { f := mac(24, "15.5"); f.WiredLimitMB = 21504; return f }(), nil,
			Pass, "(iogpu.wired_limit_mb) ≥ 20.9 GB", ""},
		{"limit set too low, no probe", func() facts { f := mac(24, "15.5"); f.WiredLimitMB = 16384; return f }(), nil,
			Fail, "(iogpu.wired_limit_mb) < 20.9 GB", "iogpu.wired_limit_mb=20480"},
		{"64 GB, no probe", mac(64, "15.5"), nil, Warn, "not measured (Metal probe not built yet)", ""},
		{"no GPU", mac(32, "15.5"), &GPUInfo{Available: false, Reason: "MTLCreateSystemDefaultDevice returned nil"}, Skip, "no Metal GPU", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake(t, tc.f, 1e12, tc.gpu)
			c := byName(Run(context.Background(), Config{DataDir: "/", ModelDir: t.TempDir()}))
			expect(t, c["gpu-memory"], tc.status, tc.detail, tc.fix)
			if tc.gpu != nil && !tc.gpu.Available {
				expect(t, c["gpu"], Fail, "MTLCreateSystemDefaultDevice returned nil", "Apple silicon")
			}
		})
	}
}

// TestContextCheck: the doctor says how much context the GPU's working set leaves beside the
// weights, and how to get more.
func TestContextCheck(t *testing.T) {
	ctx := func(ws, _ int64) (int, string, error) {
		switch {
		case ws >= 40<<30:
			return 262144, "", nil
		case ws >= 20<<30:
			return 136266, "136266 of the model's 262144 positions fit", nil
		}
		return 0, "", errors.New("the weights do not fit")
	}
	for _, tc := range []struct {
		ws     uint64
		status Status
		detail string
	}{{48 << 30, Pass, "full 262144 positions"}, {21 << 30, Warn, "holds 136266 positions: 136266 of the model's"}, {16 << 30, Fail, "do not fit"}} {
		fake(t, mac(64, "26.0"), 1e12, &GPUInfo{Name: "Apple M4", Family: "Apple9", RecommendedMaxWorkingSet: tc.ws, Available: true})
		c := byName(Run(context.Background(), Config{DataDir: "/", ModelDir: t.TempDir(), Context: ctx}))
		expect(t, c["context"], tc.status, tc.detail, "")
	}
	fake(t, facts{OS: "linux", MemBytes: 23 << 30}, 1e12, nil)
	expect(t, byName(Run(context.Background(), Config{DataDir: "/", ModelDir: t.TempDir(), Context: ctx}))["context"], Skip, "not macOS", "")
}

// TestContextCheckRaise: on a Mac whose working set cannot hold the weights and a useful
// context, the fix is the exact sysctl for that Mac's memory, what it leaves macOS, that it lasts
// until a restart, and the context it gives; where raising gives nothing more, no sysctl.
func TestContextCheckRaise(t *testing.T) {
	// A model of 18 GiB of weights and 16 KiB per position, full at 262,144 positions; the
	// memory argument must be the Mac's.
	var gotMem []int64
	ctx := func(ws, mem int64) (int, string, error) {
		gotMem = append(gotMem, mem)
		n := int(min((ws-18<<30)/(16<<10), 262144))
		switch {
		case n <= 0:
			return 0, "", errors.New("the weights do not fit")
		case n < 262144:
			return n, "raise iogpu.wired_limit_mb", nil
		}
		return n, "", nil
	}
	for _, tc := range []struct {
		name       string
		mem, ws    uint64
		status     Status
		detail     string
		fix        string
		noFixParts []string
	}{
		{"24 GB default", 24 << 30, 16 << 30, Fail, "do not fit",
			"sudo sysctl iogpu.wired_limit_mb=20480 lets the GPU use up to 20 GB of this Mac's 24 GB and leaves macOS 4 GB; it lasts until the Mac restarts (run it again after each restart); lily serve then holds 131072 positions", nil},
		{"24 GB raised a little", 24 << 30, 18<<30 + 512<<20, Warn, "holds only 32768 positions, less than the 65536",
			"sudo sysctl iogpu.wired_limit_mb=20480", nil},
		{"24 GB raised as suggested", 24 << 30, 20 << 30, Warn, "holds 131072 positions: raise", "pass --ctx", []string{"sysctl"}},
		{"32 GB default", 32 << 30, 21845 << 20, Warn, "holds 218432 positions",
			"sudo sysctl iogpu.wired_limit_mb=28672 lets the GPU use up to 28 GB of this Mac's 32 GB and leaves macOS 4 GB; it lasts until the Mac restarts (run it again after each restart); lily serve then holds 262144 positions", nil},
		{"64 GB", 64 << 30, 48 << 30, Pass, "full 262144", "", []string{"sysctl"}},
		{"16 GB", 16 << 30, 10 << 30, Fail, "do not fit", "use a Mac with more memory", []string{"sysctl"}},
	} {
		gotMem = nil
		c := ContextCheck(tc.mem, tc.ws, ctx)
		expect(t, c, tc.status, tc.detail, tc.fix)
		for _, p := range tc.noFixParts {
			if strings.Contains(c.Fix, p) {
				t.Errorf("%s: fix %q mentions %q", tc.name, c.Fix, p)
			}
		}
		for _, m := range gotMem {
			if m != int64(tc.mem) {
				t.Errorf("%s: context sized for %d bytes of memory, want %d", tc.name, m, tc.mem)
			}
		}
	}
}

func TestLinuxSkipsMacChecks(t *testing.T) {
	fake(t, facts{OS: "linux", MemBytes: 23 << 30, MemSource: "sysinfo"}, 1e12, &GPUInfo{Available: true})
	c := byName(Run(context.Background(), Config{DataDir: "/", ModelDir: t.TempDir()}))
	for _, name := range []string{"macos", "chip", "gpu", "gpu-memory"} {
		expect(t, c[name], Skip, "not macOS", "")
	}
	expect(t, c["memory"], Pass, "23.0 GB (sysinfo)", "") // within the slack for kernel reservations

	// The real probe of the machine running the tests.
	probe = probeSystem
	real := byName(Run(context.Background(), Config{DataDir: t.TempDir(), ModelDir: t.TempDir()}))
	if runtime.GOOS == "linux" && (real["macos"].Status != Skip || real["memory"].Status == Skip) {
		t.Fatalf("linux probe: %+v", real)
	}
}

func TestModelStates(t *testing.T) {
	fake(t, mac(32, "15.5"), 1e12, nil)
	dir := pulledDir(t)
	cfg := Config{DataDir: "/", ModelDir: dir, Repo: "org/tiny", Revision: "abc"}
	c := byName(Run(context.Background(), cfg))
	expect(t, c["model"], Pass, "org/tiny@abc, 1 files, 10 B at "+dir, "")
	expect(t, c["disk"], Pass, "1.0 TB free", "")
	expect(t, c["gpu-memory"], Warn, "1.5 GB needed (model 10 B + runtime 1.5 GB)", "") // sized from the marker

	cfg.Revision = "def"
	expect(t, byName(Run(context.Background(), cfg))["model"], Warn, "not the pinned org/tiny@def", "lily pull")

	os.Truncate(filepath.Join(dir, "a.bin"), 3)
	expect(t, byName(Run(context.Background(), cfg))["model"], Fail, "damaged", "lily pull")

	partial := t.TempDir()
	os.WriteFile(filepath.Join(partial, hub.LockName), nil, 0o644)
	cfg.ModelDir = partial
	expect(t, byName(Run(context.Background(), cfg))["model"], Warn, "has not finished", "resume")
}

func TestStep(t *testing.T) {
	fake(t, mac(16, "15.5"), 1e12, nil)
	s := lifecycle.NewState(&strings.Builder{})
	err := Step(Config{DataDir: "/", ModelDir: t.TempDir()}).Run(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "memory: 16.0 GB") || !strings.Contains(err.Error(), "fix: use a Mac") {
		t.Fatalf("err = %v", err)
	}
	fake(t, mac(36, "15.5"), 1e12, nil)
	if err := Step(Config{DataDir: "/", ModelDir: t.TempDir()}).Run(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if d := s.Status().Detail; !strings.Contains(d, "warnings: model, gpu, gpu-memory") {
		t.Fatalf("detail %q", d)
	}
}

// TestDiskCountsWhatIsLeft: the disk check wants room for what is left to download, not the whole
// model: an interrupted pull (a file in place, a .part whose sidecar records 400 bytes) needs
// less. The machine is a Config.Machine, not probed.
func TestDiskCountsWhatIsLeft(t *testing.T) {
	big := &Machine{System: mac(64, "15.5"), FreeBytes: 600}
	cfg := Config{DataDir: "/data", ModelDir: filepath.Join(t.TempDir(), "model"), ModelBytes: 1000, Machine: big}
	expect(t, byName(Run(context.Background(), cfg))["disk"], Fail, "600 B free at /data; the model needs 1.0 kB", "free up 400 B")

	os.MkdirAll(cfg.ModelDir, 0o755)
	os.WriteFile(filepath.Join(cfg.ModelDir, "config.json"), make([]byte, 100), 0o644)
	os.WriteFile(filepath.Join(cfg.ModelDir, hub.LockName), make([]byte, 50), 0o644) // Lily's own: not counted
	part := filepath.Join(cfg.ModelDir, "model.safetensors"+hub.PartSuffix)
	os.WriteFile(part, make([]byte, 500), 0o644)
	side := func(done string) {
		os.WriteFile(filepath.Join(cfg.ModelDir, "model.safetensors"+hub.SideSuffix),
			[]byte(`{"size":700,"hash":"ab","chunk_size":256,"done":`+done+`}`), 0o644)
	}
	side("[256,144,0]")
	if got := hub.OnDisk(cfg.ModelDir); got != 500 {
		t.Fatalf("OnDisk = %d, want 100 in place + 400 in the .part", got)
	}
	expect(t, byName(Run(context.Background(), cfg))["disk"], Pass, "600 B free at /data (the rest of the download needs 500 B (500 B of 1.0 kB already downloaded))", "")

	// A sidecar that claims bytes past the end of its .part is not trusted: the file starts afresh.
	side("[256,256,188]")
	expect(t, byName(Run(context.Background(), cfg))["disk"], Fail, "the rest of the download needs 900 B", "free up 300 B")
}

// TestPreflightStep: the checks before the pull refuse a Mac too small for the model, but leave
// the model's files to the checks after the pull: a damaged directory is what the pull repairs.
func TestPreflightStep(t *testing.T) {
	gpu := &GPUInfo{Name: "Apple M4", Family: "Apple9", RecommendedMaxWorkingSet: 48 << 30, Available: true}
	damaged := func() string { // a fresh one each time: finding the damage removes the marker
		dir := pulledDir(t)
		os.Truncate(filepath.Join(dir, "a.bin"), 3)
		return dir
	}
	cfg := Config{DataDir: "/", ModelDir: damaged(), Repo: "org/tiny", Revision: "abc",
		Machine: &Machine{System: mac(16, "15.5"), GPU: &GPUInfo{Name: "Apple M1", Family: "Apple7", RecommendedMaxWorkingSet: 10 << 30, Available: true}, FreeBytes: 1e12}}
	s := lifecycle.NewState(&strings.Builder{})
	err := PreflightStep(cfg).Run(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "memory: 16.0 GB") || !strings.Contains(err.Error(), "fix: use a Mac with 24 GB") {
		t.Fatalf("16 GB Mac: %v", err)
	}
	cfg.Machine = &Machine{System: mac(64, "15.5"), GPU: gpu, FreeBytes: 1e12}
	if err := PreflightStep(cfg).Run(context.Background(), s); err != nil {
		t.Fatalf("64 GB Mac, damaged model before the pull: %v", err)
	}
	if d := s.Status().Detail; d != "all passed" {
		t.Fatalf("detail %q", d)
	}
	cfg.ModelDir = damaged()
	if err := Step(cfg).Run(context.Background(), s); err == nil || !strings.Contains(err.Error(), "model: damaged") {
		t.Fatalf("checks after the pull on a damaged model: %v", err)
	}
	// The GPU's working set is judged against the model's expected size before its files exist.
	cfg.ModelDir = t.TempDir()
	cfg.Machine = &Machine{System: mac(24, "15.5"), GPU: &GPUInfo{Name: "Apple M4", Family: "Apple9", RecommendedMaxWorkingSet: 16 << 30, Available: true}, FreeBytes: 1e12}
	if err := PreflightStep(cfg).Run(context.Background(), s); err == nil || !strings.Contains(err.Error(), "gpu-memory: GPU working set 17.2 GB") || !strings.Contains(err.Error(), "sudo sysctl iogpu.wired_limit_mb=20480") {
		t.Fatalf("24 GB Mac at the default GPU limit: %v", err)
	}
}
