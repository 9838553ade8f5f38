// qmm.metal: Y = X·Wᵀ for a chunk of M tokens (batched prefill): X [M][K] float32 activations,
// W an MLX affine-quantized [N][K] matrix (engine/quant's format, as qmv.metal reads it), Y
// [M][N] float32. The dequantisation is fused into the tile loads: each threadgroup dequantises
// its W tile into threadgroup memory, never into device memory.
//
// Tiling: a threadgroup computes a QMM_BM × QMM_BN (32 × 32) tile of Y with 4 simdgroups, each a
// 16 × 16 quarter as 2 × 2 float 8×8 simdgroup matrices. Per step of QMM_BK (32) along K all 128
// threads load the X tile (rows past M read as 0) and dequantise the W tile (w = scale·q + bias,
// float32; rows past N as 0) into threadgroup memory, then each simdgroup runs 4 × 4
// multiply-accumulates. Y goes through threadgroup memory so that edge tiles store only rows < M
// and columns < N. Grid: (ceil(N / 32), ceil(M / 32)) threadgroups of 128 threads. K must be a
// multiple of 64 (the quantisation group). Accumulation is float32 (operands float32 too: Apple
// GPUs run float and half simdgroup multiplies at the same rate, so half would only lose bits).
#include <metal_stdlib>
using namespace metal;

constant uint QMM_M [[function_constant(0)]];  // tokens (rows of X and Y)
constant uint QMM_N [[function_constant(1)]];  // output features (rows of W)
constant uint QMM_K [[function_constant(2)]];  // input features, a multiple of 64

#define QMM_BM 32
#define QMM_BN 32
#define QMM_BK 32
#define QMM_THREADS 128
#define QMM_TILE 1024  // QMM_BM·QMM_BK = QMM_BN·QMM_BK = QMM_BM·QMM_BN floats (4 KiB)

template <uint BITS>
inline void qmm(device const float* x, device const uint* w, device const bfloat* scales, device const bfloat* biases,
                device float* y, uint2 tg, uint tid, uint sg, threadgroup float* xs, threadgroup float* ws,
                threadgroup float* ys) {
  const uint VPW = 32 / BITS;  // values per uint32 word
  const uint mask = (1u << BITS) - 1;
  const uint m0 = tg.y * QMM_BM, n0 = tg.x * QMM_BN;
  const uint sm = (sg / 2) * 16, sn = (sg % 2) * 16;  // this simdgroup's quarter of the tile
  simdgroup_float8x8 acc[2][2];
  for (uint i = 0; i < 2; i++) {
    for (uint j = 0; j < 2; j++) {
      acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    }
  }
  for (uint k0 = 0; k0 < QMM_K; k0 += QMM_BK) {
    for (uint i = tid; i < QMM_BM * QMM_BK; i += QMM_THREADS) {
      const uint r = i / QMM_BK, c = i % QMM_BK;
      xs[i] = m0 + r < QMM_M ? x[ulong(m0 + r) * QMM_K + k0 + c] : 0.0f;
    }
    for (uint i = tid; i < QMM_BN * QMM_BK / VPW; i += QMM_THREADS) {
      const uint r = i / (QMM_BK / VPW), wi = i % (QMM_BK / VPW);
      const uint n = n0 + r, k = k0 + wi * VPW;
      threadgroup float* dst = ws + r * QMM_BK + wi * VPW;
      if (n < QMM_N) {
        const uint word = w[ulong(n) * (QMM_K / VPW) + k / VPW];
        const ulong g = ulong(n) * (QMM_K / 64) + k / 64;
        const float s = float(scales[g]), b = float(biases[g]);
        for (uint j = 0; j < VPW; j++) {
          dst[j] = s * float((word >> (BITS * j)) & mask) + b;
        }
      } else {
        for (uint j = 0; j < VPW; j++) {
          dst[j] = 0.0f;
        }
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint kk = 0; kk < QMM_BK; kk += 8) {
      simdgroup_float8x8 a[2], b[2];
      for (uint i = 0; i < 2; i++) {
        simdgroup_load(a[i], xs, QMM_BK, ulong2(kk, sm + 8 * i));
      }
      for (uint j = 0; j < 2; j++) {  // B[k][n] = W[n][k]: the W tile read transposed
        simdgroup_load(b[j], ws, QMM_BK, ulong2(sn + 8 * j, kk), true);
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
      simdgroup_store(acc[i][j], ys, QMM_BN, ulong2(sn + 8 * j, sm + 8 * i));
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint i = tid; i < QMM_BM * QMM_BN; i += QMM_THREADS) {
    const uint r = i / QMM_BN, c = i % QMM_BN;
    if (m0 + r < QMM_M && n0 + c < QMM_N) {
      y[ulong(m0 + r) * QMM_N + n0 + c] = ys[i];
    }
  }
}

kernel void qmm_q4(device const uint* w [[buffer(0)]],         // [N][K·4/32] codes
                   device const bfloat* scales [[buffer(1)]],  // [N][K/64]
                   device const bfloat* biases [[buffer(2)]],  // [N][K/64]
                   device const float* x [[buffer(3)]],        // [M][K]
                   device float* y [[buffer(4)]],              // [M][N]
                   uint2 tg [[threadgroup_position_in_grid]],
                   uint tid [[thread_index_in_threadgroup]],
                   uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float xs[QMM_TILE];
  threadgroup float ws[QMM_TILE];
  threadgroup float ys[QMM_TILE];
  qmm<4>(x, w, scales, biases, y, tg, tid, sg, xs, ws, ys);
}

kernel void qmm_q8(device const uint* w [[buffer(0)]],         // [N][K·8/32] codes
                   device const bfloat* scales [[buffer(1)]],  // [N][K/64]
                   device const bfloat* biases [[buffer(2)]],  // [N][K/64]
                   device const float* x [[buffer(3)]],        // [M][K]
                   device float* y [[buffer(4)]],              // [M][N]
                   uint2 tg [[threadgroup_position_in_grid]],
                   uint tid [[thread_index_in_threadgroup]],
                   uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float xs[QMM_TILE];
  threadgroup float ws[QMM_TILE];
  threadgroup float ys[QMM_TILE];
  qmm<8>(x, w, scales, biases, y, tg, tid, sg, xs, ws, ys);
}

// simdgroup_layout_probe writes, per lane of one simdgroup, the two elements of
// thread_elements() of a matrix loaded from labels (element (r, c) = r·8 + c): the selftest
// compares them with the layout the emulator implements, which kernels that touch
// thread_elements() rely on.
kernel void simdgroup_layout_probe(device const float* labels [[buffer(0)]],  // [64]
                                   device float* out [[buffer(1)]],           // [32][2]
                                   uint lane [[thread_index_in_simdgroup]]) {
  simdgroup_float8x8 m;
  simdgroup_load(m, labels);
  out[lane * 2] = m.thread_elements()[0];
  out[lane * 2 + 1] = m.thread_elements()[1];
}
