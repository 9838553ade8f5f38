package kernels

import (
	"errors"
	"fmt"
	"math"

	"github.com/lilyformac/lily/engine/quant"
)

// vit.metal's function constant indices, one numbering for the file's kernels: a LayerNorm maps
// rows × d to rows × d (VIT_N, VIT_K = VIT_O = d), vit_erf_probe's count is VIT_N.
const (
	ViTRows       = 0 // uint VIT_N: rows of X and Y
	ViTOutputs    = 1 // uint VIT_O: output features, rows of W
	ViTInputs     = 2 // uint VIT_K: input features (vit_gemm: a multiple of 8)
	ViTEpilogueFC = 3 // uint VIT_EPI: a ViTEpilogue (unset: none)
	ViTNormEps    = 4 // float VIT_EPS: vit_layernorm's epsilon
	ViTWeightF32  = 5 // bool VIT_W_F32: W and the bias float32, not bfloat
)

// vitConstants are the constants every vit.metal dispatch sets.
func vitConstants(rows, out, in int) map[int]any {
	return map[int]any{ViTRows: rows, ViTOutputs: out, ViTInputs: in}
}

// ViTEpilogue is what vit_gemm does with each output v = (X·Wᵀ)[n][o] + bias[o].
type ViTEpilogue int

const (
	EpilogueNone     ViTEpilogue = 0 // Y = v
	EpilogueGELUTanh ViTEpilogue = 1 // Y = GELUTanh(v): the blocks' MLP
	EpilogueGELUErf  ViTEpilogue = 2 // Y = GELUErf(v): the merger
	EpilogueAdd      ViTEpilogue = 3 // Y += v: the residual stream
)

// vit.metal's geometry.
const (
	LayerNormThreads = 256 // vit_layernorm: one threadgroup per row
	ViTGEMMThreads   = 128 // vit_gemm and its tensor form: four simdgroups per tile
	ViTGEMMTile      = 32  // vit_gemm: a tile is 32 rows × 32 outputs
	ErfProbeThreads  = 256 // vit_erf_probe's threadgroups
)

// ViTGEMMTensorTile is vit_gemm_tensor's (vit_tensor.metal) tile: 64 rows × 64 outputs, in steps
// of 64 columns of K (the last zero-padded).
const ViTGEMMTensorTile = 64

// LayerNorm is the Go reference of vit_layernorm for one row: out = (x − mean)·rstd·w + b with
// w and b bfloat bits, as engine/vision's CPU tower computes it — mean and biased variance summed
// in float64, rstd rounded to float32, the normalised value rounded before the gain and shift.
func LayerNorm(out, x []float32, w, b []uint16, eps float32) {
	var sum, sq float64
	for _, v := range x {
		sum += float64(v)
	}
	mean := sum / float64(len(x))
	for _, v := range x {
		d := float64(v) - mean
		sq += d * d
	}
	rstd := float32(1 / math.Sqrt(sq/float64(len(x))+float64(eps)))
	m := float32(mean)
	for i, v := range x {
		out[i] = float32((v-m)*rstd)*quant.BF16ToF32(w[i]) + quant.BF16ToF32(b[i])
	}
}

// LayerNormBuffers are vit_layernorm's buffers, by role.
type LayerNormBuffers[B any] struct {
	X   B // 0: [rows][d] float32
	W   B // 1: [d] bf16 gain
	B   B // 2: [d] bf16 bias
	Out B // 3: [rows][d] float32
}

// LayerNormCall is vit_layernorm over rows rows of d, one threadgroup of threads per row
// (LayerNormThreads in production).
func LayerNormCall[B any](d, rows int, eps float32, threads int, b LayerNormBuffers[B]) Call[B] {
	c := vitConstants(rows, d, d)
	c[ViTNormEps] = eps
	return Call[B]{
		Kernel: "vit_layernorm", Constants: c,
		Buffers:      map[int]B{0: b.X, 1: b.W, 2: b.B, 3: b.Out},
		Threadgroups: grid(rows), Group: grid(threads),
	}
}

// GELUTanh is transformers' gelu_pytorch_tanh in float64, rounded to float32 (engine/vision's).
func GELUTanh(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))))
}

// GELUErf is the exact GELU, x·(1 + erf(x/√2))/2, in float64, rounded to float32 (engine/vision's).
func GELUErf(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Erf(v/math.Sqrt2)))
}

// ViTGEMM is the Go reference of vit_gemm: for each of the rows rows of x ([rows][in]) and each
// of the out rows of w ([out][in], widened to float32), v = Σ_k x·w summed in float64 and rounded
// to float32, plus bias[o] in float32, then epi's activation (or added into y, [rows][out],
// which it writes).
func ViTGEMM(y, x, w, bias []float32, rows, out, in int, epi ViTEpilogue) {
	for n := range rows {
		xr := x[n*in : (n+1)*in]
		for o := range out {
			var s float64
			for k, wv := range w[o*in : (o+1)*in] {
				s += float64(xr[k]) * float64(wv)
			}
			v := float32(s) + bias[o]
			switch epi {
			case EpilogueGELUTanh:
				v = GELUTanh(v)
			case EpilogueGELUErf:
				v = GELUErf(v)
			case EpilogueAdd:
				v += y[n*out+o]
			}
			y[n*out+o] = v
		}
	}
}

// ViTGEMMBuffers are vit_gemm's buffers, by role.
type ViTGEMMBuffers[B any] struct {
	X    B // 0: [rows][in] float32
	W    B // 1: [out][in] bf16, or float32 with f32Weights
	Bias B // 2: [out] bf16, or float32 with f32Weights
	Y    B // 3: [rows][out] float32 (also read with EpilogueAdd)
}

// ViTGEMMCall is vit_gemm: Y = X·Wᵀ + bias through epi, for rows rows of in inputs and out
// outputs, W and the bias float32 with f32Weights (the patch embedding), else bfloat. in must be
// a positive multiple of 8 (the kernel's K steps end on whole 8×8 matrices).
func ViTGEMMCall[B any](rows, out, in int, epi ViTEpilogue, f32Weights bool, b ViTGEMMBuffers[B]) Call[B] {
	if in <= 0 || in%8 != 0 || rows <= 0 || out <= 0 || epi < EpilogueNone || epi > EpilogueAdd {
		panic(fmt.Sprintf("kernels: vit_gemm of %d × %d × %d, epilogue %d (K must be a positive multiple of 8)", rows, out, in, epi))
	}
	c := vitConstants(rows, out, in)
	c[ViTEpilogueFC] = int(epi)
	if f32Weights {
		c[ViTWeightF32] = true
	}
	return Call[B]{
		Kernel: "vit_gemm", Constants: c, Buffers: map[int]B{0: b.X, 1: b.W, 2: b.Bias, 3: b.Y},
		Threadgroups: [3]int{groupsFor(out, ViTGEMMTile), groupsFor(rows, ViTGEMMTile), 1}, Group: grid(ViTGEMMThreads),
	}
}

// ViTGEMMTensorCall is vit_gemm_tensor: ViTGEMMCall's product (bfloat weights) on tensor ops
// (TensorForm), its Go reference ViTGEMM on x rounded to bfloat (BF16Round), as it stages x.
func ViTGEMMTensorCall[B any](rows, out, in int, epi ViTEpilogue, b ViTGEMMBuffers[B]) Call[B] {
	c, _ := TensorForm(ViTGEMMCall(rows, out, in, epi, false, b))
	return c
}

// viTGEMMTensorGrid is vit_gemm_tensor's grid for vit_gemm's constants: (ceil(O / 64),
// ceil(N / 64)) tiles, in vit_gemm's order.
func viTGEMMTensorGrid(c map[int]any) [3]int {
	return [3]int{groupsFor(c[ViTOutputs].(int), ViTGEMMTensorTile), groupsFor(c[ViTRows].(int), ViTGEMMTensorTile), 1}
}

// viTGEMMTensorFits: vit_gemm_tensor runs every shape vit_gemm does, but only with bfloat
// weights. It stages bfloat tiles; float32 ones, the patch embedding's, would have to be rounded,
// losing what folding them in float32 kept, for a GEMM of under 1% of the tower's FLOPs.
func viTGEMMTensorFits(c map[int]any) error {
	if c[ViTWeightF32] == true {
		return errors.New("float32 weights (the folded patch embedding): the tensor form stages bfloat, which would round them")
	}
	return nil
}

// ErfProbeBuffers are vit_erf_probe's buffers.
type ErfProbeBuffers[B any] struct {
	In  B // 0: [n] float32
	Out B // 1: [n] float32, erf of each
}

// ErfProbeCall is vit_erf_probe over n values by groups threadgroups of ErfProbeThreads, each
// thread taking every (groups·ErfProbeThreads)-th value (VIT_O and VIT_K unused, set to 1).
func ErfProbeCall[B any](n, groups int, b ErfProbeBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "vit_erf_probe", Constants: vitConstants(n, 1, 1), Buffers: map[int]B{0: b.In, 1: b.Out},
		Threadgroups: grid(groups), Group: grid(ErfProbeThreads),
	}
}
