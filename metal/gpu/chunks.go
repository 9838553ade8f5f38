package gpu

import (
	"slices"
	"time"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/plan"
)

// Prefill chunk sizes. The largest, 4,096 tokens, gives each of the 256 experts about 128 of its
// 32,768 (token, expert) pairs, so the grouped GEMMs' blocks are nearly full (bench --plan
// --prefill: executed FLOPs 1.05× the useful ones under uniform routing, against 1.17× at 512
// and 2.0× at 64, each in the block height that suits it); its activations take about 0.56 GB
// (bfloat between the kernels).
// The smaller sizes take what is left of a prompt after the whole chunks (a follow-up turn of a
// few hundred tokens). The smallest, 8, is bound by reading the weights like a decode step, but
// reads each weight once for 8 tokens (modelled at 2.2× the token-by-token rate on an M4 Max);
// a remainder below it runs token by token.
const (
	ChunkLarge  = 4096
	ChunkMedium = 512
	ChunkSmall  = 64
	ChunkTiny   = 8
)

// Buckets is the chunk sizes beside a largest chunk of n tokens: n, then each of the standard
// sizes below it.
func Buckets(n int) []int {
	if n <= 0 {
		return nil
	}
	out := []int{n}
	for _, s := range []int{ChunkMedium, ChunkSmall, ChunkTiny} {
		if s < n {
			out = append(out, s)
		}
	}
	return out
}

// DefaultChunks is the metal backend's chunk sizes: Buckets(ChunkLarge) where its activations
// leave the context o asks for (or the model's whole context) as it is with ChunkMedium, and
// Buckets(ChunkMedium) otherwise, or when every row's logits are kept (4,096 rows of logits
// take 4 GB).
func DefaultChunks(c *config.Config, o GPUOptions) ([]int, error) {
	if o.ChunkLogits {
		return Buckets(ChunkMedium), nil
	}
	// ctxWith is the context a plan with a largest chunk of n holds (0: none fits, which the
	// caller's own sizing reports).
	ctxWith := func(n int) (int, error) {
		mem, err := decode.MemoryOfChunked(c, o.KVBits, n)
		if err != nil {
			return 0, err
		}
		got, _, err := mem.Context(c, 0, o.WorkingSet)
		if err != nil {
			return 0, nil
		}
		return got, nil
	}
	medium, err := ctxWith(ChunkMedium)
	if err != nil {
		return nil, err
	}
	if o.MaxCtx > 0 {
		medium = min(medium, o.MaxCtx)
	}
	large, err := ctxWith(ChunkLarge)
	if err != nil {
		return nil, err
	}
	if medium == 0 || large < medium {
		return Buckets(ChunkMedium), nil
	}
	return Buckets(ChunkLarge), nil
}

// memoryFor is the device memory of c's plan with o's chunk sizes (DefaultChunks when
// AutoChunks asks for them), and those sizes.
func memoryFor(c *config.Config, o GPUOptions) (decode.Memory, []int, error) {
	chunks := o.Chunks
	if o.AutoChunks && len(chunks) == 0 {
		var err error
		if chunks, err = DefaultChunks(c, o); err != nil {
			return decode.Memory{}, nil, err
		}
	}
	mem, err := decode.MemoryOfChunked(c, o.KVBits, slices.Max(append([]int{0}, chunks...)))
	return mem, chunks, err
}

// SliceTarget is how long a prefill slice may hold up the streams running beside it.
const SliceTarget = 250 * time.Millisecond

// SliceFor is the prompt tokens the engine loop runs per step (runner.Options.PrefillSlice): the
// largest of chunks whose modelled time on chip along route (plan.Chip.Time, bench --plan
// --prefill's model at 100 % of the chip's peaks, so a real slice takes longer) is within
// SliceTarget, else the smallest. With no chip known (the emulator) it is
// ChunkMedium where the plan has it. A request's slices do not depend on what else runs, so
// this is also what a prompt prefilling alone runs.
func SliceFor(c *config.Config, chunks []int, kvBits int, chip *plan.Chip, route plan.Route) int {
	if len(chunks) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(chunks))
	if chip == nil {
		if slices.Contains(sorted, ChunkMedium) {
			return ChunkMedium
		}
		return sorted[0]
	}
	best := sorted[0]
	for _, m := range sorted {
		p, err := decode.PrefillRouteModel(c, m, 0, kvBits, route)
		if err != nil {
			break
		}
		if t, err := chip.Time(p.Work()); err != nil || time.Duration(t*float64(time.Second)) > SliceTarget {
			break
		}
		best = m
	}
	return best
}
