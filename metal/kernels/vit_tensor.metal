// vit_tensor.metal: vit_gemm (vit.metal: Y = X·Wᵀ + bias, then an epilogue — none, tanh-GELU,
// exact-erf GELU, or added into Y) on Metal 4 tensor ops, which run on M5's neural accelerators:
// vit_gemm_tensor, with vit_gemm's buffers, constants and epilogues, bfloat weights only, its own
// grid. Compiled only where the device and OS have tensor ops (MSL 4.0 with __HAVE_TENSOR__);
// elsewhere the file is empty and vit_gemm runs.
//
// Per step of VT_BK (64) columns of K the threadgroup's 128 threads stage the X tile rounded to
// bfloat and the W tile (bfloat, as stored: exact) in threadgroup memory, zero past N, O and K
// (so K need only be a multiple of 4, the staging's vector width; vit_gemm's 8 is one), then run
// acc += X̃·Wᵀ on the tensor ops into a float cooperative tensor (multiply_accumulate, acc zeroed
// first). The products of two bfloat values are exact in float, so the only rounding beyond
// vit_gemm's float32 sums is X's to bfloat: the form's Go reference is vit_gemm's on X rounded
// to bfloat. Each output then gets its bias and the epilogue and is stored by the thread holding
// it; acc is reached only through get_capacity, is_valid_element, get_multidimensional_index and
// element access, never through a lane layout.
//
// Float32 weights (VIT_W_F32: the folded patch embedding) have no form here: they would have to
// be rounded to bfloat, losing the fold's precision, or staged as float at twice the memory, for
// one GEMM of under 1% of the tower's FLOPs. kernels.TensorFits refuses them and the tower keeps
// vit_gemm there.
//
// Geometry: (ceil(O / 64), ceil(N / 64)) threadgroups of 4 simdgroups (execution_simdgroups<4>),
// each a 64 × 64 tile of Y. Threadgroup memory: two 64 × 64 bfloat tiles, 16 KiB.
#include <metal_stdlib>
using namespace metal;

#if defined(__HAVE_TENSOR__) && __METAL_VERSION__ >= 400
#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>
using namespace mpp::tensor_ops;

// vit.metal's constants, by the same indices (kernels.ViTRows …): VIT_W_F32 (5) is never set
// for this form.
constant uint VIT_N [[function_constant(0)]];  // rows of X and Y
constant uint VIT_O [[function_constant(1)]];  // output features (rows of W)
constant uint VIT_K [[function_constant(2)]];  // input features, a multiple of 8
// The epilogue: 0 (unset) none, 1 tanh-GELU, 2 erf-GELU, 3 added into Y (the residual).
constant uint VIT_EPI_FC [[function_constant(3)]];
constant uint VIT_EPI = is_function_constant_defined(VIT_EPI_FC) ? VIT_EPI_FC : 0u;

// The epilogue's functions below are vit.metal's, copied: the kernel files share no header
// (each compiles alone), and the tensor form must round and activate exactly as vit_gemm does.
// kernels' TestViTTensorEpilogue checks the copy is verbatim.

// The erf below follows fdlibm's s_erff.c, whose notice is kept here as its licence asks:
//
//   Copyright (C) 1993 by Sun Microsystems, Inc. All rights reserved.
//
//   Developed at SunPro, a Sun Microsystems, Inc. business.
//   Permission to use, copy, modify, and distribute this
//   software is freely granted, provided that this notice
//   is preserved.
//
//   Conversion to float by Ian Lance Taylor, Cygnus Support, ian@cygnus.com.
//
// vit_erf is erf(x) in float32, within about an ulp: fdlibm's erff method and coefficients
// (Sun Microsystems' fdlibm, 1993, freely distributable with that notice; the float conversion is
// Ian Lance Taylor's, Cygnus Support). Rational approximations on |x| < 0.84375 (erf(x) = x +
// x·P/Q of x²), on [0.84375, 1.25) (erf(1)'s leading bits + P/Q of |x| − 1), and on [1.25, 6)
// through erfc: erfc(x) = exp(−x² − 0.5625 + R/S of 1/x²)/x, where x² is split as z² plus
// (z − x)(z + x) with z x's leading 12 bits, so z² is exact and the exponent loses nothing to
// cancellation; beyond 6, erf is ±1 in float32. Metal has no erf, and the Abramowitz–Stegun
// forms are good to 1e-7 only in absolute terms. The file is compiled with relaxed math, so the
// divisions and exponentials are the precise ones.
inline float vit_erf(float x) {
  const float a = fabs(x);
  if (a < 0.84375f) {
    const float z = x * x;
    const float p = 1.2837916613e-01f +
                    z * (-3.2504209876e-01f + z * (-2.8481749818e-02f + z * (-5.7702702470e-03f + z * -2.3763017452e-05f)));
    const float q = 1.0f + z * (3.9791721106e-01f + z * (6.5022252500e-02f + z * (5.0813062117e-03f +
                                                                                   z * (1.3249473704e-04f + z * -3.9602282413e-06f))));
    return x + x * precise::divide(p, q);
  }
  float r;
  if (a < 1.25f) {
    const float s = a - 1.0f;
    const float p = -2.3621185683e-03f +
                    s * (4.1485610604e-01f + s * (-3.7220788002e-01f + s * (3.1834661961e-01f +
                                                                            s * (-1.1089469492e-01f + s * (3.5478305072e-02f + s * -2.1663755178e-03f)))));
    const float q = 1.0f + s * (1.0642088205e-01f + s * (5.4039794207e-01f + s * (7.1828655899e-02f +
                                                                                  s * (1.2617121637e-01f + s * (1.3637083583e-02f + s * 1.1984500103e-02f)))));
    r = 8.4506291151e-01f + precise::divide(p, q);
  } else if (a < 6.0f) {
    const float s = precise::divide(1.0f, a * a);
    float p, q;
    if (a < 2.857142857f) {  // 1/0.35
      p = -9.8649440333e-03f +
          s * (-6.9385856390e-01f + s * (-1.0558626175e+01f + s * (-6.2375331879e+01f +
                                                                   s * (-1.6239666748e+02f + s * (-1.8460508728e+02f + s * (-8.1287437439e+01f + s * -9.8143291473e+00f))))));
      q = 1.0f + s * (1.9651271820e+01f + s * (1.3765776062e+02f + s * (4.3456588745e+02f + s * (6.4538726807e+02f +
                                                                                                  s * (4.2900814819e+02f + s * (1.0863500214e+02f + s * (6.5702495575e+00f + s * -6.0424413532e-02f)))))));
    } else {
      p = -9.8649431020e-03f +
          s * (-7.9928326607e-01f + s * (-1.7757955551e+01f + s * (-1.6063638306e+02f +
                                                                   s * (-6.3756646729e+02f + s * (-1.0250950928e+03f + s * -4.8351919556e+02f)))));
      q = 1.0f + s * (3.0338060379e+01f + s * (3.2579251099e+02f + s * (1.5367296143e+03f + s * (3.1998581543e+03f +
                                                                                                  s * (2.5530502930e+03f + s * (4.7452853394e+02f + s * -2.2440952301e+01f))))));
    }
    const float z = as_type<float>(as_type<uint>(a) & 0xfffff000u);
    const float e = precise::exp(-z * z - 0.5625f) * precise::exp((z - a) * (z + a) + precise::divide(p, q));
    r = 1.0f - precise::divide(e, a);
  } else {
    r = a == a ? 1.0f : a;  // a NaN stays NaN
  }
  return copysign(r, x);
}

// vit_gelu_tanh is transformers' gelu_pytorch_tanh (the blocks' MLP activation).
inline float vit_gelu_tanh(float x) {
  return 0.5f * x * (1.0f + precise::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
}

// vit_gelu_erf is the exact GELU (the merger's activation): x·Φ(x) = x·(1 + erf(x/√2))/2.
inline float vit_gelu_erf(float x) { return 0.5f * x * (1.0f + vit_erf(x * 0.7071067812f)); }

// vit_epilogue is the output v = (X·Wᵀ)[n][o] + bias[o] after the constant's activation.
inline float vit_epilogue(float v) {
  if (VIT_EPI == 1) {
    return vit_gelu_tanh(v);
  }
  if (VIT_EPI == 2) {
    return vit_gelu_erf(v);
  }
  return v;
}

#define VT_TILE 64  // rows and outputs a threadgroup computes
#define VT_BK 64    // columns of K a step
#define VT_THREADS 128

typedef tensor<threadgroup bfloat, dextents<int32_t, 2>, tensor_inline> vt_tile;

// vt_op is acc += X̃ (VT_TILE × VT_BK) · Wᵀ, W's tile given as VT_TILE × VT_BK (transposed on the
// right), run by the threadgroup's 4 simdgroups together.
using vt_op = matmul2d<matmul2d_descriptor(VT_TILE, VT_TILE, VT_BK, false, true, false,
                                           matmul2d_descriptor::mode::multiply_accumulate),
                       execution_simdgroups<4>>;

// vt_mem is a threadgroup's staging memory: the X and the W tile, VT_TILE × VT_BK bfloat each.
struct vt_mem {
  bfloat xs[VT_TILE * VT_BK];
  bfloat ws[VT_TILE * VT_BK];
};

inline float4 vt_load4(device const float* p) { return *(device const float4*)p; }
inline float4 vt_load4(device const bfloat* p) { return float4(*(device const bfloat4*)p); }

// vt_stage writes rows r0 .. r0+63 of src ([.][VIT_K]), columns k0 .. k0+63, into t as bfloat:
// rows at or past lim and columns at or past VIT_K as 0. Four columns a thread a turn: with VIT_K
// a multiple of 4 a group of four lies wholly inside K or wholly past it, and its load is aligned
// (16 bytes of float, 8 of bfloat; the buffers start 16-byte aligned).
template <typename T>
inline void vt_stage(device const T* src, uint r0, uint lim, uint k0, uint tid, threadgroup bfloat* t) {
  for (uint i = tid; i < VT_TILE * VT_BK / 4; i += VT_THREADS) {
    const uint r = i / (VT_BK / 4), c = (i % (VT_BK / 4)) * 4;
    float4 v = float4(0.0f);
    if (r0 + r < lim && k0 + c < VIT_K) {
      v = vt_load4(src + ulong(r0 + r) * VIT_K + k0 + c);
    }
    *(threadgroup bfloat4*)(t + r * VT_BK + c) = bfloat4(v);
  }
}

kernel void vit_gemm_tensor(device const float* x [[buffer(0)]],      // [N][K]
                            device const bfloat* w [[buffer(1)]],     // [O][K]
                            device const bfloat* bias [[buffer(2)]],  // [O]
                            device float* y [[buffer(3)]],            // [N][O] (read too when VIT_EPI is 3)
                            uint2 tg [[threadgroup_position_in_grid]],
                            uint tid [[thread_index_in_threadgroup]]) {
  threadgroup vt_mem t;
  const uint n0 = tg.y * VT_TILE, o0 = tg.x * VT_TILE;
  vt_tile tx(t.xs, dextents<int32_t, 2>(VT_BK, VT_TILE));
  vt_tile tw(t.ws, dextents<int32_t, 2>(VT_BK, VT_TILE));
  vt_op op;
  auto acc = op.get_destination_cooperative_tensor<vt_tile, vt_tile, float>();
  for (uint16_t i = 0; i < acc.get_capacity(); i++) {
    if (acc.is_valid_element(i)) {
      acc[i] = 0.0f;
    }
  }
  for (uint k0 = 0; k0 < VIT_K; k0 += VT_BK) {
    vt_stage(x, n0, VIT_N, k0, tid, t.xs);
    vt_stage(w, o0, VIT_O, k0, tid, t.ws);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    op.run(tx, tw, acc);
    threadgroup_barrier(mem_flags::mem_threadgroup);  // the tiles are read; the next step overwrites them
  }
  for (uint16_t i = 0; i < acc.get_capacity(); i++) {
    if (acc.is_valid_element(i)) {
      const auto ix = acc.get_multidimensional_index(i);  // ix[0]: output (column), ix[1]: row
      const uint r = n0 + uint(ix[1]), o = o0 + uint(ix[0]);
      if (r < VIT_N && o < VIT_O) {
        const ulong at = ulong(r) * VIT_O + o;
        const float v = acc[i] + float(bias[o]);
        y[at] = VIT_EPI == 3 ? y[at] + v : vit_epilogue(v);
      }
    }
  }
}
#endif
