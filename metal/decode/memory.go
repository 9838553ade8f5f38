package decode

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

// DefaultMaxCtx is a session's positions when neither the model nor the caller gives any.
const DefaultMaxCtx = 4096

// Memory is what a model's decode step holds in device memory, in bytes, from its plan.
type Memory struct {
	Weights       int64 `json:"weights_bytes"`
	KVPerPosition int64 `json:"kv_bytes_per_position"` // K and V rows of every attention layer
	State         int64 `json:"state_bytes"`           // DeltaNet state and conv windows
	Scratch       int64 `json:"scratch_bytes"`         // activations, logits, step buffer
	// RowScratch is the part of Scratch the decode step itself binds (its activations, logits,
	// sampler buffers; not a prefill chunk's): what each row of a multi-row step holds.
	RowScratch int64 `json:"row_scratch_bytes"`
	// Ring is what a row of a multi-row step records for verifying drafts (Options.Verify: each
	// DeltaNet layer's conv input and recurrence inputs, kept until the commit): 1.7 MB at
	// production, held once per row for every multi-row plan (the rings are shared scratch).
	Ring     int64 `json:"verify_ring_bytes_per_row"`
	KVBits   int   `json:"kv_bits"`           // the KV cache's format (16 or 8)
	PageSize int   `json:"kv_page_positions"` // positions per page of the KV pool
}

// reserve is device memory left to Metal itself (pipelines, command buffers, the OS's own use
// of the GPU) when sizing the KV cache.
const reserve = 512 << 20

// MemoryOf sizes c's decode step with a kvBits KV cache (16 or 8; 0: 16) at its full context
// (the attention scratch grows a little with the context).
func MemoryOf(c *config.Config, kvBits int) (Memory, error) { return MemoryOfChunked(c, kvBits, 0) }

// MemoryOfChunked is MemoryOf for a plan with a prefill chunk mode of chunk tokens, whose
// activations count as scratch (156 MB at production for 512 tokens).
func MemoryOfChunked(c *config.Config, kvBits, chunk int) (Memory, error) {
	full := max(c.MaxPositions, 1)
	s, err := Build(c, Options{MaxCtx: full, KVBits: kvBits, Chunks: []int{chunk}})
	if err != nil {
		return Memory{}, err
	}
	m := Memory{KVBits: s.KVBits, PageSize: s.Attn.PageSize, Ring: ringRow(c)}
	row := s.stepBuffers()
	for i, b := range s.Plan.Buffers {
		switch b.Kind {
		case plan.Weights:
			m.Weights += b.Size
		case plan.KVCache:
			m.KVPerPosition += b.Size / int64(s.Attn.PoolRows())
		case plan.State:
			m.State += b.Size
		default:
			m.Scratch += b.Size
			if row[i] {
				m.RowScratch += b.Size
			}
		}
	}
	return m, nil
}

// ringRow is the bytes a verify row records (Memory.Ring): every DeltaNet layer's conv input
// (kernels.Conv1DVerifyBuffers' ring) and its recurrence's inputs (GDNShape.RingLen), float32.
func ringRow(c *config.Config) int64 {
	gs := kernels.GDNShape{HK: c.LinearKeyHeads, HV: c.LinearValueHeads, DK: c.LinearKeyDim, DV: c.LinearValueDim}
	var n int64
	for _, l := range c.Layers {
		if l == config.LinearAttention {
			n += 4 * int64(gs.Channels()+gs.RingLen())
		}
	}
	return n
}

// stepBuffers are the buffers the decode step's own dispatches bind (those of its modes, not a
// prefill chunk's).
func (s *Step) stepBuffers() map[int]bool {
	bound := map[int]bool{}
	for _, d := range s.Plan.Dispatches {
		if slices.ContainsFunc(stepModes, d.RunsIn) {
			for _, b := range d.Buffers {
				bound[b.Buffer] = true
			}
		}
	}
	return bound
}

// stepModes are the decode step's modes.
var stepModes = []string{ModeGreedy, ModeSample, ModePrefill, ModeGreedyLogprobs, ModeSampleLogprobs}

// Session is the device memory of one session holding n positions: its state and scratch, and a
// KV pool of the pages n positions take plus the spare one.
func (m Memory) Session(n int) int64 {
	return m.State + m.Scratch + int64(m.pages(n))*int64(m.PageSize)*m.KVPerPosition
}

func (m Memory) pages(n int) int { return (n+m.PageSize-1)/m.PageSize + 1 }

// Snapshot is a saved state of n positions (the state and the KV rows in use).
func (m Memory) Snapshot(n int) int64 { return m.State + int64(n)*m.KVPerPosition }

// Fit is how many positions one session can hold beside the weights in workingSet bytes
// (0: none): whole pages, less the spare one.
func (m Memory) Fit(workingSet int64) int {
	return max(m.Pages(workingSet, m.PageSize)-1, 0) * m.PageSize
}

// Pages is how many KV pages of pageSize positions fit beside the weights, one session's state
// and scratch in workingSet bytes.
func (m Memory) Pages(workingSet int64, pageSize int) int {
	return m.PagesBeside(workingSet, pageSize, 1)
}

// PagesBeside is how many KV pages of pageSize positions fit in workingSet bytes beside the
// weights, the scratch and n sequences' state: a multi-row step holds each row's DeltaNet state,
// conv windows and own scratch (RowScratch) and, with two or more rows, its verify ring (Ring),
// and the rest of the scratch (a prefill chunk's activations) once.
func (m Memory) PagesBeside(workingSet int64, pageSize, n int) int {
	room := workingSet - reserve - m.Weights - m.Scratch - int64(n)*m.State - int64(n-1)*m.RowScratch
	if n >= 2 {
		room -= int64(n) * m.Ring
	}
	if room <= 0 || m.KVPerPosition <= 0 {
		return 0
	}
	return int(room / (m.KVPerPosition * int64(pageSize)))
}

// Context chooses the positions a session holds: asked (0: as many as fit, up to the model's
// context) against workingSet (0: no limit known). It says why when that is less than the
// model's context, or fails when not even asked fit.
func (m Memory) Context(c *config.Config, asked int, workingSet int64) (int, string, error) {
	full := c.MaxPositions
	if full <= 0 {
		full = DefaultMaxCtx
	}
	if asked > full {
		return 0, "", fmt.Errorf("--ctx %d exceeds the model's %d positions", asked, full)
	}
	if workingSet <= 0 {
		return cmp.Or(asked, full), "", nil
	}
	fit := m.Fit(workingSet)
	more := "raise iogpu.wired_limit_mb"
	if m.KVBits != 8 {
		more += " or use --kv-bits 8 (half the KV memory)"
	}
	switch {
	case fit == 0:
		return 0, "", fmt.Errorf("the weights (%s) and one session's state (%s) do not fit in this GPU's working set of %s: raise iogpu.wired_limit_mb (sudo sysctl) or use a Mac with more memory", gib(m.Weights), gib(m.State+m.Scratch), gib(workingSet))
	case asked > fit:
		return 0, "", fmt.Errorf("--ctx %d needs %s of KV cache, but %d positions fit beside the weights in this GPU's working set of %s: lower --ctx, or %s", asked, gib(int64(asked)*m.KVPerPosition), fit, gib(workingSet), more)
	case asked > 0:
		return asked, "", nil
	case fit < full:
		return fit, fmt.Sprintf("%d of the model's %d positions fit in this GPU's working set of %s beside %s of weights: %s to serve more", fit, full, gib(workingSet), gib(m.Weights), more), nil
	}
	return full, "", nil
}

// MacWorkingSet estimates recommendedMaxWorkingSetSize for a Mac with ramGB of memory: two thirds
// up to 32 GB, three quarters above (reported values: 21,845 MiB on 32 GB, 48 GiB on 64 GB; a
// real device's own figure is used when serving).
func MacWorkingSet(ramGB int) int64 {
	ram := int64(ramGB) << 30
	if ramGB <= 32 {
		return ram * 2 / 3
	}
	return ram * 3 / 4
}

// gib formats bytes in GiB for the sizing messages.
func gib(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }
