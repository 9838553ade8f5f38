package decode

import (
	"fmt"
	"log"
	"slices"
	"sync"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/plan"
)

// KernelFiles are the kernel sources the decode step uses.
var KernelFiles = []string{"embed.metal", "qmv.metal", "conv.metal", "gdn.metal",
	"attn_rope.metal", "attn_decode.metal", "moe.metal", "argmax.metal"}

// DefaultMaxCtx caps a GPU backend's KV caches when no context is given.
const DefaultMaxCtx = 4096

// GPU is the decode plan run on a device (the MSL emulator or Metal): an engine/backend.Backend
// whose sessions each own an executor (their activations, GDN state and KV caches) over weight
// buffers uploaded once and shared. Emulator and Metal differ only in the exec.Device.
type GPU struct {
	name string
	w    *model.Weights
	step *Step
	dev  *sharedDevice
	mu   sync.Mutex // one step at a time (the executors share the weight buffers and pipelines)
}

// GPUOptions configure NewGPU.
type GPUOptions struct {
	MaxCtx int // KV positions (a session's limit); 0: the model's context, at most DefaultMaxCtx
	// Logf receives the backend's log lines (nil: the standard logger): one when weights that
	// should have been served from the mapped checkpoint had to be copied.
	Logf func(format string, args ...any)
}

// NewGPU builds the decode plan for w on dev and uploads the weights.
func NewGPU(name string, w *model.Weights, dev exec.Device, o GPUOptions) (*GPU, error) {
	maxCtx := o.MaxCtx
	if maxCtx <= 0 {
		maxCtx = DefaultMaxCtx
		if w.Config.MaxPositions > 0 {
			maxCtx = min(maxCtx, w.Config.MaxPositions)
		}
	}
	step, err := Build(w.Config, Options{MaxCtx: maxCtx})
	if err != nil {
		return nil, err
	}
	shared := &sharedDevice{Device: dev, weights: map[string]exec.Memory{}, pipes: map[string]exec.Pipeline{}}
	if _, ok := dev.(exec.Wrapper); ok {
		shared.views = step.Views(w) // quantized tensors served from the mapped checkpoint, no copy
	}
	e := &GPU{name: name, w: w, step: step, dev: shared}
	x, err := exec.New(shared, step.Plan) // allocates (and from now on shares) the weight buffers
	if err != nil {
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
	wrapped := func(buf int) bool { _, ok := shared.weights[step.Plan.Buffers[buf].Name].(exec.View); return ok }
	if err := step.Upload(w, x.Bytes, wrapped); err != nil {
		return nil, err
	}
	return e, nil
}

// Step is the plan the backend runs.
func (e *GPU) Step() *Step { return e.step }

// Name identifies the backend ("emu" or "metal").
func (e *GPU) Name() string { return e.name }

// Config is the model's configuration.
func (e *GPU) Config() *config.Config { return e.w.Config }

// NewSession starts an empty sequence (its own executor over the shared weights).
func (e *GPU) NewSession() backend.Session {
	s, err := e.newSession()
	if err != nil {
		return &Session{err: err}
	}
	return s
}

func (e *GPU) newSession() (*Session, error) {
	p, rb := withReadback(e.step.Plan)
	x, err := exec.New(e.dev, p)
	if err != nil {
		return nil, err
	}
	e.step.Init(x.Bytes)
	return &Session{e: e, x: x, plan: p, readback: rb}, nil
}

// Session is one sequence on a GPU backend.
type Session struct {
	e   *GPU
	x   *exec.Executor
	pos int
	err error // the session could not be created, or a step of Generate failed

	plan     *plan.Plan // the step plan plus the readback dispatch (generate.go), this session's own copy
	readback int        // index of the readback dispatch in plan
}

// Forward runs the decode step once per token (prefill is token by token for now) and returns
// the logits rows.
func (s *Session) Forward(tokens []int, all bool) ([][]float32, error) {
	if s.err != nil {
		return nil, s.err
	}
	c := s.e.w.Config
	if len(tokens) == 0 {
		return nil, fmt.Errorf("forward: no tokens")
	}
	for _, id := range tokens {
		if id < 0 || id >= c.VocabSize {
			return nil, fmt.Errorf("forward: token id %d outside the vocabulary [0, %d)", id, c.VocabSize)
		}
	}
	if s.pos+len(tokens) > s.e.step.MaxCtx {
		return nil, fmt.Errorf("forward: %d positions exceed the backend's KV cache of %d", s.pos+len(tokens), s.e.step.MaxCtx)
	}
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	var out [][]float32
	for i, id := range tokens {
		st := s.x.Bytes(s.e.step.StepBuf)
		copy(st, bytesOf([]uint32{uint32(s.pos), uint32(id)}))
		if err := s.x.Step(); err != nil {
			return nil, fmt.Errorf("forward: position %d: %w", s.pos, err)
		}
		s.pos++
		if all || i == len(tokens)-1 {
			out = append(out, floatsOf(s.x.Bytes(s.e.step.Logits)))
		}
	}
	return out, nil
}

// NextToken is the greedy token the last step chose on the GPU (argmax_final's output).
func (s *Session) NextToken() int {
	b := s.x.Bytes(s.e.step.StepBuf)
	return int(uint32(b[4]) | uint32(b[5])<<8 | uint32(b[6])<<16 | uint32(b[7])<<24)
}

// Pos is the number of tokens consumed.
func (s *Session) Pos() int { return s.pos }

// Clone copies the session: a new executor over the same weights with the state buffers (GDN
// state, conv windows, KV caches) copied.
func (s *Session) Clone() backend.Session {
	if s.err != nil {
		return &Session{err: s.err}
	}
	c, err := s.e.newSession()
	if err != nil {
		return &Session{err: err}
	}
	for _, buf := range append(slices.Clone(s.e.step.Session), s.e.step.StepBuf) {
		copy(c.x.Bytes(buf), s.x.Bytes(buf))
	}
	c.pos = s.pos
	return c
}

// Bytes is the device memory of the session's state buffers (the full KV cache allocation, not
// the part in use).
func (s *Session) Bytes() int64 {
	if s.err != nil {
		return 0
	}
	var n int64
	for _, buf := range s.e.step.Session {
		n += s.e.step.Plan.Buffers[buf].Size
	}
	return n
}

// sharedDevice allocates each Weights buffer once (by name) and caches pipelines, so every
// session's executor shares them.
type sharedDevice struct {
	exec.Device
	mu      sync.Mutex
	weights map[string]exec.Memory
	pipes   map[string]exec.Pipeline
	views   map[string][]byte // weight buffers to wrap instead of allocate (a Wrapper device)

	copied      int   // views that could not be wrapped and were allocated (copied) instead
	copiedBytes int64 // their size
	wrapErr     error // the first wrap failure
}

func (d *sharedDevice) Alloc(b plan.Buffer) (exec.Memory, error) {
	if b.Kind != plan.Weights {
		return d.Device.Alloc(b)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if m, ok := d.weights[b.Name]; ok {
		return m, nil
	}
	if data, ok := d.views[b.Name]; ok {
		// A failed wrap (e.g. the device refuses the pages) falls back to a copy.
		mem, off, err := d.Device.(exec.Wrapper).Wrap(data)
		if err == nil {
			v := exec.View{Mem: mem, Offset: off, Size: b.Size}
			d.weights[b.Name] = v
			return v, nil
		}
		if d.copied++; d.wrapErr == nil {
			d.wrapErr = err
		}
		d.copiedBytes += b.Size
	}
	m, err := d.Device.Alloc(b)
	if err == nil {
		d.weights[b.Name] = m
	}
	return m, err
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
