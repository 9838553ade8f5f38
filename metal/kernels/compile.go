package kernels

import (
	"fmt"
	"strings"

	"github.com/lilyformac/lily/metal/mtl"
)

// MSLVersion is the Metal Shading Language version every kernel file is compiled with: the floor
// the sources need, bfloat being the newest feature they use (MSL 3.1, macOS 14). It is pinned so
// that the OS's default version, which moves with each macOS, cannot change what they mean.
const MSLVersion = mtl.LanguageVersion3_1

// mathModes is how far Metal may optimise each file's floating point. The emulator computes IEEE
// with libm whatever is set here; metal/selftest's tolerances cover the Relaxed files. No file is
// Fast: its finite-math assumptions would fold away the NaN tests and the ±inf handling the
// kernels rely on.
var mathModes = map[string]mtl.MathMode{
	// Safe (IEEE arithmetic, precise exp): moe_router's softmax and top-k compare probabilities,
	// and a fast exp or a reassociated sum can swap two close experts against the goldens and
	// engine/cpu — after which everything downstream differs. moe_gate_up's SiLU pays for sharing
	// the file (a few exp per row of a memory-bound GEMV).
	"moe.metal": mtl.MathSafe,
	// Safe: the sampler must choose engine/sample's token bit for bit. It decides in integers
	// (soft float), which fast math cannot touch; Safe costs nothing there and keeps any float
	// code that remains IEEE.
	"sample.metal": mtl.MathSafe,
	// Safe: argmax compares logits as ordered bit patterns and maps NaN to the lowest key; there is
	// no arithmetic that fast math would speed up.
	"argmax.metal": mtl.MathSafe,

	// Relaxed, Apple silicon's default (reassociation, FMA contraction, fast exp/rsqrt/sin/cos;
	// Inf and NaN honoured): the GEMVs, norms, conv, DeltaNet and attention are compared with
	// tolerances (metal/selftest documents each margin), and attention uses finite sentinels.
	// Safe would cost the FMAs and the fast transcendentals for accuracy no check asks for; the
	// price of Relaxed is that their results are not bit-identical to the emulator's.
	"qmv.metal":          mtl.MathRelaxed,
	"qmm.metal":          mtl.MathRelaxed,
	"qmm_tensor.metal":   mtl.MathRelaxed,
	"rmsnorm.metal":      mtl.MathRelaxed,
	"embed.metal":        mtl.MathRelaxed,
	"conv.metal":         mtl.MathRelaxed,
	"gdn.metal":          mtl.MathRelaxed,
	"attn_rope.metal":    mtl.MathRelaxed, // the rotation angles use metal::precise sin and cos
	"attn_decode.metal":  mtl.MathRelaxed,
	"attn_prefill.metal": mtl.MathRelaxed,
	// Relaxed like the other GEMMs and norms; vit_erf and the GELUs call the precise exp, tanh
	// and divide themselves, which their accuracy needs.
	"vit.metal": mtl.MathRelaxed,
	// Relaxed as vit.metal, whose epilogue it copies (the precise exp, tanh and divide).
	"vit_tensor.metal": mtl.MathRelaxed,
	// Relaxed like attn_prefill: its bfloat tolerance is far above fast exp's error.
	"attn_prefill_tensor.metal": mtl.MathRelaxed,
	// Relaxed like attn_prefill: the rotary's angles use metal::precise sin and cos, the rest is
	// checked with tolerances (cases/vit_attn.go).
	"vit_attn.metal": mtl.MathRelaxed,
}

// TensorFile reports whether name is a file of Metal 4 tensor-op kernels (`mpp::tensor_ops`):
// one that includes <metal_tensor>, as the emulator's generator decides too. Such a file is
// compiled at MSL 4.0, and only on a device and OS that run it (mtl.TensorOps); its instances
// exist nowhere else.
func TensorFile(name string) bool { return strings.Contains(Source(name), "#include <metal_tensor>") }

// CompileOptions is how Metal compiles the kernel file name: MSLVersion (MSL 4.0 for a
// TensorFile) and the file's math mode. A file without a chosen math mode is an error, so a new
// kernel file gets one on purpose.
func CompileOptions(name string) (mtl.CompileOptions, error) {
	m, ok := mathModes[name]
	if !ok {
		return mtl.CompileOptions{}, fmt.Errorf("kernels: %s has no math mode (choose one in metal/kernels/compile.go)", name)
	}
	v := MSLVersion
	if TensorFile(name) {
		v = mtl.LanguageVersion4_0
	}
	return mtl.CompileOptions{LanguageVersion: v, Math: m}, nil
}
