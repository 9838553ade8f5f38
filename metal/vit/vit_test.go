package vit

import (
	"fmt"
	"maps"
	"math"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

// smallVision is a depth-2 tower of the production kernels' constraints (head dim 16).
func smallVision() *config.Vision {
	v := config.ProductionVision()
	v.Depth, v.Hidden, v.Heads, v.Intermediate, v.OutHidden = 2, 64, 4, 128, 96
	v.Side, v.NumPositions = 6, 36
	return v
}

// TestDispatchOrder: a depth-2 tower's dispatches are Encode's operations in its order, each
// GEMM with its epilogue, input, output and weights.
func TestDispatchOrder(t *testing.T) {
	v := smallVision()
	tw, err := Build(v, 4, 6, plan.Simdgroup)
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		kernel string
		epi    kernels.ViTEpilogue
		x, y   int
		weight string
	}
	w := func(name string) string { return Prefix + name + ".weight" }
	want := []step{{"vit_gemm", kernels.EpilogueNone, tw.Pixels, tw.H, w("patch_embed.proj")}, {"vit_pos_embed", 0, tw.H, tw.H, w("pos_embed")}}
	for i := range 2 {
		p := fmt.Sprintf("blocks.%d.", i)
		want = append(want,
			step{"vit_layernorm", 0, tw.H, tw.Norm, w(p + "norm1")},
			step{"vit_gemm", kernels.EpilogueNone, tw.Norm, tw.QKV, w(p + "attn.qkv")},
			step{"vit_attention", 0, tw.QKV, tw.Attn, ""},
			step{"vit_gemm", kernels.EpilogueAdd, tw.Attn, tw.H, w(p + "attn.proj")},
			step{"vit_layernorm", 0, tw.H, tw.Norm, w(p + "norm2")},
			step{"vit_gemm", kernels.EpilogueGELUTanh, tw.Norm, tw.MLP, w(p + "mlp.linear_fc1")},
			step{"vit_gemm", kernels.EpilogueAdd, tw.MLP, tw.H, w(p + "mlp.linear_fc2")})
	}
	want = append(want,
		step{"vit_layernorm", 0, tw.H, tw.Norm, w("merger.norm")},
		step{"vit_gemm", kernels.EpilogueGELUErf, tw.Norm, tw.Merger, w("merger.linear_fc1")},
		step{"vit_gemm", kernels.EpilogueNone, tw.Merger, tw.Out, w("merger.linear_fc2")})
	ds := tw.Plan.Dispatches
	if len(ds) != len(want) {
		t.Fatalf("%d dispatches, want %d", len(ds), len(want))
	}
	for i, s := range want {
		d := ds[i]
		out := 3 // vit_gemm's Y and vit_layernorm's Out
		switch d.Kernel {
		case "vit_attention":
			out = 2
		case "vit_pos_embed":
			out = 0
		}
		if d.Kernel != s.kernel || d.Buffers[0].Buffer != s.x || d.Buffers[out].Buffer != s.y {
			t.Errorf("dispatch %d: %s %d → %d, want %s %d → %d", i, d.Kernel, d.Buffers[0].Buffer, d.Buffers[out].Buffer, s.kernel, s.x, s.y)
		}
		if s.weight != "" && d.Buffers[1].Buffer != tw.Weights[s.weight] {
			t.Errorf("dispatch %d (%s): weight buffer %d, want %s (%d)", i, d.Kernel, d.Buffers[1].Buffer, s.weight, tw.Weights[s.weight])
		}
		if d.Kernel == "vit_gemm" && d.Constants[kernels.ViTEpilogueFC] != int(s.epi) {
			t.Errorf("dispatch %d: epilogue %v, want %d", i, d.Constants[kernels.ViTEpilogueFC], s.epi)
		}
		if f32 := d.Constants[kernels.ViTWeightF32] == true; f32 != (i == 0) {
			t.Errorf("dispatch %d: float32 weights %v", i, f32)
		}
	}
	// The merger's GEMMs run over the merged blocks: a quarter of the rows.
	if got := ds[len(ds)-1].Constants[kernels.ViTRows]; got != 6 {
		t.Errorf("merger fc2 over %v rows, want 6", got)
	}
}

// TestReadsAfterWrites: every buffer a dispatch reads is written by an earlier one or is an
// input the host writes (pixels, host tables) or a weight; every dispatch that reads or writes
// what a dispatch since the last barrier wrote (or writes what one read) has a barrier.
func TestReadsAfterWrites(t *testing.T) {
	tw, err := Build(smallVision(), 4, 6, plan.Simdgroup)
	if err != nil {
		t.Fatal(err)
	}
	inputs := map[int]bool{tw.Pixels: true, tw.InvFreq: true, tw.PosRows: true, tw.PosCols: true}
	written := map[int]bool{}
	var sinceR, sinceW []int // buffers read, written since the last barrier
	for i, d := range tw.Plan.Dispatches {
		for _, r := range d.Reads {
			if !written[r.Buffer] && !inputs[r.Buffer] && tw.Plan.Buffers[r.Buffer].Kind != plan.Weights {
				t.Errorf("dispatch %d (%s) reads %s before anything writes it", i, d.Kernel, tw.Plan.Buffers[r.Buffer].Name)
			}
		}
		if !d.Barrier {
			for _, r := range d.Reads {
				if contains(sinceW, r.Buffer) {
					t.Errorf("dispatch %d (%s) reads %s, written since the last barrier, without one", i, d.Kernel, tw.Plan.Buffers[r.Buffer].Name)
				}
			}
			for _, r := range d.Writes {
				if contains(sinceW, r.Buffer) || contains(sinceR, r.Buffer) {
					t.Errorf("dispatch %d (%s) writes %s, used since the last barrier, without one", i, d.Kernel, tw.Plan.Buffers[r.Buffer].Name)
				}
			}
		} else {
			sinceR, sinceW = nil, nil
		}
		for _, r := range d.Reads {
			sinceR = append(sinceR, r.Buffer)
		}
		for _, r := range d.Writes {
			written[r.Buffer] = true
			sinceW = append(sinceW, r.Buffer)
		}
	}
	if !written[tw.Out] {
		t.Error("nothing writes the output rows")
	}
}

func contains(s []int, x int) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// TestProductionFLOPs: at a 1024×768 image's grid (48×64 patches) the production tower's ideal
// FLOPs are the formula's, and its executed FLOPs (whole tiles) at most 1.15× them.
func TestProductionFLOPs(t *testing.T) {
	v := config.ProductionVision()
	tw, err := Build(v, 48, 64, plan.Simdgroup)
	if err != nil {
		t.Fatal(err)
	}
	c := tw.Cost()
	N, D, F, M := 3072.0, 1152.0, 4304.0, 4608.0
	gemm := func(n, o, k float64) float64 { return 2 * n * o * k }
	block := gemm(N, 3*D, D) + gemm(N, D, D) + gemm(N, F, D) + gemm(N, D, F) + 4*N*N*72*16
	ideal := gemm(N, D, 768) + 27*block + gemm(N/4, M, M) + gemm(N/4, 2048, M)
	if c.IdealFLOPs != ideal {
		t.Errorf("ideal FLOPs %.6g, want %.6g", c.IdealFLOPs, ideal)
	}
	ratio := c.FLOPs / c.IdealFLOPs
	t.Logf("patches %d tokens %d FLOPs %.4g ideal %.4g ratio %.4f bytes %d ideal %d", c.Patches, c.Tokens, c.FLOPs, c.IdealFLOPs, ratio, c.Bytes, c.IdealBytes)
	if ratio < 1 || ratio > 1.15 {
		t.Errorf("FLOPs %.4g are %.4f× ideal, want within [1, 1.15]", c.FLOPs, ratio)
	}
	if c.Patches != 3072 || c.Tokens != 768 {
		t.Errorf("%d patches, %d tokens, want 3072, 768", c.Patches, c.Tokens)
	}
	// The ideal traffic: the weights as stored (bf16, the patch weight and bias float32), the
	// pixels in and the output rows out.
	weights := 27*(2*(3*D*D+3*D+D*D+D+F*D+F+D*F+D)+2*4*D) + 4*(D*768+D) + 2*2304*D + 2*2*D + 2*(M*M+M+2048*M+2048)
	if want := int64(weights + 4*N*768 + 4*N/4*2048); c.IdealBytes != want {
		t.Errorf("ideal bytes %d, want %d", c.IdealBytes, want)
	}
	if c.Bytes < c.IdealBytes {
		t.Errorf("modelled bytes %d below the ideal %d", c.Bytes, c.IdealBytes)
	}
}

// TestAttentionPadding: over a grid whose patches are not a multiple of the tiles, attention's
// FLOPs count whole query blocks and key tiles.
func TestAttentionPadding(t *testing.T) {
	v := smallVision()
	tw, err := Build(v, 2, 10, plan.Simdgroup) // 20 patches: one tile of 32 queries and 32 keys
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range tw.Plan.Dispatches {
		if d.Kernel != "vit_attention" {
			continue
		}
		if want := 4.0 * 32 * 32 * 64; d.FLOPs != want {
			t.Errorf("attention FLOPs %g, want %g", d.FLOPs, want)
		}
		if want := 4.0 * 20 * 20 * 64; d.IdealFLOPs != want {
			t.Errorf("attention ideal FLOPs %g, want %g", d.IdealFLOPs, want)
		}
	}
}

// TestCheck: grids and towers the kernels cannot run are refused before any dispatch is made.
func TestCheck(t *testing.T) {
	v := smallVision()
	for _, g := range [][2]int{{3, 4}, {0, 4}, {4, 5}} {
		if _, err := Build(v, g[0], g[1], plan.Simdgroup); err == nil {
			t.Errorf("grid %v: built", g)
		}
	}
	odd := smallVision()
	odd.Heads = 8 // head dim 8: runs
	if _, err := Build(odd, 4, 4, plan.Simdgroup); err != nil {
		t.Errorf("head dim 8: %v", err)
	}
	odd.Heads = 16 // head dim 4
	if _, err := Build(odd, 4, 4, plan.Simdgroup); err == nil {
		t.Error("head dim 4: built")
	}
}

// TestNoSquareBuffer: at 8,160 patches (1920×1080 resized to 1920×1088: 68×120 patches, 2,040 tokens) the production tower's
// plan holds no buffer of patches² values: attention streams its keys, so its memory grows with
// N, not N² (a score matrix would be 8,160² × 4 bytes, 266 MB, per head). Its largest buffer is
// the MLP's [N][4304] rows, and threadgroup memory does not depend on N.
func TestNoSquareBuffer(t *testing.T) {
	v := config.ProductionVision()
	small, err := Build(v, 8, 6, plan.Simdgroup)
	if err != nil {
		t.Fatal(err)
	}
	tw, err := Build(v, 68, 120, plan.Simdgroup)
	if err != nil {
		t.Fatal(err)
	}
	n := int64(tw.N)
	if n != 8160 {
		t.Fatalf("%d patches", n)
	}
	var largest plan.Buffer
	for _, b := range tw.Plan.Buffers {
		if b.Size >= 4*n*n {
			t.Errorf("buffer %s of %d bytes: N² floats (%d bytes) or more", b.Name, b.Size, 4*n*n)
		}
		if b.Kind != plan.Weights && b.Size > largest.Size {
			largest = b
		}
	}
	if want := 4 * n * int64(v.Intermediate); largest.Size != want {
		t.Errorf("largest activation %s of %d bytes, want the MLP's %d", largest.Name, largest.Size, want)
	}
	tgMem := func(p *plan.Plan) map[string]int {
		out := map[string]int{}
		for _, d := range p.Dispatches {
			for _, m := range d.ThreadgroupMem {
				out[d.Kernel] = max(out[d.Kernel], m)
			}
		}
		return out
	}
	if a, b := tgMem(small.Plan), tgMem(tw.Plan); !maps.Equal(a, b) {
		t.Errorf("threadgroup memory depends on the grid: %v at 48 patches, %v at 8,160", a, b)
	}
}

// TestTensorRoute: at a 1024×768 image's grid (48×64 patches) the tensor route's plan is the
// simdgroup route's dispatch for dispatch — buffers, constants, barriers, traffic, useful FLOPs —
// but for its GEMMs, each vit_gemm_tensor with its FLOPs on tensor ops (in whole 64×64 tiles and
// 64-column K steps), except the patch embedding, whose float32 weights keep vit_gemm and say
// why. An M5 Max times it faster than the simdgroup route; an M4 Max, without neural
// accelerators, cannot time it.
func TestTensorRoute(t *testing.T) {
	v := config.ProductionVision()
	simd, err := Build(v, 48, 64, plan.Simdgroup)
	if err != nil {
		t.Fatal(err)
	}
	tensor, err := Build(v, 48, 64, plan.Tensor)
	if err != nil {
		t.Fatal(err)
	}
	ds, ss := tensor.Plan.Dispatches, simd.Plan.Dispatches
	if len(ds) != len(ss) {
		t.Fatalf("%d dispatches on the tensor route, %d on the simdgroup one", len(ds), len(ss))
	}
	rest := 0.0 // the simdgroup FLOPs the tensor route keeps
	for i, d := range ds {
		s := ss[i]
		want := s.Kernel
		if want == "vit_gemm" && i > 0 {
			want = "vit_gemm_tensor"
		}
		if d.Kernel != want || d.Tensor != (want == "vit_gemm_tensor") || (d.Fallback != "") != (i == 0) {
			t.Errorf("dispatch %d: %s (tensor %v, fallback %q), want %s", i, d.Kernel, d.Tensor, d.Fallback, want)
		}
		if d.Barrier != s.Barrier || !maps.Equal(d.Buffers, s.Buffers) || !maps.Equal(d.Constants, s.Constants) || d.Bytes() != s.Bytes() || d.IdealFLOPs != s.IdealFLOPs {
			t.Errorf("dispatch %d (%s) differs from the simdgroup route's beyond its kernel", i, d.Kernel)
		}
		if !d.Tensor {
			rest += s.FLOPs
		}
	}
	c, sc := tensor.Cost(), simd.Cost()
	N, D, F, M := 3072.0, 1152.0, 4304.0, 4608.0
	p64 := func(x float64) float64 { return math.Ceil(x/64) * 64 }
	gemm := func(n, o, k float64) float64 { return 2 * p64(n) * p64(o) * p64(k) }
	want := 27*(gemm(N, 3*D, D)+gemm(N, D, D)+gemm(N, F, D)+gemm(N, D, F)) + gemm(N/4, M, M) + gemm(N/4, 2048, M)
	if c.TensorFLOPs != want || c.FLOPs != want+rest || c.Route != plan.Tensor {
		t.Errorf("tensor route: %.6g FLOPs, %.6g on tensor ops, want %.6g and %.6g", c.FLOPs, c.TensorFLOPs, want+rest, want)
	}
	if c.IdealFLOPs != sc.IdealFLOPs || c.Bytes != sc.Bytes || c.IdealBytes != sc.IdealBytes || sc.TensorFLOPs != 0 || len(sc.Fallbacks) != 0 {
		t.Errorf("tensor route %+v, simdgroup %+v", c, sc)
	}
	if r := c.FLOPs / c.IdealFLOPs; r < 1 || r > 1.15 {
		t.Errorf("tensor route: FLOPs %.4f× ideal", r)
	}
	if len(c.Fallbacks) != 1 || !strings.HasPrefix(c.Fallbacks[0], "vit_gemm ×1: float32 weights") {
		t.Errorf("fallbacks %q, want the patch embedding's", c.Fallbacks)
	}
	m4, _ := plan.ChipNamed("M4 Max")
	m5, _ := plan.ChipNamed("M5 Max")
	if _, err := m4.Time(c.Work()); err == nil {
		t.Error("M4 Max timed tensor-op FLOPs")
	}
	fast, err := m5.Time(c.Work())
	slow, _ := m5.Time(sc.Work())
	if err != nil || fast >= slow {
		t.Errorf("M5 Max: tensor route %g s (%v), simdgroup %g s", fast, err, slow)
	}
	t.Logf("48×64 patches: tensor route %.4g FLOPs (%.4f× ideal, %.4g on tensor ops), M5 Max %.4f s against %.4f s on simdgroup matrices", c.FLOPs, c.FLOPs/c.IdealFLOPs, c.TensorFLOPs, fast, slow)
}
