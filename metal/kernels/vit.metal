// vit.metal: the vision tower's (ViT's) kernels. Its activations are float32 rows of width D
// (1152 for the model), its weights bfloat [out][in] row-major as the checkpoint has them.
//
//   vit_layernorm  LayerNorm of each row with a bfloat gain and bias (torch's: biased variance).
//   vit_gemm       Y = X·Wᵀ + bias, then an epilogue (none, tanh-GELU, exact-erf GELU, or added
//                  into Y: the residual): the patch embedding, q|k|v, the output projection, the
//                  MLP and the merger's two layers.
//   vit_erf_probe  vit_erf over a buffer of values, so the cases check it against a libm erf
//                  directly rather than through a GELU's cancellation.
#include <metal_stdlib>
using namespace metal;

// The file's constants, shared by its kernels (each dispatch sets those without a default): a
// LayerNorm maps N rows of K = O = D features; vit_erf_probe takes its value count as N.
constant uint VIT_N [[function_constant(0)]];  // rows of X and Y (patches or merged patches)
constant uint VIT_O [[function_constant(1)]];  // output features (rows of W)
constant uint VIT_K [[function_constant(2)]];  // input features (vit_gemm: a multiple of 8)
// vit_gemm's epilogue: 0 (unset) none, 1 tanh-GELU, 2 erf-GELU, 3 added into Y (the residual).
constant uint VIT_EPI_FC [[function_constant(3)]];
constant uint VIT_EPI = is_function_constant_defined(VIT_EPI_FC) ? VIT_EPI_FC : 0u;
// vit_layernorm's epsilon (1e-6 for the model; kernels.LayerNormCall always sets it).
constant float VIT_EPS_FC [[function_constant(4)]];
constant float VIT_EPS = is_function_constant_defined(VIT_EPS_FC) ? VIT_EPS_FC : 0.0f;
// Set: W and the bias are float32, not bfloat (the patch embedding, whose weights are folded in
// float32 at load time).
constant bool VIT_W_F32_FC [[function_constant(5)]];
constant bool VIT_W_F32 = is_function_constant_defined(VIT_W_F32_FC) && VIT_W_F32_FC;

// vit_block_sum is v summed over the threadgroup, returned to every thread: each simdgroup's
// simd_sum, then simdgroup 0 sums those in a fixed tree, so the result does not depend on the
// order the threads run in. partial holds one float per simdgroup and total one; the barrier at
// the start keeps a previous call's readers of total ahead of this call's writer.
inline float vit_block_sum(float v, threadgroup float* partial, threadgroup float* total, uint lane, uint sg,
                           uint nsg) {
  threadgroup_barrier(mem_flags::mem_threadgroup);
  v = simd_sum(v);
  if (lane == 0) {
    partial[sg] = v;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (sg == 0) {
    float t = lane < nsg ? partial[lane] : 0.0f;
    t = simd_sum(t);
    if (lane == 0) {
      *total = t;
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return *total;
}

// vit_layernorm: out[row] = (x[row] − mean) · rsqrt(var + EPS) · w + b, the variance the biased
// one of the row (over D, as torch's LayerNorm), taken in a second pass over x − mean so that a
// large mean costs no precision. One threadgroup per row, any size up to 1024 (256 intended); the
// row is read with a stride of the threadgroup size, so neighbouring threads read neighbouring
// floats. The row is read three times: at D = 1152 it stays in cache.
kernel void vit_layernorm(device const float* x [[buffer(0)]],    // [rows][D]
                          device const bfloat* w [[buffer(1)]],   // [D] gain
                          device const bfloat* b [[buffer(2)]],   // [D] bias
                          device float* out [[buffer(3)]],        // [rows][D]
                          uint row [[threadgroup_position_in_grid]],
                          uint tid [[thread_index_in_threadgroup]],
                          uint ntg [[threads_per_threadgroup]],
                          uint lane [[thread_index_in_simdgroup]],
                          uint sg [[simdgroup_index_in_threadgroup]],
                          uint nsg [[simdgroups_per_threadgroup]]) {
  threadgroup float partial[32];  // one sum per simdgroup
  threadgroup float total;
  const ulong base = ulong(row) * VIT_K;
  float s = 0.0f;
  for (uint i = tid; i < VIT_K; i += ntg) {
    s += x[base + i];
  }
  const float mean = vit_block_sum(s, partial, &total, lane, sg, nsg) / float(VIT_K);
  float ss = 0.0f;
  for (uint i = tid; i < VIT_K; i += ntg) {
    const float d = x[base + i] - mean;
    ss += d * d;
  }
  const float rstd = rsqrt(vit_block_sum(ss, partial, &total, lane, sg, nsg) / float(VIT_K) + VIT_EPS);
  for (uint i = tid; i < VIT_K; i += ntg) {
    out[base + i] = (x[base + i] - mean) * rstd * float(w[i]) + float(b[i]);
  }
}

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

kernel void vit_erf_probe(device const float* in [[buffer(0)]],  // [VIT_N]
                          device float* out [[buffer(1)]],       // [VIT_N] erf of each
                          uint gid [[thread_position_in_grid]],
                          uint threads [[threads_per_grid]]) {
  for (uint i = gid; i < VIT_N; i += threads) {
    out[i] = vit_erf(in[i]);
  }
}

// vit_gemm's tiling: a threadgroup of 4 simdgroups (128 threads) computes a 32 × 32 tile of Y,
// each simdgroup a 16 × 16 quarter as 2 × 2 float 8×8 matrices (qmm.metal's largest tile). Per
// step of 32 along K all 128 threads load the X tile and the W tile, W widened to float, into
// threadgroup memory (rows past N or O as 0; the last step only K's remaining columns, whence K
// a multiple of 8), then each simdgroup multiplies-accumulates in float32. Each output's sum is
// thus one simdgroup's, over k ascending, whatever order the threads run in: deterministic. Y
// goes through threadgroup memory so that an edge tile stores only rows < N and columns < O.
// Grid: (ceil(O / 32), ceil(N / 32)) threadgroups of 128 threads.
#define VIT_TILE 32
#define VIT_THREADS 128
// The tiles' row stride: 32 + 4 floats, so the 8 rows a simdgroup_load reads start in different
// banks of a 32-bank memory (as qmm.metal's tiles); the 4 floats after each row are never used.
#define VIT_LD 36

inline float vit_weight(device const bfloat* w, ulong i) {
  return VIT_W_F32 ? ((device const float*)w)[i] : float(w[i]);
}

// vit_load_tiles fills xs with X's rows n0.. and ws with W's rows o0.., columns k0 .. k0+kn−1.
inline void vit_load_tiles(device const float* x, device const bfloat* w, uint n0, uint o0, uint k0, uint kn, uint tid,
                           threadgroup float* xs, threadgroup float* ws) {
  for (uint i = tid; i < VIT_TILE * VIT_TILE; i += VIT_THREADS) {
    const uint r = i / VIT_TILE, c = i % VIT_TILE;
    if (c < kn) {
      xs[r * VIT_LD + c] = n0 + r < VIT_N ? x[ulong(n0 + r) * VIT_K + k0 + c] : 0.0f;
      ws[r * VIT_LD + c] = o0 + r < VIT_O ? vit_weight(w, ulong(o0 + r) * VIT_K + k0 + c) : 0.0f;
    }
  }
}

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

kernel void vit_gemm(device const float* x [[buffer(0)]],      // [N][K]
                     device const bfloat* w [[buffer(1)]],     // [O][K] (float with VIT_W_F32)
                     device const bfloat* bias [[buffer(2)]],  // [O] (float with VIT_W_F32)
                     device float* y [[buffer(3)]],            // [N][O] (read too when VIT_EPI is 3)
                     uint2 tg [[threadgroup_position_in_grid]],
                     uint tid [[thread_index_in_threadgroup]],
                     uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float xs[1152];  // VIT_TILE·VIT_LD
  threadgroup float ws[1152];
  threadgroup float ys[1024];  // VIT_TILE·VIT_TILE
  const uint n0 = tg.y * VIT_TILE, o0 = tg.x * VIT_TILE;
  const uint sm = (sg / 2) * 16, sn = (sg % 2) * 16;  // this simdgroup's quarter
  simdgroup_float8x8 acc[2][2];
  for (uint i = 0; i < 2; i++) {
    for (uint j = 0; j < 2; j++) {
      acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    }
  }
  for (uint k0 = 0; k0 < VIT_K; k0 += VIT_TILE) {
    const uint kn = min(uint(VIT_TILE), VIT_K - k0);
    vit_load_tiles(x, w, n0, o0, k0, kn, tid, xs, ws);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint kk = 0; kk < kn; kk += 8) {
      simdgroup_float8x8 a[2], b[2];
      for (uint i = 0; i < 2; i++) {
        simdgroup_load(a[i], xs, VIT_LD, ulong2(kk, sm + 8 * i));
        simdgroup_load(b[i], ws, VIT_LD, ulong2(sn + 8 * i, kk), true);  // B[k][o] = W[o][k]
      }
      for (uint i = 0; i < 2; i++) {
        for (uint j = 0; j < 2; j++) {
          simdgroup_multiply_accumulate(acc[i][j], a[i], b[j], acc[i][j]);
        }
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);  // the tiles are read; the next step overwrites them
  }
  for (uint i = 0; i < 2; i++) {
    for (uint j = 0; j < 2; j++) {
      simdgroup_store(acc[i][j], ys, VIT_TILE, ulong2(sn + 8 * j, sm + 8 * i));
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint i = tid; i < VIT_TILE * VIT_TILE; i += VIT_THREADS) {
    const uint r = i / VIT_TILE, c = i % VIT_TILE;
    if (n0 + r < VIT_N && o0 + c < VIT_O) {
      const ulong at = ulong(n0 + r) * VIT_O + o0 + c;
      const float v = ys[i] + (VIT_W_F32 ? ((device const float*)bias)[o0 + c] : float(bias[o0 + c]));
      y[at] = VIT_EPI == 3 ? y[at] + v : vit_epilogue(v);
    }
  }
}
