// qmm_tensor.metal: the prefill GEMMs of qmm.metal on Metal 4 tensor ops, which run on M5's
// neural accelerators — qmm_q4/q8_tensor (qmm: Y[j] = X·W[j]ᵀ for a chunk of M tokens over one to
// four MLX affine-quantized matrices), moe_gate_up_mm_tensor and moe_down_mm_tensor (the routed
// experts' grouped GEMMs over moe_sort's block map), each with the same buffers, constants and
// grid order as its simdgroup form. Compiled only where the device and OS have tensor ops
// (MSL 4.0 with __HAVE_TENSOR__); elsewhere the file is empty and the simdgroup kernels run.
//
// The weights stay exact: per K-step of one quantisation group (64 columns) the threadgroup
// stages the W tile's codes as bfloat (integers up to 255 are exact in bfloat) and the X tile
// rounded to bfloat, runs P = X̃·Qᵀ on the tensor ops into a float cooperative tensor, and adds
// scale[n]·P[m][n] + bias[n]·ΣX̃[m] into the accumulator — the affine dequantisation
// (w = scale·q + bias) applied to the group's partial product instead of to every weight, so the
// only rounding before the float accumulation is X's to bfloat (the bfloat-activation tolerance
// of the tensor route). The accumulator and P come from the same op, so they share a layout,
// whatever it is: the kernel reaches elements only through get_capacity, is_valid_element,
// get_multidimensional_index and the element access, never through a lane layout.
//
// Tiling: a threadgroup of 4 simdgroups (execution_simdgroups<4>) computes a BM × QT_BN tile of
// Y: BM = QT_BM (64) for qmm_tensor, grid (Σ_j ceil(N_j / QT_BN), ceil(M / QT_BM)); the block map's
// rows (32, 16 or 8) for the MoE forms, grid (ceil(N / QT_BN), blocks). 128 threads a group; K a
// multiple of 64.
#include <metal_stdlib>
using namespace metal;

#if defined(__HAVE_TENSOR__) && __METAL_VERSION__ >= 400
#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>
using namespace mpp::tensor_ops;

constant uint QMM_M [[function_constant(0)]];  // tokens (rows of X and Y)
constant uint QMM_N [[function_constant(1)]];  // output features (rows of W)
constant uint QMM_K [[function_constant(2)]];  // input features, a multiple of 64
constant uint QMM_N1_FC [[function_constant(3)]];  // rows of matrices 1, 2 and 3 (0 or absent: none)
constant uint QMM_N2_FC [[function_constant(4)]];
constant uint QMM_N3_FC [[function_constant(5)]];
constant uint QMM_N1 = is_function_constant_defined(QMM_N1_FC) ? QMM_N1_FC : 0u;
constant uint QMM_N2 = is_function_constant_defined(QMM_N2_FC) ? QMM_N2_FC : 0u;
constant uint QMM_N3 = is_function_constant_defined(QMM_N3_FC) ? QMM_N3_FC : 0u;
// Activation storage, as in qmm.metal (kernels.ActInBF16, ActOutBF16): bfloat inputs are staged
// as they are; float ones are rounded to bfloat when staged.
constant bool QMM_IN_BF16_FC [[function_constant(20)]];
constant bool QMM_OUT_BF16_FC [[function_constant(21)]];
constant bool QMM_IN_BF16 = is_function_constant_defined(QMM_IN_BF16_FC) && QMM_IN_BF16_FC;
constant bool QMM_OUT_BF16 = is_function_constant_defined(QMM_OUT_BF16_FC) && QMM_OUT_BF16_FC;

inline bfloat act_load_bf16(device const float* p, ulong i) {
  return QMM_IN_BF16 ? ((device const bfloat*)p)[i] : bfloat(p[i]);
}

inline void act_store(device float* p, ulong i, float v) {
  if (QMM_OUT_BF16) {
    ((device bfloat*)p)[i] = bfloat(v);
  } else {
    p[i] = v;
  }
}

#define QT_BN 64
#define QT_BK 64  // one quantisation group
#define QT_THREADS 128

typedef tensor<threadgroup bfloat, dextents<int32_t, 2>, tensor_inline> qt_tile;

// qt_op<BM> is P = X̃ (BM × QT_BK) · Qᵀ, Q being the W tile's codes (QT_BN × QT_BK, transposed on
// the right), run by the threadgroup's 4 simdgroups together.
template <uint BM>
using qt_op = matmul2d<matmul2d_descriptor(BM, QT_BN, QT_BK, false, true, false, matmul2d_descriptor::mode::multiply),
                       execution_simdgroups<4>>;

// qt_acc<BM> is a float cooperative tensor of qt_op<BM>'s destination layout. Only its type is
// named here: every one is made by qt_op<BM>::get_destination_cooperative_tensor (qt_dest), as
// Apple's header makes them (it does not say a default-constructed one is usable).
template <uint BM>
using qt_acc = typename qt_op<BM>::template cooperative_tensor_destination_t<qt_tile, qt_tile, float, int>;

// qt_dest is a new accumulator of qt_op<BM>'s destination layout.
template <uint BM>
inline qt_acc<BM> qt_dest() {
  qt_op<BM> op;
  return op.template get_destination_cooperative_tensor<qt_tile, qt_tile, float>();
}

// qt_mem is a threadgroup's staging memory for a tile height BM: the X tile (BM × QT_BK bfloat),
// the W tile's codes (QT_BN × QT_BK bfloat), X̃'s row sums and the tile rows' scales and biases.
template <uint BM>
struct qt_mem {
  bfloat xs[BM * QT_BK];
  bfloat ws[QT_BN * QT_BK];
  float xsum[BM];
  float sb[2 * QT_BN];
};

// qt_stage_x writes rows m0 .. m0+m-1 of x's group at column k0 (with GATHER, rows rows[m0 + r])
// into xs as bfloat (rows past m as 0), and each row's sum of the rounded values into xsum:
// 128 / BM consecutive threads a row, their parts added by a butterfly of shuffles (the same sum
// in every lane of the row: each step adds two values, and addition commutes).
template <bool GATHER, uint BM>
inline void qt_stage_x(device const float* x, device const uint* rows, uint m0, uint m, uint K, uint k0, uint tid,
                       threadgroup qt_mem<BM>& t) {
  const uint TPR = QT_THREADS / BM, CPT = QT_BK / TPR;  // threads a row, columns a thread
  const uint r = tid / TPR, c0 = (tid % TPR) * CPT;
  float s = 0.0f;
  const ulong row = r < m ? (GATHER ? ulong(rows[m0 + r]) : ulong(m0 + r)) : 0;
  for (uint c = c0; c < c0 + CPT; c++) {
    const bfloat v = r < m ? act_load_bf16(x, row * K + k0 + c) : bfloat(0.0f);
    t.xs[r * QT_BK + c] = v;
    s += float(v);
  }
  for (uint d = 1; d < TPR; d *= 2) {
    s += simd_shuffle_xor(s, ushort(d));
  }
  if (tid % TPR == 0) {
    t.xsum[r] = s;
  }
}

// qt_stage_w writes the codes of W's rows w0 + n0 .. w0+n0+QT_BN-1 at group g into ws as bfloat
// (rows at or past n_lim as 0; integers up to 255 are exact in bfloat), and their scales and
// biases into sb (0 past n_lim).
template <uint BITS, uint BM>
inline void qt_stage_w(device const uint* w, device const bfloat* scales, device const bfloat* biases, ulong w0,
                       uint n0, uint n_lim, uint K, uint g, uint tid, threadgroup qt_mem<BM>& t) {
  const uint VPW = 32 / BITS, WPR = QT_BK / VPW;  // values per word, words per tile row
  const uint mask = (1u << BITS) - 1;
  for (uint i = tid; i < QT_BN * WPR; i += QT_THREADS) {
    const uint r = i / WPR, wi = i % WPR, n = n0 + r;
    const uint word = n < n_lim ? w[(w0 + n) * (K / VPW) + g * WPR + wi] : 0u;
    for (uint j = 0; j < VPW; j++) {
      t.ws[r * QT_BK + wi * VPW + j] = bfloat(float((word >> (BITS * j)) & mask));
    }
  }
  if (tid < QT_BN) {
    const uint n = n0 + tid;
    const ulong at = (w0 + n) * (K / 64) + g;
    t.sb[tid] = n < n_lim ? float(scales[at]) : 0.0f;
    t.sb[QT_BN + tid] = n < n_lim ? float(biases[at]) : 0.0f;
  }
}

// qt_gemm sets acc to the BM × QT_BN tile of X̃·Wᵀ whose rows are rows m0 .. m0+m-1 of x ([.][K];
// with GATHER, rows rows[m0 + r]) and whose columns are W's rows w0 + n0 .. (those at or past
// n_lim as 0). Per group of QT_BK columns: stage, P = X̃·Qᵀ on the tensor ops, then
// acc += scale[n]·P[m][n] + bias[n]·ΣX̃[m] — the affine dequantisation applied to the group's
// partial product. acc and P come from the same op, so they share a layout, whatever it is.
// All 128 threads call it.
template <uint BITS, bool GATHER, uint BM>
inline void qt_gemm(thread qt_acc<BM>& acc, device const float* x, device const uint* rows, uint m0, uint m,
                    device const uint* w, device const bfloat* scales, device const bfloat* biases, ulong w0, uint n0,
                    uint n_lim, uint K, uint tid, threadgroup qt_mem<BM>& t) {
  qt_tile tx(t.xs, dextents<int32_t, 2>(QT_BK, BM));
  qt_tile tw(t.ws, dextents<int32_t, 2>(QT_BK, QT_BN));
  qt_op<BM> op;
  auto part = qt_dest<BM>();
  for (uint16_t i = 0; i < acc.get_capacity(); i++) {
    if (acc.is_valid_element(i)) {
      acc[i] = 0.0f;
    }
  }
  for (uint g = 0; g < K / QT_BK; g++) {
    qt_stage_x<GATHER, BM>(x, rows, m0, m, K, g * QT_BK, tid, t);
    qt_stage_w<BITS, BM>(w, scales, biases, w0, n0, n_lim, K, g, tid, t);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    op.run(tx, tw, part);
    for (uint16_t i = 0; i < part.get_capacity(); i++) {
      if (part.is_valid_element(i)) {
        const auto ix = part.get_multidimensional_index(i);  // ix[0]: column (n), ix[1]: row (m)
        acc[i] = fma(t.sb[ix[0]], part[i], acc[i]);
        acc[i] = fma(t.xsum[ix[1]], t.sb[QT_BN + ix[0]], acc[i]);
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);  // the tiles are read; the next group overwrites them
  }
}

// qmm_tensor: Y[j] = X·W[j]ᵀ as qmm, in tiles of QT_BM × QT_BN.
#define QT_BM 64
template <uint BITS>
[[kernel]] void qmm_tensor(device const uint* w0 [[buffer(0)]],     // [N][K·BITS/32] codes
                           device const bfloat* s0 [[buffer(1)]],  // [N][K/64]
                           device const bfloat* b0 [[buffer(2)]],  // [N][K/64]
                           device float* y0 [[buffer(3)]],         // [M][N]
                           device const uint* w1 [[buffer(4)]],    // matrices 1-3 likewise
                           device const bfloat* s1 [[buffer(5)]],
                           device const bfloat* b1 [[buffer(6)]],
                           device float* y1 [[buffer(7)]],
                           device const uint* w2 [[buffer(8)]],
                           device const bfloat* s2 [[buffer(9)]],
                           device const bfloat* b2 [[buffer(10)]],
                           device float* y2 [[buffer(11)]],
                           device const uint* w3 [[buffer(12)]],
                           device const bfloat* s3 [[buffer(13)]],
                           device const bfloat* b3 [[buffer(14)]],
                           device float* y3 [[buffer(15)]],
                           device const float* x [[buffer(16)]],   // [M][K]
                           uint2 tg [[threadgroup_position_in_grid]],
                           uint tid [[thread_index_in_threadgroup]]) {
  threadgroup qt_mem<QT_BM> t;
  const uint t0 = (QMM_N + QT_BN - 1) / QT_BN;
  const uint t1 = t0 + (QMM_N1 + QT_BN - 1) / QT_BN;
  const uint t2 = t1 + (QMM_N2 + QT_BN - 1) / QT_BN;
  const uint t3 = t2 + (QMM_N3 + QT_BN - 1) / QT_BN;
  if (tg.x >= t3) {
    return;  // the whole threadgroup: a grid wider than the matrices
  }
  device const uint* w;
  device const bfloat *sc, *bi;
  device float* y;
  uint n, first;
  if (tg.x < t0) {
    w = w0, sc = s0, bi = b0, y = y0, n = QMM_N, first = 0;
  } else if (tg.x < t1) {
    w = w1, sc = s1, bi = b1, y = y1, n = QMM_N1, first = t0;
  } else if (tg.x < t2) {
    w = w2, sc = s2, bi = b2, y = y2, n = QMM_N2, first = t1;
  } else {
    w = w3, sc = s3, bi = b3, y = y3, n = QMM_N3, first = t2;
  }
  const uint m0 = tg.y * QT_BM, n0 = (tg.x - first) * QT_BN, m = min(uint(QT_BM), QMM_M - m0);
  auto acc = qt_dest<QT_BM>();
  qt_gemm<BITS, false, QT_BM>(acc, x, nullptr, m0, m, w, sc, bi, 0, n0, n, QMM_K, tid, t);
  for (uint16_t i = 0; i < acc.get_capacity(); i++) {
    if (acc.is_valid_element(i)) {
      const auto ix = acc.get_multidimensional_index(i);
      const uint r = uint(ix[1]), c = uint(ix[0]);
      if (r < m && n0 + c < n) {
        act_store(y, ulong(m0 + r) * n + n0 + c, acc[i]);
      }
    }
  }
}

// moe_gate_up_mm_tensor is moe_gate_up_mm (qmm.metal: a block of moe_sort's map, act[pair] =
// silu(gate_e·x[tok])·(up_e·x[tok])) on tensor ops; BM is the map's block rows, as there.
template <uint BM>
[[kernel]] void moe_gate_up_mm_tensor(device const uint* gate_w [[buffer(0)]],   // [E·I][K·4/32]
                                      device const bfloat* gate_s [[buffer(1)]],
                                      device const bfloat* gate_b [[buffer(2)]],
                                      device const uint* up_w [[buffer(3)]],
                                      device const bfloat* up_s [[buffer(4)]],
                                      device const bfloat* up_b [[buffer(5)]],
                                      device const float* x [[buffer(6)]],       // [T][K]
                                      device const uint* tok [[buffer(7)]],      // [pairs] (moe_sort)
                                      device const uint4* blocks [[buffer(8)]],  // moe_sort's block map
                                      device float* act [[buffer(9)]],           // [pairs][I]
                                      uint2 tg [[threadgroup_position_in_grid]],
                                      uint tid [[thread_index_in_threadgroup]]) {
  threadgroup qt_mem<BM> t;
  const uint4 blk = blocks[tg.y];
  if (blk.x == 0xffffffffu) {
    return;  // the same for the whole threadgroup
  }
  const ulong w0 = ulong(blk.x) * QMM_N;
  const uint n0 = tg.x * QT_BN;
  auto g = qt_dest<BM>(), u = qt_dest<BM>();
  qt_gemm<4, true, BM>(g, x, tok, blk.y, blk.z, gate_w, gate_s, gate_b, w0, n0, QMM_N, QMM_K, tid, t);
  qt_gemm<4, true, BM>(u, x, tok, blk.y, blk.z, up_w, up_s, up_b, w0, n0, QMM_N, QMM_K, tid, t);
  for (uint16_t i = 0; i < g.get_capacity(); i++) {
    if (g.is_valid_element(i)) {
      const auto ix = g.get_multidimensional_index(i);
      const uint r = uint(ix[1]), c = uint(ix[0]);
      if (r < blk.z && n0 + c < QMM_N) {
        act_store(act, ulong(blk.y + r) * QMM_N + n0 + c, g[i] * (1.0f / (1.0f + exp(-g[i]))) * u[i]);
      }
    }
  }
}

// moe_down_mm_tensor is moe_down_mm (qmm.metal: y[pair] = w[pair]·(down_e·act[pair])) on tensor
// ops.
template <uint BM>
[[kernel]] void moe_down_mm_tensor(device const uint* down_w [[buffer(0)]],   // [E·H][I·4/32]
                                   device const bfloat* down_s [[buffer(1)]],
                                   device const bfloat* down_b [[buffer(2)]],
                                   device const float* act [[buffer(3)]],     // [pairs][I]
                                   device const float* w [[buffer(4)]],       // [pairs] routing weights (moe_sort)
                                   device const uint4* blocks [[buffer(5)]],  // moe_sort's block map
                                   device float* y [[buffer(6)]],             // [pairs][H]
                                   uint2 tg [[threadgroup_position_in_grid]],
                                   uint tid [[thread_index_in_threadgroup]]) {
  threadgroup qt_mem<BM> t;
  const uint4 blk = blocks[tg.y];
  if (blk.x == 0xffffffffu) {
    return;
  }
  const uint n0 = tg.x * QT_BN;
  auto acc = qt_dest<BM>();
  qt_gemm<4, false, BM>(acc, act, nullptr, blk.y, blk.z, down_w, down_s, down_b, ulong(blk.x) * QMM_N, n0, QMM_N,
                        QMM_K, tid, t);
  for (uint16_t i = 0; i < acc.get_capacity(); i++) {
    if (acc.is_valid_element(i)) {
      const auto ix = acc.get_multidimensional_index(i);
      const uint r = uint(ix[1]), c = uint(ix[0]);
      if (r < blk.z && n0 + c < QMM_N) {
        act_store(y, ulong(blk.y + r) * QMM_N + n0 + c, w[blk.y + r] * acc[i]);
      }
    }
  }
}

template [[host_name("qmm_q4_tensor")]] [[kernel]] decltype(qmm_tensor<4>) qmm_tensor<4>;
template [[host_name("qmm_q8_tensor")]] [[kernel]] decltype(qmm_tensor<8>) qmm_tensor<8>;
template [[host_name("moe_gate_up_mm_tensor")]] [[kernel]] decltype(moe_gate_up_mm_tensor<32>) moe_gate_up_mm_tensor<32>;
template [[host_name("moe_gate_up_mm_m16_tensor")]] [[kernel]] decltype(moe_gate_up_mm_tensor<16>) moe_gate_up_mm_tensor<16>;
template [[host_name("moe_gate_up_mm_m8_tensor")]] [[kernel]] decltype(moe_gate_up_mm_tensor<8>) moe_gate_up_mm_tensor<8>;
template [[host_name("moe_down_mm_tensor")]] [[kernel]] decltype(moe_down_mm_tensor<32>) moe_down_mm_tensor<32>;
template [[host_name("moe_down_mm_m16_tensor")]] [[kernel]] decltype(moe_down_mm_tensor<16>) moe_down_mm_tensor<16>;
template [[host_name("moe_down_mm_m8_tensor")]] [[kernel]] decltype(moe_down_mm_tensor<8>) moe_down_mm_tensor<8>;
#endif
