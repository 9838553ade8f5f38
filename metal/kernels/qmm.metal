// qmm.metal: Y = X·Wᵀ for a chunk of M tokens (batched prefill): X [M][K] activations, W an
// MLX affine-quantized [N][K] matrix (engine/quant's format, as qmv.metal reads it), Y [M][N]
// (qmm takes up to four W over one X); X and Y float32, or bfloat as the chunk mode stores them
// (QMM_IN_BF16, QMM_OUT_BF16 below). The dequantisation is fused into the tile loads: each threadgroup dequantises
// its W tile into threadgroup memory, never into device memory.
//
// Tiling: a threadgroup of 4 simdgroups (128 threads) computes a BM × BN tile of Y, BM·BN = 1024,
// BM being the kernel's tile height, chosen by chunk size (kernels.QMMTileRows): 32 × 32 (the
// simdgroups 2 × 2, each a 16 × 16 quarter as 2 × 2 float 8×8 matrices), 16 × 64 (1 × 4, each
// 16 × 16) or 8 × 128 (1 × 4, each 8 × 32 as 1 × 4 matrices) — a short chunk pads its rows to 8,
// not 32. Per step of QMM_BK (32) along K all 128 threads load the X tile (rows past M read as 0)
// and dequantise the W tile (w = scale·q + bias, float32; rows past N as 0) into threadgroup
// memory, then each simdgroup runs its multiply-accumulates. Y goes through threadgroup memory so
// that edge tiles store only rows < M and columns < N. Grid: (ceil(N / BN), ceil(M / BM))
// threadgroups of 128 threads. K must be a multiple of 64 (the quantisation group). Accumulation
// is float32 (operands float32 too: Apple GPUs run float and half simdgroup multiplies at the
// same rate, so half would only lose bits).
#include <metal_stdlib>
using namespace metal;

constant uint QMM_M [[function_constant(0)]];  // tokens (rows of X and Y)
constant uint QMM_N [[function_constant(1)]];  // output features (rows of W)
constant uint QMM_K [[function_constant(2)]];  // input features, a multiple of 64
constant uint QMM_N1_FC [[function_constant(3)]];  // qmm: rows of matrices 1, 2 and 3 (0 or absent: none)
constant uint QMM_N2_FC [[function_constant(4)]];
constant uint QMM_N3_FC [[function_constant(5)]];
constant uint QMM_N1 = is_function_constant_defined(QMM_N1_FC) ? QMM_N1_FC : 0u;
constant uint QMM_N2 = is_function_constant_defined(QMM_N2_FC) ? QMM_N2_FC : 0u;
constant uint QMM_N3 = is_function_constant_defined(QMM_N3_FC) ? QMM_N3_FC : 0u;
// Activation storage (kernels.ActInBF16, ActOutBF16): X of qmm, x of moe_gate_up_mm and act of
// moe_down_mm are the inputs; Y, act of moe_gate_up_mm and y of moe_down_mm the outputs. Set,
// they are bfloat (the buffers keep their float pointer types and are read through act_load and
// act_store), widened on load and rounded to nearest even on store; products stay float32.
constant bool QMM_IN_BF16_FC [[function_constant(20)]];
constant bool QMM_OUT_BF16_FC [[function_constant(21)]];
constant bool QMM_IN_BF16 = is_function_constant_defined(QMM_IN_BF16_FC) && QMM_IN_BF16_FC;
constant bool QMM_OUT_BF16 = is_function_constant_defined(QMM_OUT_BF16_FC) && QMM_OUT_BF16_FC;

inline float act_load(device const float* p, ulong i) {
  return QMM_IN_BF16 ? float(((device const bfloat*)p)[i]) : p[i];
}

inline void act_store(device float* p, ulong i, float v) {
  if (QMM_OUT_BF16) {
    ((device bfloat*)p)[i] = bfloat(v);
  } else {
    p[i] = v;
  }
}

#define QMM_BK 32
#define QMM_THREADS 128
#define QMM_TILE 1024  // BM·BN floats (4 KiB)
// The X and W tiles' row stride in threadgroup memory: QMM_BK + 4 floats, so that on a memory of
// 32 four-byte banks (the usual design; Apple does not document its own) the 8 rows an 8×8
// simdgroup_load reads start in 8 different banks, where a stride of 32 would start them all in
// one, as MLX pads its tiles; the 4 floats after each row are never written or read. Not yet
// measured on a Mac.
#define QMM_LD 36
#define QMM_XS 1152  // the X tile: BM·QMM_LD floats for BM <= 32

// qmm_shape is a tile height's layout: BN columns; SGR × SGC simdgroups, each SR × SC as MI × MJ
// 8×8 matrices.
template <uint BM>
struct qmm_shape {
  static constant constexpr const uint BN = QMM_TILE / BM;
  static constant constexpr const uint SGR = BM >= 32 ? 2 : 1;
  static constant constexpr const uint SGC = 4 / SGR;
  static constant constexpr const uint SR = BM / SGR;
  static constant constexpr const uint SC = BN / SGC;
  static constant constexpr const uint MI = SR / 8;
  static constant constexpr const uint MJ = SC / 8;
};

// A simdgroup's part of a tile's accumulators.
template <uint BM>
struct qmm_acc {
  simdgroup_float8x8 m[qmm_shape<BM>::MI][qmm_shape<BM>::MJ];
};

// qmm_tile accumulates a BM × BN tile of X·Wᵀ into acc: the tile's rows are rows m0 .. m0+m-1 of
// x ([.][K]; with GATHER, rows rows[m0 + r] instead), its columns W's rows w0 + n0 .. w0+n0+BN-1
// (those at or past n_lim read as 0). All 128 threads call it; xs holds BM·QMM_LD floats, ws
// BN·QMM_LD.
template <uint BITS, bool GATHER, uint BM>
inline void qmm_tile(thread qmm_acc<BM>& acc, device const float* x, device const uint* rows, uint m0, uint m,
                     device const uint* w, device const bfloat* scales, device const bfloat* biases, ulong w0,
                     uint n0, uint n_lim, uint K, uint tid, uint sg, threadgroup float* xs, threadgroup float* ws) {
  typedef qmm_shape<BM> S;
  const uint VPW = 32 / BITS;  // values per uint32 word
  const uint mask = (1u << BITS) - 1;
  const uint sm = (sg / S::SGC) * S::SR, sn = (sg % S::SGC) * S::SC;  // this simdgroup's part of the tile
  for (uint i = 0; i < S::MI; i++) {
    for (uint j = 0; j < S::MJ; j++) {
      acc.m[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    }
  }
  for (uint k0 = 0; k0 < K; k0 += QMM_BK) {
    for (uint i = tid; i < BM * QMM_BK; i += QMM_THREADS) {
      const uint r = i / QMM_BK, c = i % QMM_BK;
      float v = 0.0f;
      if (r < m) {
        const ulong row = GATHER ? ulong(rows[m0 + r]) : ulong(m0 + r);
        v = act_load(x, row * K + k0 + c);
      }
      xs[r * QMM_LD + c] = v;
    }
    for (uint i = tid; i < S::BN * QMM_BK / VPW; i += QMM_THREADS) {
      const uint r = i / (QMM_BK / VPW), wi = i % (QMM_BK / VPW);
      const uint n = n0 + r, k = k0 + wi * VPW;
      threadgroup float* dst = ws + r * QMM_LD + wi * VPW;
      if (n < n_lim) {
        const ulong wr = w0 + n;
        const uint word = w[wr * (K / VPW) + k / VPW];
        const ulong g = wr * (K / 64) + k / 64;
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
      simdgroup_float8x8 a[S::MI], b[S::MJ];
      for (uint i = 0; i < S::MI; i++) {
        simdgroup_load(a[i], xs, QMM_LD, ulong2(kk, sm + 8 * i));
      }
      for (uint j = 0; j < S::MJ; j++) {  // B[k][n] = W[n][k]: the W tile read transposed
        simdgroup_load(b[j], ws, QMM_LD, ulong2(sn + 8 * j, kk), true);
      }
      for (uint i = 0; i < S::MI; i++) {
        for (uint j = 0; j < S::MJ; j++) {
          simdgroup_multiply_accumulate(acc.m[i][j], a[i], b[j], acc.m[i][j]);
        }
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);  // the tiles are read; the next step overwrites them
  }
}

// qmm_stage stores acc into the BM × BN tile ys (row-major) and waits for the threadgroup.
template <uint BM>
inline void qmm_stage(thread qmm_acc<BM>& acc, threadgroup float* ys, uint sg) {
  typedef qmm_shape<BM> S;
  const uint sm = (sg / S::SGC) * S::SR, sn = (sg % S::SGC) * S::SC;
  for (uint i = 0; i < S::MI; i++) {
    for (uint j = 0; j < S::MJ; j++) {
      simdgroup_store(acc.m[i][j], ys, S::BN, ulong2(sn + 8 * j, sm + 8 * i));
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
}

// qmm is Y[j] = X·W[j]ᵀ for one to four matrices over the same X (a projection stack: the
// DeltaNet layer's qkv|z|b|a, attention's q|k|v, the router and the shared expert's gate), each
// into its own Y: the grid's columns are matrix 0's tiles, then matrix 1's, and so on (rows
// QMM_N, QMM_N1, QMM_N2, QMM_N3; an absent matrix has none), so X is read by one dispatch
// instead of one per matrix.
template <uint BITS, uint BM>
[[kernel]] void qmm(device const uint* w0 [[buffer(0)]],     // [N][K·BITS/32] codes
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
                    uint tid [[thread_index_in_threadgroup]],
                    uint sg [[simdgroup_index_in_threadgroup]]) {
  typedef qmm_shape<BM> S;
  threadgroup float xs[QMM_XS];
  threadgroup float ws[36864 / BM];  // BN·QMM_LD
  threadgroup float ys[QMM_TILE];
  const uint t0 = (QMM_N + S::BN - 1) / S::BN;
  const uint t1 = t0 + (QMM_N1 + S::BN - 1) / S::BN;
  const uint t2 = t1 + (QMM_N2 + S::BN - 1) / S::BN;
  const uint t3 = t2 + (QMM_N3 + S::BN - 1) / S::BN;
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
  const uint m0 = tg.y * BM, n0 = (tg.x - first) * S::BN;
  qmm_acc<BM> acc;
  qmm_tile<BITS, false, BM>(acc, x, nullptr, m0, min(BM, QMM_M - m0), w, sc, bi, 0, n0, n, QMM_K, tid, sg, xs, ws);
  qmm_stage<BM>(acc, ys, sg);
  for (uint i = tid; i < QMM_TILE; i += QMM_THREADS) {
    const uint r = i / S::BN, c = i % S::BN;
    if (m0 + r < QMM_M && n0 + c < n) {
      act_store(y, ulong(m0 + r) * n + n0 + c, ys[i]);
    }
  }
}

template [[host_name("qmm_q4")]] [[kernel]] decltype(qmm<4, 32>) qmm<4, 32>;
template [[host_name("qmm_q8")]] [[kernel]] decltype(qmm<8, 32>) qmm<8, 32>;
template [[host_name("qmm_q4_m16")]] [[kernel]] decltype(qmm<4, 16>) qmm<4, 16>;
template [[host_name("qmm_q8_m16")]] [[kernel]] decltype(qmm<8, 16>) qmm<8, 16>;
template [[host_name("qmm_q4_m8")]] [[kernel]] decltype(qmm<4, 8>) qmm<4, 8>;
template [[host_name("qmm_q8_m8")]] [[kernel]] decltype(qmm<8, 8>) qmm<8, 8>;

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

// moe_gate_up_mm is a prefill chunk's grouped GEMM for the routed experts' gate and up
// projections with SwiGLU: block b of moe_sort's map ({expert e, first pair, pairs n}, n <= BM)
// computes, for its n pairs and BN of the I = QMM_N intermediate rows, act[pair] =
// silu(gate_e · x[tok]) · (up_e · x[tok]), gate_e and up_e being rows e·I .. of the stacked
// [E·I][K] tensors and x the chunk's normed inputs [T][K]. Grid: (ceil(I / BN), blocks)
// threadgroups of 128; a block past the map's end ({MOE_NONE, ...}) returns at once. The shared
// expert runs through it too, as one expert over an identity map. BM is the map's block rows
// (moe_sort's MOE_BM): moe_gate_up_mm 32, moe_gate_up_mm_m16 16, moe_gate_up_mm_m8 8.
template <uint BM>
[[kernel]] void moe_gate_up_mm(device const uint* gate_w [[buffer(0)]],        // [E·I][K·4/32]
                               device const bfloat* gate_s [[buffer(1)]],
                               device const bfloat* gate_b [[buffer(2)]],
                               device const uint* up_w [[buffer(3)]],
                               device const bfloat* up_s [[buffer(4)]],
                               device const bfloat* up_b [[buffer(5)]],
                               device const float* x [[buffer(6)]],            // [T][K]
                               device const uint* tok [[buffer(7)]],           // [pairs] (moe_sort)
                               device const uint4* blocks [[buffer(8)]],       // moe_sort's block map
                               device float* act [[buffer(9)]],                // [pairs][I]
                               uint2 tg [[threadgroup_position_in_grid]],
                               uint tid [[thread_index_in_threadgroup]],
                               uint sg [[simdgroup_index_in_threadgroup]]) {
  typedef qmm_shape<BM> S;
  threadgroup float xs[QMM_XS];
  threadgroup float ws[36864 / BM];  // BN·QMM_LD
  threadgroup float yg[QMM_TILE];
  threadgroup float yu[QMM_TILE];
  const uint4 blk = blocks[tg.y];
  if (blk.x == 0xffffffffu) {
    return;  // the same for the whole threadgroup
  }
  const ulong w0 = ulong(blk.x) * QMM_N;
  const uint n0 = tg.x * S::BN;
  qmm_acc<BM> acc;
  qmm_tile<4, true, BM>(acc, x, tok, blk.y, blk.z, gate_w, gate_s, gate_b, w0, n0, QMM_N, QMM_K, tid, sg, xs, ws);
  qmm_stage<BM>(acc, yg, sg);
  qmm_tile<4, true, BM>(acc, x, tok, blk.y, blk.z, up_w, up_s, up_b, w0, n0, QMM_N, QMM_K, tid, sg, xs, ws);
  qmm_stage<BM>(acc, yu, sg);
  for (uint i = tid; i < QMM_TILE; i += QMM_THREADS) {
    const uint r = i / S::BN, c = i % S::BN;
    if (r < blk.z && n0 + c < QMM_N) {
      const float g = yg[i];
      act_store(act, ulong(blk.y + r) * QMM_N + n0 + c, g * (1.0f / (1.0f + exp(-g))) * yu[i]);
    }
  }
}

// moe_down_mm is the routed experts' grouped down GEMM: block b of moe_sort's map computes, for
// its n pairs (rows first .. first+n-1 of act, [pairs][I = QMM_K]) and BN of the H = QMM_N
// output dims, y[pair] = w[pair] · (down_e · act[pair]), down_e being rows e·H .. of the stacked
// [E·H][I] tensor. Grid: (ceil(H / BN), blocks) threadgroups of 128. Instances as moe_gate_up_mm's.
template <uint BM>
[[kernel]] void moe_down_mm(device const uint* down_w [[buffer(0)]],    // [E·H][I·4/32]
                            device const bfloat* down_s [[buffer(1)]],
                            device const bfloat* down_b [[buffer(2)]],
                            device const float* act [[buffer(3)]],      // [pairs][I]
                            device const float* w [[buffer(4)]],        // [pairs] routing weights (moe_sort)
                            device const uint4* blocks [[buffer(5)]],   // moe_sort's block map
                            device float* y [[buffer(6)]],              // [pairs][H]
                            uint2 tg [[threadgroup_position_in_grid]],
                            uint tid [[thread_index_in_threadgroup]],
                            uint sg [[simdgroup_index_in_threadgroup]]) {
  typedef qmm_shape<BM> S;
  threadgroup float xs[QMM_XS];
  threadgroup float ws[36864 / BM];  // BN·QMM_LD
  threadgroup float ys[QMM_TILE];
  const uint4 blk = blocks[tg.y];
  if (blk.x == 0xffffffffu) {
    return;
  }
  const uint n0 = tg.x * S::BN;
  qmm_acc<BM> acc;
  qmm_tile<4, false, BM>(acc, act, nullptr, blk.y, blk.z, down_w, down_s, down_b, ulong(blk.x) * QMM_N, n0, QMM_N,
                         QMM_K, tid, sg, xs, ws);
  qmm_stage<BM>(acc, ys, sg);
  for (uint i = tid; i < QMM_TILE; i += QMM_THREADS) {
    const uint r = i / S::BN, c = i % S::BN;
    if (r < blk.z && n0 + c < QMM_N) {
      act_store(y, ulong(blk.y + r) * QMM_N + n0 + c, w[blk.y + r] * ys[i]);
    }
  }
}

template [[host_name("moe_gate_up_mm")]] [[kernel]] decltype(moe_gate_up_mm<32>) moe_gate_up_mm<32>;
template [[host_name("moe_gate_up_mm_m16")]] [[kernel]] decltype(moe_gate_up_mm<16>) moe_gate_up_mm<16>;
template [[host_name("moe_gate_up_mm_m8")]] [[kernel]] decltype(moe_gate_up_mm<8>) moe_gate_up_mm<8>;
template [[host_name("moe_down_mm")]] [[kernel]] decltype(moe_down_mm<32>) moe_down_mm<32>;
template [[host_name("moe_down_mm_m16")]] [[kernel]] decltype(moe_down_mm<16>) moe_down_mm<16>;
template [[host_name("moe_down_mm_m8")]] [[kernel]] decltype(moe_down_mm<8>) moe_down_mm<8>;
