//go:build linux

package emu

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/lilyformac/lily/metal/emu/gen"
)

// genVersion changes whenever the generator's output or the build recipe changes in a way the
// hashed inputs would not show.
const genVersion = "emu-2"

// minClang is the oldest clang with _Float16 and __bf16 arithmetic on x86-64.
const minClang = 17

type toolchain struct {
	cxx     string // clang++ to run
	version string // its --version output, part of every cache key
	rtlib   string // compiler-rt builtins archive (bf16 conversions at -O0)
	llvmBin string // directory with llvm-symbolizer, or ""
}

var (
	toolMu    sync.Mutex
	toolCache = map[string]*toolchain{}
)

// candidates are the clang++ names tried when Options.Clang and $LILY_CLANG are empty.
var candidates = []string{"clang++-22", "clang++-21", "clang++-20", "clang++-19", "clang++-18", "clang++-17", "clang++"}

var reClangVersion = regexp.MustCompile(`clang version (\d+)\.`)

// ErrNoClang is returned (wrapped) by Compile when no usable clang is installed.
var ErrNoClang = errors.New("emu: no clang++ >= 17 found (Debian 12: apt-get install -y clang-19)")

func findToolchain(want string) (*toolchain, error) {
	if want == "" {
		want = os.Getenv("LILY_CLANG")
	}
	toolMu.Lock()
	defer toolMu.Unlock()
	if tc := toolCache[want]; tc != nil {
		return tc, nil
	}
	names := candidates
	if want != "" {
		names = []string{want}
	}
	var tried []string
	for _, name := range names {
		path, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		out, err := exec.Command(path, "--version").Output()
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", path, err))
			continue
		}
		m := reClangVersion.FindSubmatch(out)
		if m == nil {
			tried = append(tried, path+": not clang")
			continue
		}
		if v, _ := strconv.Atoi(string(m[1])); v < minClang {
			tried = append(tried, fmt.Sprintf("%s: clang %d", path, v))
			continue
		}
		tc := &toolchain{cxx: path, version: string(out)}
		if rt, err := exec.Command(path, "-rtlib=compiler-rt", "-print-libgcc-file-name").Output(); err == nil {
			if p := strings.TrimSpace(string(rt)); fileExists(p) {
				tc.rtlib = p
			}
		}
		if real, err := filepath.EvalSymlinks(path); err == nil && fileExists(filepath.Join(filepath.Dir(real), "llvm-symbolizer")) {
			tc.llvmBin = filepath.Dir(real)
		}
		toolCache[want] = tc
		return tc, nil
	}
	if len(tried) > 0 {
		return nil, fmt.Errorf("%w (found: %s)", ErrNoClang, strings.Join(tried, "; "))
	}
	return nil, ErrNoClang
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func hashOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))[:24]
}

func cacheRoot(opt string) (string, error) {
	if opt == "" {
		opt = os.Getenv("LILY_EMU_CACHE")
	}
	if opt == "" {
		base, err := os.UserCacheDir()
		if err != nil || base == "" {
			base = os.TempDir()
		}
		opt = filepath.Join(base, "lily", "metal-emu")
		if os.MkdirAll(opt, 0o755) != nil {
			opt = filepath.Join(os.TempDir(), "lily-metal-emu")
		}
	}
	return opt, os.MkdirAll(opt, 0o755)
}

// writeAtomic writes data to path through a temporary file and a rename, so concurrent builds
// (go test runs packages in parallel) never see a partial file.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(f.Name(), mode)
	}
	if werr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		os.Remove(f.Name())
	}
	return werr
}

// tempOut returns a temporary path next to path for a tool to write, to be renamed into place.
func tempOut(path string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*"+filepath.Ext(path))
	if err != nil {
		return "", err
	}
	f.Close()
	return f.Name(), nil
}

type buildPlan struct {
	tc      *toolchain
	root    string
	mode    string   // "so" (in process) or "exe" (helper process)
	cflags  []string // for every translation unit
	include string   // directory holding the runtime sources, shims and user headers
	units   []*gen.Unit
}

// build translates and compiles srcs and returns the path of the shared library or helper
// executable, reusing everything already in the cache.
func build(srcs []Source, opts Options) (string, *buildPlan, error) {
	tc, err := findToolchain(opts.Clang)
	if err != nil {
		return "", nil, err
	}
	root, err := cacheRoot(opts.CacheDir)
	if err != nil {
		return "", nil, fmt.Errorf("emu: cache directory: %w", err)
	}
	p := &buildPlan{tc: tc, root: root, mode: "so"}
	if opts.ASan || opts.Isolate {
		p.mode = "exe"
	}
	// -fdebug-compilation-dir keeps reports naming files as the sources were named (the #line
	// names), whichever directory compiled the cached object.
	// C++23 (c++2b, which clang 17 knows) for tensor ops: a descriptor struct as a template
	// argument (C++20) and multidimensional subscripts t[x, y] (C++23).
	p.cflags = []string{"-std=c++2b", "-fexcess-precision=16", "-fno-exceptions", "-fvisibility=hidden", "-fdebug-compilation-dir=."}
	switch {
	case opts.ASan:
		p.cflags = append(p.cflags, "-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address", "-DMSL_EMU_FLAT_ADDRESS_SPACES")
	case opts.Debug:
		p.cflags = append(p.cflags, "-O0", "-g")
	default:
		p.cflags = append(p.cflags, "-O2")
	}
	if p.mode == "so" {
		p.cflags = append(p.cflags, "-fPIC")
	}

	// The include directory: runtime files plus the user's headers, content-addressed.
	files := map[string]string{}
	err = fs.WalkDir(runtimeFS, "runtime", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := runtimeFS.ReadFile(path)
		files[strings.TrimPrefix(path, "runtime/")] = string(b)
		return err
	})
	if err != nil {
		return "", nil, err
	}
	var metal []Source
	for _, s := range srcs {
		if strings.HasSuffix(s.Name, ".h") {
			files[s.Name] = s.Code
			continue
		}
		metal = append(metal, s)
	}
	if len(metal) == 0 {
		return "", nil, errors.New("emu: Compile: no .metal sources")
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, n, files[n])
	}
	incHash := hashOf(append([]string{genVersion}, parts...)...)
	p.include = filepath.Join(root, "inc-"+incHash)
	// .complete is written last: a concurrent build (go test runs packages in parallel) either
	// sees every file or writes them again, atomically.
	if !fileExists(filepath.Join(p.include, ".complete")) {
		for _, n := range append(names, ".complete") {
			if err := writeAtomic(filepath.Join(p.include, n), []byte(files[n]), 0o644); err != nil {
				return "", nil, err
			}
		}
	}

	for _, s := range metal {
		u, err := gen.Translate(s.Name, s.Code)
		if err != nil {
			return "", nil, err
		}
		p.units = append(p.units, u)
	}

	// Objects: the runtime, the helper main and one per .metal file, compiled in parallel.
	type job struct{ name, src, obj string }
	common := strings.Join(p.cflags, " ") + "|" + tc.version + "|" + incHash
	var jobs []job
	addJob := func(name, src string) {
		jobs = append(jobs, job{name, src, filepath.Join(root, "obj", hashOf(genVersion, common, name, src)+".o")})
	}
	addJob("runtime.cc", files["runtime.cc"])
	if p.mode == "exe" {
		addJob("runner.cc", files["runner.cc"])
	}
	for _, u := range p.units {
		addJob(u.Name, u.CPP)
	}
	errs := make([]error, len(jobs))
	sem := make(chan struct{}, max(runtime.GOMAXPROCS(0), 1))
	var wg sync.WaitGroup
	for i, j := range jobs {
		if fileExists(j.obj) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = p.compile(j.name, j.src, j.obj)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return "", nil, err
	}

	var objs, keys []string
	for _, j := range jobs {
		objs = append(objs, j.obj)
		keys = append(keys, filepath.Base(j.obj))
	}
	ext := ".so"
	if p.mode == "exe" {
		ext = ".exe"
	}
	out := filepath.Join(root, "lib", hashOf(append([]string{genVersion, p.mode, common, tc.rtlib}, keys...)...)+ext)
	if fileExists(out) {
		return out, p, nil
	}
	return out, p, p.link(objs, out)
}

func (p *buildPlan) compile(name, src, obj string) error {
	tmpSrc, err := tempOut(obj + ".cc")
	if err != nil {
		return err
	}
	defer os.Remove(tmpSrc)
	if err := os.WriteFile(tmpSrc, []byte(src), 0o644); err != nil {
		return err
	}
	tmpObj, err := tempOut(obj)
	if err != nil {
		return err
	}
	args := append([]string{}, p.cflags...)
	args = append(args, "-I", p.include, "-I", filepath.Join(p.include, "include"), "-c", tmpSrc, "-o", tmpObj)
	if err := p.run(args); err != nil {
		os.Remove(tmpObj)
		return fmt.Errorf("emu: compiling %s: %w", name, err)
	}
	return os.Rename(tmpObj, obj)
}

func (p *buildPlan) link(objs []string, out string) error {
	tmp, err := tempOut(out)
	if err != nil {
		return err
	}
	args := []string{}
	if p.mode == "so" {
		args = append(args, "-shared", "-Wl,-z,now")
	}
	for _, f := range p.cflags {
		if strings.HasPrefix(f, "-fsanitize") {
			args = append(args, f)
		}
	}
	args = append(args, "-o", tmp)
	args = append(args, objs...)
	if p.tc.rtlib != "" {
		args = append(args, p.tc.rtlib)
	}
	args = append(args, "-lpthread")
	if err := p.run(args); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("emu: linking: %w", err)
	}
	return os.Rename(tmp, out)
}

func (p *buildPlan) run(args []string) error {
	cmd := exec.Command(p.tc.cxx, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 8000 {
			msg = msg[:8000] + "\n..."
		}
		return fmt.Errorf("%v\n%s", err, msg)
	}
	return nil
}
