// Package gpu is the GPU backend: metal/decode's step run on a device (Metal, or the MSL emulator
// on Linux) through metal/exec, as an engine/backend.Backend — sessions over pooled executors, a
// paged KV pool sized from the device's memory and shared by sessions and prefix-cache snapshots
// (which copy only the recurrent state), and the pipelined loop that keeps the token and the
// sampler on the GPU.
package gpu

import (
	"cmp"
	"errors"
	"fmt"
	"log"
	"slices"
	"sync"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/draft"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/internal/hostmem"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/plan"
)

// KernelFiles are the kernel sources the decode step and the vision tower (vision.go) use; the
// tensor-op files' kernels (qmm_tensor.metal, attn_prefill_tensor.metal, vit_tensor.metal) only
// on the tensor route (a Metal device compiles them only where it runs them).
var KernelFiles = []string{"embed.metal", "qmv.metal", "qmm.metal", "qmm_tensor.metal", "rmsnorm.metal", "attn_prefill.metal", "attn_prefill_tensor.metal", "conv.metal", "gdn.metal",
	"attn_rope.metal", "attn_decode.metal", "moe.metal", "argmax.metal", "sample.metal", "vit.metal", "vit_tensor.metal", "vit_attn.metal"}

// GPU is the decode plan run on a device (the MSL emulator or Metal): an engine/backend.Backend
// whose sessions each run on a one-row executor (their recurrent state, step entry and block
// table) over weight buffers uploaded once, a KV page pool and per-step scratch, all shared.
// Emulator and Metal differ only in the exec.Device.
//
// With Parallel from 2 to decode.MaxRows, the sessions' state lives in the rows of the
// multi-row plans' buffers (rows.go): session i runs alone on the executor of its row, and a
// step of several sessions' next tokens runs them together through one multi-row plan
// (backend.Backend.StepRows). Sessions beyond the rows, and every session when Parallel is 1, get an
// executor with buffers of their own: one waits in an idle pool for the next session. Snapshots
// (the prefix cache) are host copies of a session's recurrent state holding references to its KV
// pages (pages.go), not executors.
type GPU struct {
	name string
	w    *model.Weights
	step *decode.Step
	dev  *sharedDevice
	size Sizing     // what the plan was built for (Size)
	mu   sync.Mutex // one step at a time (the executors share the weight buffers and pipelines)
	vit  towers     // the vision tower's executors per grid (vision.go), under mu

	poolMu sync.Mutex // the idle lane and, with rows, which session owns which row
	idle   []*lane
	rows   *rowSet // the multi-row plans (nil: Parallel 1)

	pagesMu sync.Mutex
	pages   *pagePool
	kv      map[int][]byte // host views of the K and V pools, by plan buffer

	closeDev func()      // releases the device, when the backend made it (NewMetal); nil otherwise
	budget   exec.Budget // every executor's
	cost     draft.Cost  // the drafting gate's price of a step (draftCost), and from what
	costWhy  string
}

// GPUOptions configure NewGPU.
type GPUOptions struct {
	// MaxCtx is a session's positions; 0: as many as WorkingSet holds, up to the model's context.
	MaxCtx int
	// WorkingSet is the device memory the backend may use (Metal: recommendedMaxWorkingSetSize);
	// 0: no limit known (the emulator).
	WorkingSet int64
	// KVBits is the KV cache's format: 16 (bfloat16; also 0) or 8 (decode.Options.KVBits).
	KVBits int
	// PageSize and Pages size the KV pool (decode.Options); Pages 0: poolPages.
	PageSize, Pages int
	// CacheBytes is the prefix cache's budget: the pool gets as many more pages as that holds
	// and the working set leaves room for, so cached prefixes keep their pages.
	CacheBytes int64
	// Parallel is how many sequences run at once (0: as many as fit, by decode.Memory.Parallel;
	// with no working set known, 4): the pool holds their pages by decode.SessionsPages' rule
	// (each min(MaxCtx, decode.ParallelContext) positions at once, one alone MaxCtx), which must
	// fit beside their states.
	Parallel int
	// Chunks are the prompt tokens a batched prefill step takes, one size per plan mode
	// (decode.Options.Chunks; none: prompts run through the decode step token by token); Forward
	// takes the largest that fits what is left of a prompt. AutoChunks, with no Chunks, picks
	// them by memory (DefaultChunks). ChunkLogits makes them compute every row's logits too, so
	// Forward with all set takes them as well.
	Chunks      []int
	AutoChunks  bool
	ChunkLogits bool
	// Logf receives the backend's log lines (nil: the standard logger): one when weights that
	// should have been served from the mapped checkpoint had to be copied.
	Logf func(format string, args ...any)
	// Budget bounds the modeled work of one command buffer (exec.Executor.Budget; zero fields:
	// exec.DefaultBudget's): a long prefill chunk is committed as several command buffers.
	Budget exec.Budget
	// PrefillRoute is --prefill-route: a forced route, or (the zero value) auto, which leaves it
	// to the device (Size).
	PrefillRoute RouteChoice
	// ImagePixels is the most pixels of an image the vision tower runs on once resized (lily
	// serve's --image-max-pixels; 0: vision.ServedMaxPixels). Where the model has a tower
	// (Config.Vision; nil where it is not loaded) Size sets aside its weights and one set of
	// activations for the largest grid that many pixels make (vision.go).
	ImagePixels int
}

// NewGPU builds the decode plan for w on dev and uploads the weights.
func NewGPU(name string, w *model.Weights, dev exec.Device, o GPUOptions) (*GPU, error) {
	return newGPU(name, w, dev, deviceOf(name, dev, ""), o)
}

// newGPU is NewGPU with the device as sizing reads it (d).
func newGPU(name string, w *model.Weights, dev exec.Device, d Device, o GPUOptions) (*GPU, error) {
	sz, err := Size(w.Config, o, d)
	if err != nil {
		return nil, err
	}
	step, err := decode.Build(w.Config, decode.Options{MaxCtx: sz.Context, KVBits: o.KVBits, PageSize: o.PageSize, Pages: sz.Pages, Chunks: sz.Chunks, ChunkLogits: o.ChunkLogits,
		PrefillRoute: sz.Route})
	if err != nil {
		return nil, err
	}
	sz.RouteWhy = withFallbacks(sz.RouteWhy, step)
	multi, err := multiSteps(step, sz.Parallel)
	if err != nil {
		return nil, err
	}
	steps := []*decode.Step{step}
	if len(multi) > 2 {
		steps = append(steps, multi[2:]...)
	}
	shared := newSharedDevice(dev, steps)
	if _, ok := dev.(exec.Wrapper); ok {
		shared.views = step.Views(w) // quantized tensors served from the mapped checkpoint, no copy
	}
	e := &GPU{name: name, w: w, step: step, dev: shared, size: sz, pages: newPagePool(step.Attn.Pages), kv: map[int][]byte{}, budget: o.Budget}
	e.cost, e.costWhy = draftCost(step, len(multi)-1, d)
	if len(multi) > 0 {
		if e.rows, err = e.newRowSet(multi); err != nil {
			shared.freeWeights()
			return nil, err
		}
	}
	sl, err := e.take() // allocates (and from now on shares) the weight buffers and the KV pool
	if err != nil {
		e.rows.close(shared)
		shared.freeWeights()
		return nil, err
	}
	if shared.copied > 0 {
		logf := o.Logf
		if logf == nil {
			logf = log.Printf
		}
		// One line for all: where the checkpoint's tensor data starts decides it for every tensor.
		logf("%s: %d of %d weight tensors (%.2f GB) copied into GPU memory instead of wrapped in the mapped checkpoint: %v",
			name, shared.copied, len(shared.views), float64(shared.copiedBytes)/1e9, shared.wrapErr)
	}
	wrapped := func(buf int) bool { _, ok := shared.shared[step.Plan.Buffers[buf].Name].(exec.View); return ok }
	if err := step.Upload(w, sl.x.Bytes, wrapped); err != nil {
		sl.x.Close()
		e.rows.close(shared)
		shared.freeWeights()
		return nil, err
	}
	for _, buf := range step.KV {
		e.kv[buf] = sl.x.Bytes(buf)
	}
	e.give(sl) // the upload's executor serves the first session
	return e, nil
}

// decode.Step is the plan the backend runs.
func (e *GPU) Step() *decode.Step { return e.step }

// Name identifies the backend ("emu" or "metal").
func (e *GPU) Name() string { return e.name }

// Config is the model's configuration.
func (e *GPU) Config() *config.Config { return e.w.Config }

// Describe is what the backend was sized for (Size): the context, the sequences at once, the
// prefill chunks, slice and route, each with why, and whether prompts may hold images.
func (e *GPU) Describe() backend.Description {
	s := e.size
	d := backend.Description{Name: e.name, Context: e.step.MaxCtx, ContextWhy: s.ContextWhy, Parallel: s.Parallel, ParallelWhy: s.ParallelWhy,
		PrefillChunks: e.step.Chunks, PrefillSlice: s.Slice, PrefillRoute: s.Route.String(), PrefillRouteWhy: s.RouteWhy,
		Vision: e.step.Images, Rows: 1, DraftCost: e.cost, DraftCostWhy: e.costWhy}
	if e.rows != nil {
		d.Rows = len(e.rows.ones)
	}
	if !d.Vision {
		d.VisionWhy = cmp.Or(e.w.Config.VisionOff, ErrNoImages.Error())
	}
	return d
}

// Live is the device memory allocated beside the weights and the KV pool (executors), in buffers
// and bytes.
func (e *GPU) Live() (buffers int, bytes int64) { return e.dev.live() }

// Close frees the idle executors, the KV pool and the weights; every session and snapshot must be
// closed first.
func (e *GPU) Close() {
	e.poolMu.Lock()
	defer e.poolMu.Unlock()
	for _, sl := range e.idle {
		sl.x.Close()
	}
	e.idle = nil
	e.rows.close(e.dev)
	e.rows = nil
	e.closeTowers()
	e.dev.freeWeights()
	e.dev.freePipelines()
	if e.closeDev != nil {
		e.closeDev()
		e.closeDev = nil
	}
}

// take returns a free row's lane (the lowest), else an idle lane, else a new one with buffers of
// its own: a session's one-row executor over the shared weights.
func (e *GPU) take() (*lane, error) {
	e.poolMu.Lock()
	if l := e.rows.take(); l != nil {
		e.poolMu.Unlock()
		return l, nil
	}
	if n := len(e.idle); n > 0 {
		l := e.idle[n-1]
		e.idle = e.idle[:n-1]
		e.poolMu.Unlock()
		return l, nil
	}
	e.poolMu.Unlock()
	return e.newLane(e.dev, e.step, -1)
}

// give frees l's row, or keeps l for the next session, or frees it when one is kept already.
func (e *GPU) give(l *lane) {
	e.poolMu.Lock()
	defer e.poolMu.Unlock()
	switch {
	case l.row >= 0:
		e.rows.owner[l.row] = nil
	case len(e.idle) == 0:
		e.idle = append(e.idle, l)
	default:
		l.x.Close()
	}
}

// NewSession starts an empty sequence.
func (e *GPU) NewSession() backend.Session {
	s, err := e.newSession()
	if err != nil {
		return &Session{err: err}
	}
	return s
}

func (e *GPU) newSession() (*Session, error) {
	e.mu.Lock() // Init writes the shared constants, and a row is reserved until its owner is set
	defer e.mu.Unlock()
	l, err := e.take()
	if err != nil {
		return nil, err
	}
	e.step.Init(l.x.Bytes)       // a row's executor: that row only
	l.x.Mode = decode.ModeGreedy // Forward leaves the greedy token in the step buffer (NextToken)
	s := &Session{e: e, lane: l}
	if l.row >= 0 {
		e.poolMu.Lock()
		e.rows.owner[l.row] = s
		e.poolMu.Unlock()
	}
	return s, nil
}

// Session is one sequence on a GPU backend.
type Session struct {
	e      *GPU
	*lane  // its one-row executor; nil once closed
	pos    int
	pages  []int32    // the KV pool pages of positions 0, PageSize, 2·PageSize, ... (the block table)
	err    error      // the session could not be created, or a generation step failed
	verify *verifying // a Verify awaiting its Keep
}

var errClosed = errors.New("gpu: the session is closed")

// lock takes the backend's step lock, which also keeps the session in its row (a multi-row step
// moves sessions between rows under it), or reports why the session cannot run a step (the lock
// then not held).
func (s *Session) lock() error {
	if s.err != nil {
		return s.err
	}
	s.e.mu.Lock()
	if s.lane == nil {
		s.e.mu.Unlock()
		return errClosed
	}
	return nil
}

// logits copies the last step's logits row out of the scratch every session's steps share.
func (s *Session) logits() []float32 {
	return slices.Clone(decode.FloatsOf(s.x.Bytes(s.e.step.Logits)))
}

// NextToken is the greedy token the last step chose on the GPU (argmax_final's output).
func (s *Session) NextToken() int {
	b := s.x.Bytes(s.e.step.StepBuf)
	return int(uint32(b[4]) | uint32(b[5])<<8 | uint32(b[6])<<16 | uint32(b[7])<<24)
}

// Pos is the number of tokens consumed.
func (s *Session) Pos() int { return s.pos }

// Close gives the session's pages and executor (or row) back to the backend. It waits for a step
// in progress: a multi-row step may be moving the session to another row.
func (s *Session) Close() {
	if s.e == nil {
		return // never started (NewSession's error)
	}
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	if s.lane != nil {
		s.e.pagesMu.Lock()
		s.e.pages.release(s.pages)
		s.e.pagesMu.Unlock()
		s.pages = nil
		s.e.give(s.lane)
		s.lane = nil
	}
}

// Save copies the session's recurrent state (GDN states, conv windows, step buffer) into host
// memory; the snapshot shares the session's KV pages.
func (s *Session) Save() (backend.Snapshot, error) {
	if err := s.lockKept(); err != nil { // no step writes the buffers while they are copied
		return nil, err
	}
	defer s.e.mu.Unlock()
	sn, err := s.e.newSnapshot(s.pos)
	if err != nil {
		return nil, err
	}
	for _, p := range sn.parts {
		copy(p.data, s.x.Bytes(p.buf)[p.off:])
	}
	n := (s.pos + s.e.step.Attn.Page() - 1) / s.e.step.Attn.Page()
	s.e.pagesMu.Lock()
	sn.pages = slices.Clone(s.pages[:n])
	s.e.pages.retain(sn.pages)
	s.e.pages.resident = append(s.e.pages.resident, sn)
	s.e.pagesMu.Unlock()
	return sn, nil
}

// Snapshot is a session's saved state: its recurrent state in host memory outside the Go heap
// (internal/hostmem), and its KV rows either in pool pages it shares (resident) or, after the
// pool needed them, in host memory too (spilled). Close frees both.
type Snapshot struct {
	e      *GPU
	pos    int
	mem    []byte
	parts  []part  // spans of mem, in StateSpans order
	pages  []int32 // resident: the pool pages of positions [0, pos)
	kv     []byte  // spilled: the KV rows, in StateSpans order
	bytes  int64
	closed bool
}

// newSnapshot allocates the host state of a snapshot of pos positions, holding no KV yet.
func (e *GPU) newSnapshot(pos int) (*Snapshot, error) {
	var n int64
	e.step.StateSpans(pos, nil, func(_ int, _, size int64) { n += size })
	mem, err := hostmem.Alloc(n)
	if err != nil {
		return nil, fmt.Errorf("gpu: %d bytes for a snapshot: %w", n, err)
	}
	sn := &Snapshot{e: e, pos: pos, mem: mem, bytes: n + e.kvBytes(pos)}
	rest := mem
	e.step.StateSpans(pos, nil, func(buf int, off, size int64) {
		sn.parts = append(sn.parts, part{buf, off, rest[:size:size]})
		rest = rest[size:]
	})
	return sn, nil
}

type part struct {
	buf  int
	off  int64
	data []byte
}

// Pos is the number of tokens the saved session had consumed.
func (sn *Snapshot) Pos() int { return sn.pos }

// Bytes is the memory the snapshot stands for: its host state and its KV rows (in shared pages
// while resident, in host memory once spilled).
func (sn *Snapshot) Bytes() int64 { return sn.bytes }

// Close drops the snapshot's memory and its page references.
func (sn *Snapshot) Close() {
	if sn.closed {
		return
	}
	sn.closed = true
	e := sn.e
	e.pagesMu.Lock()
	if sn.pages != nil {
		e.pages.release(sn.pages)
		e.pages.resident = slices.DeleteFunc(e.pages.resident, func(x *Snapshot) bool { return x == sn })
	}
	e.pagesMu.Unlock()
	sn.pages, sn.parts = nil, nil
	hostmem.Free(sn.kv)
	hostmem.Free(sn.mem)
	sn.kv, sn.mem = nil, nil
}

// Restore starts a session on an executor with the snapshot's state copied in, sharing its KV
// pages (a spilled snapshot's rows are copied into fresh pages first, which it then shares).
func (sn *Snapshot) Restore() (backend.Session, error) {
	if sn.closed {
		return nil, errors.New("gpu: restore of a closed snapshot")
	}
	s, err := sn.e.newSession()
	if err != nil {
		return nil, err
	}
	for _, p := range sn.parts {
		copy(s.x.Bytes(p.buf)[p.off:], p.data)
	}
	e := sn.e
	e.pagesMu.Lock()
	if sn.pages != nil {
		s.pages = slices.Clone(sn.pages)
		e.pages.retain(s.pages)
	} else {
		err = e.adopt(sn, s)
	}
	e.pagesMu.Unlock()
	if err != nil {
		s.Close()
		return nil, err
	}
	s.writeTable()
	s.pos = sn.pos
	return s, nil
}

// sharedDevice allocates each Weights, KVCache and Activations buffer once (by name) and caches
// pipelines, so every session's executor shares them: steps run one at a time, so one set of
// per-step scratch serves every session (the 0.56 GB of a 4,096-token prefill chunk's among it),
// and what a step leaves there (the logits) is copied out before another runs. An Activations
// buffer is as large as the largest of that name in the backend's plans (a multi-row plan's hold
// a row per sequence); smaller ones are views of its start. It counts the other allocations
// (live: each session's state and control buffers, the rows' buffers) for GPU.Live.
type sharedDevice struct {
	exec.Device
	mu         sync.Mutex
	shared     map[string]exec.Memory // Weights, KVCache and Activations buffers, by name
	sharedSize map[string]int64       // their sizes
	largest    map[string]int64       // each Activations buffer's largest size in the plans
	pipes      map[string]exec.Pipeline
	views      map[string][]byte // weight buffers to wrap instead of allocate (a Wrapper device)
	sizes      map[exec.Memory]int64
	rows       map[string]rowBuffer // the multi-row plans' per-row buffers (rowSet), by name

	copied      int   // views that could not be wrapped and were allocated (copied) instead
	copiedBytes int64 // their size
	wrapErr     error // the first wrap failure
}

// newSharedDevice shares dev's buffers among the executors of steps' plans.
func newSharedDevice(dev exec.Device, steps []*decode.Step) *sharedDevice {
	d := &sharedDevice{Device: dev, shared: map[string]exec.Memory{}, sharedSize: map[string]int64{}, largest: map[string]int64{},
		pipes: map[string]exec.Pipeline{}, sizes: map[exec.Memory]int64{}, rows: map[string]rowBuffer{}}
	for _, st := range steps {
		for _, b := range st.Plan.Buffers {
			if b.Kind == plan.Activations {
				d.largest[b.Name] = max(d.largest[b.Name], b.Size)
			}
		}
	}
	return d
}

// own allocates a buffer only its executor uses, counted as live.
func (d *sharedDevice) own(b plan.Buffer) (exec.Memory, error) {
	m, err := d.Device.Alloc(b)
	if err == nil {
		d.mu.Lock()
		d.sizes[m] = b.Size
		d.mu.Unlock()
	}
	return m, err
}

func (d *sharedDevice) Alloc(b plan.Buffer) (exec.Memory, error) {
	if b.Kind != plan.Weights && b.Kind != plan.KVCache && b.Kind != plan.Activations {
		return d.own(b)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if m, ok := d.shared[b.Name]; ok {
		return d.fit(b, m)
	}
	if b.Kind == plan.Activations {
		big := b
		big.Size = max(b.Size, d.largest[b.Name])
		m, err := d.Device.Alloc(big)
		if err != nil {
			return nil, err
		}
		d.shared[b.Name], d.sharedSize[b.Name] = m, big.Size
		return d.fit(b, m)
	}
	if data, ok := d.views[b.Name]; ok && b.Kind == plan.Weights {
		// A failed wrap (e.g. the device refuses the pages) falls back to a copy.
		mem, off, err := d.Device.(exec.Wrapper).Wrap(data)
		if err == nil {
			v := exec.View{Mem: mem, Offset: off, Size: b.Size}
			d.shared[b.Name], d.sharedSize[b.Name] = v, b.Size
			return v, nil
		}
		if d.copied++; d.wrapErr == nil {
			d.wrapErr = err
		}
		d.copiedBytes += b.Size
	}
	m, err := d.Device.Alloc(b)
	if err == nil {
		d.shared[b.Name], d.sharedSize[b.Name] = m, b.Size
	}
	return m, err
}

// fit is shared buffer m for b: itself, or a view of its start when b is smaller. The caller
// holds d.mu.
func (d *sharedDevice) fit(b plan.Buffer, m exec.Memory) (exec.Memory, error) {
	switch size := d.sharedSize[b.Name]; {
	case b.Size == size:
		return m, nil
	case b.Size < size:
		return exec.View{Mem: m, Size: b.Size}, nil
	default:
		return nil, fmt.Errorf("gpu: buffer %s of %d bytes, shared at %d", b.Name, b.Size, size)
	}
}

// Free frees a session's buffer; the shared weights and KV pool stay until freeWeights.
func (d *sharedDevice) Free(m exec.Memory) {
	d.mu.Lock()
	_, ok := d.sizes[m]
	delete(d.sizes, m)
	d.mu.Unlock()
	if ok {
		d.Device.Free(m)
	}
}

func (d *sharedDevice) freeWeights() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, m := range d.shared {
		d.Device.Free(m)
		delete(d.shared, name)
		delete(d.sharedSize, name)
	}
}

// freePipelines forgets the cached pipelines; the device that made them releases them (Close).
func (d *sharedDevice) freePipelines() {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.pipes)
}

func (d *sharedDevice) live() (int, int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var n int64
	for _, size := range d.sizes {
		n += size
	}
	return len(d.sizes), n
}

func (d *sharedDevice) Pipeline(kernel string, constants map[int]any) (exec.Pipeline, error) {
	keys := make([]int, 0, len(constants))
	for k := range constants {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	key := kernel
	for _, k := range keys {
		key += fmt.Sprintf(" %d=%v", k, constants[k])
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if p, ok := d.pipes[key]; ok {
		return p, nil
	}
	p, err := d.Device.Pipeline(kernel, constants)
	if err == nil {
		d.pipes[key] = p
	}
	return p, err
}

// EncodeSnapshot concatenates a snapshot's spans in StateSpans order: the recurrent state and
// the sequence's KV rows (without the pool's other pages), so the encoding holds for any pool
// and MaxCtx of the same model and KV format.
func (e *GPU) EncodeSnapshot(s backend.Snapshot) ([]byte, error) {
	sn, ok := s.(*Snapshot)
	if !ok || sn.e != e || sn.closed {
		return nil, errors.New("gpu: not a live snapshot of this backend")
	}
	e.pagesMu.Lock() // the pages stay the snapshot's while they are read
	defer e.pagesMu.Unlock()
	out := make([]byte, 0, sn.bytes)
	parts, kv := sn.parts, sn.kv
	var t []uint32
	if sn.pages != nil {
		t = tableOf(sn.pages)
	} else {
		t = make([]uint32, e.step.Attn.TableLen()) // spans' sizes only: the rows come from kv
	}
	e.step.StateSpans(sn.pos, t, func(buf int, off, n int64) {
		switch {
		case !e.isKV(buf):
			out = append(out, parts[0].data...)
			parts = parts[1:]
		case sn.pages != nil:
			out = append(out, e.kvView(buf)[off:off+n]...)
		default:
			out = append(out, kv[:n]...)
			kv = kv[n:]
		}
	})
	return out, nil
}

// DecodeSnapshot reads what EncodeSnapshot wrote for pos positions, as a spilled snapshot (its
// KV rows go into pages when it is restored).
func (e *GPU) DecodeSnapshot(data []byte, pos int) (backend.Snapshot, error) {
	if pos < 0 || pos > e.step.MaxCtx {
		return nil, fmt.Errorf("gpu: a snapshot of %d positions does not fit a KV cache of %d", pos, e.step.MaxCtx)
	}
	sn, err := e.newSnapshot(pos)
	if err != nil {
		return nil, err
	}
	if sn.bytes != int64(len(data)) {
		sn.Close()
		return nil, fmt.Errorf("gpu: a snapshot of %d positions is %d bytes, not %d", pos, sn.bytes, len(data))
	}
	if sn.kv, err = hostmem.Alloc(e.kvBytes(pos)); err != nil {
		sn.Close()
		return nil, err
	}
	state, kv := sn.mem, sn.kv
	e.step.StateSpans(pos, make([]uint32, e.step.Attn.TableLen()), func(buf int, _, n int64) {
		if e.isKV(buf) {
			copy(kv, data[:n])
			kv = kv[n:]
		} else {
			copy(state, data[:n])
			state = state[n:]
		}
		data = data[n:]
	})
	return sn, nil
}
