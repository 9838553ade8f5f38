package kernels_test

import (
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/emu/gen"
	"github.com/lilyformac/lily/metal/kernels"
)

// TestThreadLimitAttributes: every kernel the production plan (decode steps and prefill chunks)
// launches with 1,024-thread threadgroups declares [[max_total_threads_per_threadgroup(1024)]],
// so Metal compiles it to fit the whole threadgroup in registers (without it a register-heavy
// kernel may report a lower maxTotalThreadsPerThreadgroup and the executor refuses the plan), and
// no dispatch asks for more threads than its kernel declares.
func TestThreadLimitAttributes(t *testing.T) {
	declared := map[string]int{}
	for _, f := range kernels.Files() {
		u, err := gen.Translate(kernels.Path(f), kernels.Source(f))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range u.Kernels {
			declared[k.Name] = k.MaxThreads
		}
	}
	s, err := decode.Build(config.Production(), decode.Options{MaxCtx: 4097, Chunks: []int{4096, 512, 64, 8}, ChunkLogits: true})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, d := range s.Plan.Dispatches {
		n := max(d.Group[0], 1) * max(d.Group[1], 1) * max(d.Group[2], 1)
		limit, ok := declared[d.Kernel]
		switch {
		case !ok:
			t.Errorf("%s: in no shipped .metal file", d.Kernel)
		case n == 1024 && limit != 1024 && !seen[d.Kernel]:
			t.Errorf("%s runs 1,024-thread threadgroups but declares max_total_threads_per_threadgroup %d", d.Kernel, limit)
		case limit > 0 && n > limit:
			t.Errorf("%s runs %d-thread threadgroups above its declared %d", d.Kernel, n, limit)
		}
		if n == 1024 {
			seen[d.Kernel] = true
		}
	}
	if len(seen) == 0 {
		t.Fatal("no 1,024-thread dispatch in the production plan")
	}
	t.Logf("1,024-thread kernels: %v", seen)
}
