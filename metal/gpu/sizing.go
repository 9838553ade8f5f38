package gpu

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/vision"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/mtl"
	"github.com/lilyformac/lily/metal/plan"
	"github.com/lilyformac/lily/metal/vit"
)

// Sizing is what the GPU backend holds for a model in a device's memory: every number NewGPU
// builds its plan with, each limit with why. lily serve, lily doctor (and through its JSON the
// menu-bar app) and bench --plan read it from Size, so they cannot disagree.
type Sizing struct {
	Memory decode.Memory // the plan's device memory: weights, KV per position, state, scratch
	// Chunks are the batched prefill's chunk sizes, largest first (none: token by token).
	Chunks []int
	// Context is the positions a session holds; ContextWhy why it is below the model's ("": it
	// is not).
	Context    int
	ContextWhy string
	// Parallel is how many sequences the KV pool holds at once; ParallelWhy why that many.
	Parallel    int
	ParallelWhy string
	Pages       int // the KV pool's pages (poolPages)
	// Slice is the prompt tokens the engine loop runs per step on this chip (SliceFor).
	Slice int
	// Route is the prefill chunks' route (decode.Options.PrefillRoute); RouteWhy why.
	Route    plan.Route
	RouteWhy string
	// Vision is the vision tower's device memory (zero where the model has none loaded), set
	// aside from the working set before everything else is sized; VisionBytes its total.
	Vision vit.Memory
}

// VisionBytes is the device memory the vision tower holds: its weights, one set of the largest
// grid's activations, and each kept executor's tables (vision.go).
func (s Sizing) VisionBytes() int64 { return s.Vision.Total(towerCacheSize) }

// Chunk is the largest prefill chunk (0: prompts run token by token).
func (s Sizing) Chunk() int { return slices.Max(append([]int{0}, s.Chunks...)) }

// Device is what sizing reads of the device a backend runs on: its name ("emu": the MSL emulator,
// which runs either prefill route), its chip in plan.Chips (nil: unknown; the slice is then not
// timed), and whether the tensor prefill route can run there. The zero Device is a GPU not known,
// on which the tensor route is not taken.
type Device struct {
	Name    string
	Chip    *plan.Chip
	known   bool   // made by MacDevice or deviceOf
	blocked string // why the tensor route cannot run there ("": it can)
	can     string // where it can, what runs it
}

// MacDevice is a Mac's GPU as lily doctor probes it: its name ("Apple M5 Max"), highest Apple GPU
// family (0: none) and macOS version ("26.2", "26.2 (25C56)"; "": unknown), with the tensor route
// judged as mtl.TensorOps judges it (ChoosePrefillRoute).
func MacDevice(name string, family mtl.Family, macOS string) Device {
	return macDevice(name, family, macOS, len(decode.TensorKernels()) > 0)
}

// macDevice is MacDevice with whether the build has tensor-op kernels given.
func macDevice(name string, family mtl.Family, macOS string, kernels bool) Device {
	if name == "emu" {
		return emuDevice(kernels)
	}
	d := Device{Name: name, known: true, blocked: tensorBlocker(name, family, macOS, kernels)}
	if c, ok := plan.ChipNamed(name); ok {
		d.Chip = &c
	}
	if d.blocked == "" {
		d.can = fmt.Sprintf("%s on macOS %s: the neural accelerators, through Metal 4 tensor ops", gpuName(name, family), macOS)
	}
	return d
}

// emuDevice is the emulator, with whether the build has tensor-op kernels given.
func emuDevice(kernels bool) Device {
	d := Device{Name: "emu", known: true}
	if !kernels {
		d.blocked = noTensorKernels
	}
	return d
}

// deviceOf is the device a GPU backend runs on: the emulator, or a Metal device (named, for its
// chip; "": unknown) judged by whether it compiled the tensor-op kernels (exec.TensorOps, the
// same gate as mtl.TensorOps).
func deviceOf(name string, dev exec.Device, metalName string) Device {
	kernels := len(decode.TensorKernels()) > 0
	if name == "emu" {
		return emuDevice(kernels)
	}
	d := Device{Name: cmp.Or(metalName, name), known: true}
	if c, ok := plan.ChipNamed(metalName); ok {
		d.Chip = &c
	}
	switch ok, why := exec.TensorOps(dev); {
	case !ok:
		d.blocked = why
	case !kernels:
		d.blocked = noTensorKernels
	default:
		d.can = why
	}
	return d
}

// route is the prefill route on d with forced (a --prefill-route value) applied, and why.
func (d Device) route(forced RouteChoice) (plan.Route, string, error) {
	switch {
	case d.Name == "emu":
		return emuRoute(forced, d.blocked)
	case !d.known:
		return decideRoute(forced, "no GPU known", "")
	}
	return decideRoute(forced, d.blocked, d.can)
}

// Size is the one place that sizes the GPU backend for c on d from o: the vision tower's memory
// (towerMemory) set aside from the working set first, then the prefill chunks (o's, or by memory
// with AutoChunks), the context (servedContext), the sequences at once (o.Parallel, else as many
// as fit), the KV pool's pages (poolPages), the prefill route (o.PrefillRoute on d) and slice
// (SliceFor on d's chip). It fails where not one session fits (the Sizing then holds the memory,
// chunks and tower), or where o.Parallel sequences do not.
func Size(c *config.Config, o GPUOptions, d Device) (Sizing, error) {
	tower, err := towerMemory(c, o.ImagePixels)
	if err != nil {
		return Sizing{}, err
	}
	s := Sizing{Vision: tower}
	if o.WorkingSet > 0 { // at least a byte: 0 would mean no limit
		o.WorkingSet = max(o.WorkingSet-s.VisionBytes(), 1)
	}
	mem, chunks, err := memoryFor(c, o)
	if err != nil {
		return Sizing{}, err
	}
	o.Chunks = decode.ChunkSizes(chunks)
	s.Memory, s.Chunks = mem, o.Chunks
	if s.Context, s.ContextWhy, err = servedContext(mem, c, o); err != nil {
		return Sizing{Memory: mem, Chunks: o.Chunks, Vision: tower}, towerNote(err, s)
	}
	if s.ContextWhy != "" && s.VisionBytes() > 0 {
		s.ContextWhy += fmt.Sprintf("; the vision tower's %s is set aside first (--vision off leaves it to the context)", gibOf(s.VisionBytes()))
	}
	if err := checkParallel(mem, s.Context, o); err != nil {
		return Sizing{}, err
	}
	s.Parallel, s.ParallelWhy = parallelFor(mem, s.Context, o)
	o.Parallel = s.Parallel
	s.Pages = poolPages(mem, s.Context, o)
	if s.Route, s.RouteWhy, err = d.route(o.PrefillRoute); err != nil {
		return Sizing{}, err
	}
	s.Slice = SliceFor(c, s.Chunks, o.KVBits, d.Chip, s.Route)
	return s, nil
}

// servedContext is the positions a session holds: o.MaxCtx, or as many as the working set holds
// (decode.Memory.Context), less what makes room for several sequences at once when o.Parallel is
// also left to memory (decode.Memory.RoomForParallel); why says why it is below the model's.
func servedContext(mem decode.Memory, c *config.Config, o GPUOptions) (int, string, error) {
	ctx, why, err := mem.Context(c, o.MaxCtx, o.WorkingSet)
	if err != nil || o.MaxCtx > 0 || o.Parallel != 0 {
		return ctx, why, err
	}
	got, room := mem.RoomForParallel(ctx, o.WorkingSet)
	if room != "" {
		why = strings.TrimPrefix(why+"; "+room, "; ")
	}
	return got, why, nil
}

// poolPages sizes the KV pool: the pages of o.Parallel sequences (decode.SessionsPages; one: a
// session's pages and a spare, which decode.Memory.Fit keeps room for), then as many more as the
// prefix cache's budget holds and the working set leaves room for beside their states, so that
// cached prefixes keep their pages rather than spill them to host memory. With no working set
// known (the emulator) there is no limit, and at least four sessions' worth (tests keep forks of
// a session alive), and at least o.Parallel's.
func poolPages(mem decode.Memory, maxCtx int, o GPUOptions) int {
	if o.Pages > 0 {
		return o.Pages
	}
	ps := cmp.Or(o.PageSize, min(decode.DefaultPageSize, (maxCtx+15)/16*16))
	n := max(o.Parallel, 1)
	sessions := decode.SessionsPages(maxCtx, n, ps)
	extra := int(o.CacheBytes / (int64(ps) * max(mem.KVPerPosition, 1)))
	if o.WorkingSet == 0 {
		session := decode.SessionsPages(maxCtx, 1, ps)
		return max(max(4, n)*(session-1)+1, sessions+extra)
	}
	return sessions + max(0, min(extra, mem.PagesBeside(o.WorkingSet, ps, n)-sessions))
}

// parallelFor is o.Parallel, or when 0 as many sequences as fit beside the weights (at least
// one; with no working set known, the emulator, decode.DefaultParallel), and why.
func parallelFor(mem decode.Memory, maxCtx int, o GPUOptions) (int, string) {
	switch {
	case o.Parallel != 0:
		return o.Parallel, "asked for (--parallel)"
	case o.WorkingSet == 0:
		return decode.DefaultParallel, "no GPU working-set limit known: the default"
	}
	n, why := mem.Parallel(maxCtx, o.WorkingSet)
	return max(n, 1), why
}

// checkParallel fails when o.Parallel sequences do not fit in the working set at maxCtx, rather
// than leave the device to fail the pool's allocation.
func checkParallel(mem decode.Memory, maxCtx int, o GPUOptions) error {
	if o.Parallel < 0 {
		return fmt.Errorf("gpu: %d parallel sequences: want 0 or more", o.Parallel)
	}
	if o.Parallel <= 1 || o.WorkingSet == 0 {
		return nil
	}
	if fit, why := mem.Parallel(maxCtx, o.WorkingSet); o.Parallel > fit {
		return fmt.Errorf("gpu: %d parallel sequences of %d positions do not fit: %d do (%s)", o.Parallel, maxCtx, fit, why)
	}
	return nil
}

// towerMemory is the vision tower's device memory for images of up to pixels resized pixels
// (0: vision.ServedMaxPixels) where c has a tower (vit.MemoryOf); none where it has not, or where
// metal/vit cannot run it (EncodeImage then fails, and nothing is allocated for it).
func towerMemory(c *config.Config, pixels int) (vit.Memory, error) {
	v := c.Vision
	if pixels <= 0 {
		pixels = vision.ServedMaxPixels
	}
	if v == nil || vit.Check(v, v.Merge, v.Merge) != nil || vit.MaxPatches(v, pixels) == 0 {
		return vit.Memory{}, nil
	}
	return vit.MemoryOf(v, pixels)
}

// towerNote adds to a sizing failure that the vision tower took part of the working set.
func towerNote(err error, s Sizing) error {
	if s.VisionBytes() == 0 {
		return err
	}
	return fmt.Errorf("%w (after the vision tower's %s: lily serve --vision off leaves it to the model)", err, gibOf(s.VisionBytes()))
}

// gibOf formats bytes in GiB, as the sizing messages do.
func gibOf(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }
