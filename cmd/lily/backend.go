package main

import (
	"cmp"
	"fmt"
	"log"
	"runtime"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/cpu"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/internal/wiredlimit"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/gpu"
)

// backends are the executors `--backend` can name: the Go reference, the Metal kernels on the MSL
// emulator (Linux), and the Metal kernels on the GPU (macOS).
var backends = []string{"cpu", "emu", "metal"}

const backendHelp = "executor: cpu (Go reference), emu (the Metal kernels on the MSL emulator, Linux) or metal (the GPU, macOS; the default there)"

// defaultBackend is metal on macOS, the Go reference elsewhere.
func defaultBackend() string {
	if runtime.GOOS == "darwin" {
		return "metal"
	}
	return "cpu"
}

// backendOptions size a backend's sessions: ctx positions (0: the model's, or on a GPU as many as
// its memory holds; on the emulator emuMemory bytes stand for Metal's working set, 0: no limit),
// the GPU backends' KV cache format (kvBits 16 or 8; 0: 16), and the prefix cache's budget
// (cacheBytes), which the GPU's KV pool holds pages for where its memory allows.
type backendOptions struct {
	ctx          int
	emuMemory    int64
	kvBits       int
	cacheBytes   int64
	prefillChunk int             // prompt tokens per batched prefill step; -1: the backend's default
	chunkLogits  bool            // the batched prefill computes every row's logits too (prompt logits)
	parallel     int             // sequences generating at once (0: by memory)
	prefillRoute gpu.RouteChoice // --prefill-route (the zero value: auto, by device)
	vision       string          // --vision: on, off, or auto ("": auto; visionOff)
	imagePixels  int             // --image-max-pixels, which the GPU sizes the tower for (0: the default)
}

// gpuOptions are the GPU backend name's options (emu: with emuMemory as its working set; metal:
// the device's, which NewMetal reads).
func (o backendOptions) gpuOptions(name string) gpu.GPUOptions {
	chunks, auto := chunkOptions(name, o.prefillChunk)
	g := gpu.GPUOptions{MaxCtx: o.ctx, KVBits: o.kvBits, CacheBytes: o.cacheBytes, Chunks: chunks, AutoChunks: auto, ChunkLogits: o.chunkLogits,
		Parallel: o.parallel, PrefillRoute: o.prefillRoute, ImagePixels: o.imagePixels}
	if name == "emu" {
		g.WorkingSet = o.emuMemory
	}
	return g
}

// visionOff is why backend name leaves the vision tower of the checkpoint config cfg out (""
// loads it): --vision off says so; on loads it; auto (or "") loads it except on metal where
// gpu.AutoVision leaves it out on a Mac of memory bytes (hw.memsize), sized with o's options.
func visionOff(name string, o backendOptions, cfg *config.Config, memory int64) string {
	switch {
	case o.vision == "off":
		return "vision is off (--vision off)"
	case o.vision == "on" || name != "metal" || cfg == nil || cfg.Vision == nil:
		return ""
	}
	_, why := gpu.AutoVision(cfg, o.gpuOptions(name), memory)
	return why
}

// maxParallel is the most sequences the engine loop runs at once (the GPU's multi-row step is
// planned for up to decode.MaxParallel rows).
const maxParallel = decode.MaxParallel

var parallelHelp = fmt.Sprintf("requests generating at once, up to %d; each keeps receiving tokens while others prefill (0: by memory: on the GPU backends as many as fit beside the weights at a useful context, %d on cpu)", maxParallel, decode.DefaultParallel)

// parallelOf is how many sequences the engine loop runs at once on b: asked, else what b sized
// itself for (a GPU backend's KV pool), else decode.DefaultParallel.
func parallelOf(b backend.Backend, asked int) int {
	return cmp.Or(asked, b.Describe().Parallel, decode.DefaultParallel)
}

const prefillChunkHelp = "the largest number of prompt tokens a batched prefill step takes on the GPU backends, then chunks of 512, 64 and 8 for what is left, and a remainder below that token by token (0: token by token; default on metal 4096 where its 1.2 GB of activations cost no context, else 512; 0 on emu, where the emulated matrix kernels are slower than the token loop)"

// chunkOptions are a backend's prefill chunk sizes for the flag's value n: -1 is the backend's
// default, on metal picked by memory (gpu.DefaultChunks), on emu none.
func chunkOptions(backend string, n int) (chunks []int, auto bool) {
	if n < 0 {
		return nil, backend == "metal"
	}
	return gpu.Buckets(n), false
}

const prefillRouteHelp = "the route the GPU backends' batched prefill takes: tensor (Metal 4 tensor ops on M5's neural accelerators, activations rounded to bfloat), simdgroup (simdgroup matrices on the shader ALUs, every Mac), or auto: tensor on an M5 with macOS 26.2 or later, else simdgroup; emu runs either, simdgroup unless forced; lily doctor says which this Mac takes and why"

// checkPrefillRoute reports a --prefill-route that forces a route on the cpu backend, which has
// none (the flag itself parses the value: gpu.RouteChoice).
func checkPrefillRoute(route gpu.RouteChoice, backend string) error {
	if route.Forced && backend == "cpu" {
		return fmt.Errorf("--prefill-route %s is for the GPU backends (metal, emu); the cpu reference has no prefill route", route)
	}
	return nil
}

// checkPrefillChunk reports a --prefill-chunk value that is not -1 (default) or >= 0.
func checkPrefillChunk(n int) error {
	if n < -1 {
		return fmt.Errorf("--prefill-chunk %d: expected 0 or more", n)
	}
	return nil
}

const kvBitsHelp = "KV cache format on the GPU backends: 16 (bfloat16) or 8 (int8 with a scale per 32 values: about half the KV memory, so about twice the context, and less traffic per token at long contexts)"

// checkKVBits reports a --kv-bits value the backend cannot use.
func checkKVBits(bits int, backend string) error {
	switch {
	case bits != 16 && bits != 8:
		return fmt.Errorf("--kv-bits %d: expected 16 or 8", bits)
	case bits == 8 && backend == "cpu":
		return fmt.Errorf("--kv-bits 8 is for the GPU backends (metal, emu); the cpu reference keeps float32 KV")
	}
	return nil
}

// visionOffIn is visionOff for the checkpoint in dir on this Mac (its config read only where
// --vision auto needs it), logged when auto leaves the tower out.
func visionOffIn(name, dir string, o backendOptions) (string, error) {
	if o.vision == "off" || o.vision == "on" || name != "metal" {
		return visionOff(name, o, nil, 0), nil
	}
	cfg, err := config.Load(dir)
	if err != nil {
		return "", err
	}
	why := visionOff(name, o, cfg, int64(wiredlimit.Memory()))
	if why != "" {
		log.Printf("lily: %s", why)
	}
	return why, nil
}

// openBackend loads the checkpoint in dir for the named backend with o's sessions. closeFn frees
// the backend's device memory, then the mapped weights.
func openBackend(name, dir string, o backendOptions) (b backend.Backend, cfg *config.Config, closeFn func(), err error) {
	if dir == "" {
		return nil, nil, nil, fmt.Errorf("--model DIR is required")
	}
	switch name {
	case "cpu":
	case "emu":
		if runtime.GOOS != "linux" {
			return nil, nil, nil, fmt.Errorf("backend emu runs the Metal kernels on the MSL emulator, which needs Linux (this is %s/%s): use --backend cpu", runtime.GOOS, runtime.GOARCH)
		}
	case "metal":
		if runtime.GOOS != "darwin" {
			return nil, nil, nil, fmt.Errorf("backend metal needs macOS on Apple silicon (this is %s/%s): use --backend cpu", runtime.GOOS, runtime.GOARCH)
		}
	default:
		return nil, nil, nil, fmt.Errorf("unknown backend %q (available: %v)", name, backends)
	}
	off, err := visionOffIn(name, dir, o)
	if err != nil {
		return nil, nil, nil, err
	}
	w, err := model.LoadWith(dir, model.Options{NoVision: off != "", NoVisionWhy: off})
	if err != nil {
		return nil, nil, nil, err
	}
	if o.ctx > 0 && w.Config.MaxPositions > 0 && o.ctx > w.Config.MaxPositions {
		w.Close()
		return nil, nil, nil, fmt.Errorf("--ctx %d exceeds the model's %d positions", o.ctx, w.Config.MaxPositions)
	}
	var g *gpu.GPU
	switch name {
	case "metal": // the same decode plan and encoder loop as emu, on the GPU (not yet run on a real Mac)
		g, err = gpu.NewMetal(w, o.gpuOptions(name))
	case "emu": // the decode plan run on the emulator
		g, err = gpu.NewEmu(w, gpu.EmuOptions{GPUOptions: o.gpuOptions(name)})
	default:
		return cpu.New(w), w.Config, func() { w.Close() }, nil
	}
	if err != nil {
		w.Close()
		return nil, nil, nil, fmt.Errorf("backend %s: %w", name, err)
	}
	return g, w.Config, func() { g.Close(); w.Close() }, nil
}
