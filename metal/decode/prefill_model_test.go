package decode

import (
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

// TestExpectedExperts: one token touches its K experts, a long chunk all E, and the count grows
// with the chunk.
func TestExpectedExperts(t *testing.T) {
	c := config.Production()
	ms := kernels.MoEShape{E: c.NumExperts, K: c.TopK}
	if got := ms.ExpectedExperts(1); got != c.TopK {
		t.Errorf("1 token: %d experts, want %d", got, c.TopK)
	}
	if got := ms.ExpectedExperts(4096); got != c.NumExperts {
		t.Errorf("4,096 tokens: %d experts, want %d", got, c.NumExperts)
	}
	prev := 0
	for _, m := range []int{1, 2, 8, 16, 64, 128, 512} {
		got := ms.ExpectedExperts(m)
		if got < prev || got > min(c.NumExperts, m*c.TopK) {
			t.Errorf("%d tokens: %d experts (after %d; at most %d)", m, got, prev, min(c.NumExperts, m*c.TopK))
		}
		prev = got
	}
}

// TestPrefillModelSmallChunks: a small chunk's modelled traffic counts the experts it touches,
// not all of them, so it lies between one token's and a full chunk's; the expert weights of a
// full chunk are read once.
func TestPrefillModelSmallChunks(t *testing.T) {
	c := config.Production()
	big, err := PrefillModel(c, 4096, 128, 16)
	if err != nil {
		t.Fatal(err)
	}
	small, err := PrefillModel(c, 8, 128, 16)
	if err != nil {
		t.Fatal(err)
	}
	if !(small.IdealBytes < big.IdealBytes/2) {
		t.Errorf("ideal bytes: a chunk of 8 %d, of 4,096 %d", small.IdealBytes, big.IdealBytes)
	}
	if r := big.FLOPs / big.IdealFLOPs; r > 1.10 { // the bound
		t.Errorf("4,096 tokens: executed FLOPs %.4f× the useful ones", r)
	}
	if small.Bytes < small.IdealBytes || big.Bytes < big.IdealBytes {
		t.Errorf("bytes below ideal: %d < %d or %d < %d", small.Bytes, small.IdealBytes, big.Bytes, big.IdealBytes)
	}
}

// TestPrefillRouteForms: on the tensor route every chunk dispatch of a kernel with a tensor-op
// form (TensorKernels) runs that form and declares its FLOPs tensor FLOPs, and nothing else
// changes: the decode step's kernels, the dispatch count, the bytes; the executed FLOPs differ
// only by the forms' tiles, and stay within the bound at 4,096 tokens. Only a chip with
// neural accelerators can time the chunk, and an M5 Max times it faster than the simdgroup route.
func TestPrefillRouteForms(t *testing.T) {
	c := config.Production()
	s, err := Build(c, Options{MaxCtx: 4096 + 129, Chunks: []int{4096}, PrefillRoute: plan.Tensor})
	if err != nil {
		t.Fatal(err)
	}
	forms := TensorKernels()
	for _, d := range s.Plan.Dispatches {
		chunk := d.RunsIn(ChunkModes(4096).Run) && len(d.Modes) > 0
		tensor := strings.HasSuffix(d.Kernel, "_tensor")
		if d.Tensor != tensor || tensor && !chunk || chunk && slices.Contains(forms, d.Kernel) {
			t.Fatalf("%s in %v: tensor %v", d.Kernel, d.Modes, d.Tensor)
		}
	}
	simd, err := PrefillModel(c, 4096, 128, 16)
	if err != nil {
		t.Fatal(err)
	}
	tensor, err := PrefillRouteModel(c, 4096, 128, 16, plan.Tensor)
	if err != nil {
		t.Fatal(err)
	}
	if simd.TensorFLOPs != 0 || !(tensor.TensorFLOPs > 0.9*tensor.FLOPs && tensor.TensorFLOPs < tensor.FLOPs) || tensor.Bytes != simd.Bytes ||
		tensor.Dispatches != simd.Dispatches || tensor.IdealFLOPs != simd.IdealFLOPs || tensor.IdealBytes != simd.IdealBytes || tensor.FLOPs/tensor.IdealFLOPs > 1.10 {
		t.Fatalf("simdgroup %+v, tensor %+v", simd, tensor)
	}
	m4, _ := plan.ChipNamed("M4 Max")
	m5, _ := plan.ChipNamed("M5 Max")
	if _, err := tensor.TokS(m4); err == nil {
		t.Error("M4 Max timed tensor-op FLOPs")
	}
	fast, err := tensor.TokS(m5)
	if slow, _ := simd.TokS(m5); err != nil || fast <= slow {
		t.Errorf("M5 Max: tensor route %g tok/s (%v), simdgroup %g", fast, err, slow)
	}
	t.Logf("4,096 after 128 on M5 Max: tensor route %.0f tok/s (%.3g of %.3g FLOPs on tensor ops, %.4f× ideal), simdgroup %.0f", fast, tensor.TensorFLOPs, tensor.FLOPs, tensor.FLOPs/tensor.IdealFLOPs, func() float64 { v, _ := simd.TokS(m5); return v }())
}

// TestPrefillActivationsBF16: with the activations between the chunk's kernels bfloat and the
// conv folded into gdn_chunk, a 4,096-token chunk after 128 cached moves at most 3.0× its ideal
// bytes on either route (float32 activations and a separate conv moved 5.0×), the activations
// halved against their float32 size; the residual stream and the router's outputs stay float32.
func TestPrefillActivationsBF16(t *testing.T) {
	c := config.Production()
	for _, route := range []plan.Route{plan.Simdgroup, plan.Tensor} {
		p, err := PrefillRouteModel(c, 4096, 128, 16, route)
		if err != nil {
			t.Fatal(err)
		}
		if r := float64(p.Bytes) / float64(p.IdealBytes); r > 3.0 {
			t.Errorf("%s: %.4f× the ideal bytes at 4,096 after 128", route, r)
		}
		t.Logf("%s: %.4f× the ideal bytes, %.4f× the useful FLOPs", route, float64(p.Bytes)/float64(p.IdealBytes), p.FLOPs/p.IdealFLOPs)
	}
	s, err := Build(c, Options{MaxCtx: 64, Chunks: []int{32}})
	if err != nil {
		t.Fatal(err)
	}
	size := map[string]int64{}
	for _, b := range s.Plan.Buffers {
		size[b.Name] = b.Size
	}
	H, E, K := int64(c.HiddenSize), int64(c.NumExperts), int64(c.TopK)
	for name, row := range map[string]int64{"chunk.xn": 2 * H, "chunk.o": 2 * H, "chunk.moe.y": 2 * K * H, "chunk.res": 4 * H, "chunk.moe.logits": 4 * E} {
		if size[name] != 32*row {
			t.Errorf("%s: %d bytes for 32 rows, want %d", name, size[name], 32*row)
		}
	}
	if _, ok := size["chunk.gdn.u"]; ok {
		t.Error("the conv's output has a buffer: it should stay inside gdn_chunk")
	}
}
