// qmv.metal: y = W·x for an MLX affine-quantized W (engine/quant's format): N rows of K values,
// each row K*BITS/32 uint32 words, values packed least significant first; one bf16 scale and
// bias per 64 consecutive values of a row (w = scale*q + bias).
//
// The dequantization is factored: per 64-group, Σ w·x = scale·Σ q·x + bias·Σ x, so the bias
// costs one multiply-add per group and Σ x is shared by all rows. Codes are never shifted: a
// 16-bit half-word is masked in place (q·16^i for 4-bit, q·256^i for 8-bit) and multiplied by
// an x that was divided by 16^i (256^i) beforehand, which is exact.
//
// Geometry: threadgroups of QMV_SIMDGROUPS simdgroups (64 threads); each simdgroup computes
// QMV_ROWS consecutive rows; per step a lane reads 16 consecutive values of x and of each of its
// rows (8 bytes of 4-bit codes, 16 of 8-bit), so a simdgroup covers 512 columns per step and
// 4 lanes share a group's scale and bias. Rows are reduced with simd_sum, lane 0 writes them.
// Grid: ceil(N / 8) threadgroups. K must be a multiple of 64 (any, not only of 512); x must be
// 16-byte aligned.
//
// Batch rows (multi-row decode): QMV_BATCH (function constant 8, 1 to 8; unset: 1) is the number
// R of rows of x, laid out [R][K], and of y, [R][N] (each matrix's y in qmv_multi; the residual
// of QMV_ADD too). Each simdgroup reads its weight rows once per step and applies them to all R
// rows; row b's accumulation is exactly the one-row kernel's (same lanes, same order, same
// simd_sum), so y[b] is bit-identical whatever R is and whatever the other rows hold, and R = 1
// is the one-row kernel. The norm variants compute one r per batch row. Same grid for any R.
//
// Fused variants (the decode plan's):
//   qmv_norm_q4/q8    x is the un-normed residual: each simdgroup computes r = rsqrt(mean(x²) +
//                     QMV_EPS) over all K values itself (K floats, read through the caches) and uses
//                     x̂ = (x·r)·gain (gain: bf16 [K], buffer 5), add_rmsnorm's per-element product,
//                     so the result equals add_rmsnorm + qmv up to r's rounding.
//   QMV_ADD           (function constant, any kernel) y[row] += W·x in place: the residual add of
//                     an out-projection.
//   qmv_multi_q4/q8,  up to 4 matrices over the same x in one dispatch: matrix j has QMV_N_j rows
//   qmv_multi_norm_*  (QMV_N, QMV_N1, QMV_N2, QMV_N3; 0 = absent) and buffers 4j (codes), 4j+1
//                     (scales), 4j+2 (biases), 4j+3 (y_j); x is buffer 16, the gain (norm variant)
//                     buffer 17. An absent matrix's four buffers must still be bound (any buffer:
//                     they are never accessed). Threadgroups are flattened: ceil(N_0/8) for
//                     matrix 0, then ceil(N_1/8) for matrix 1, ...
// Bindings never exceed 18 of Metal's 31.

#include <metal_stdlib>
using namespace metal;

constant uint QMV_N [[function_constant(0)]];  // rows of W (of matrix 0 in qmv_multi)
constant uint QMV_K [[function_constant(1)]];  // columns of W: input features, a multiple of 64
constant float QMV_EPS_FC [[function_constant(3)]];
constant bool QMV_ADD_FC [[function_constant(4)]];
constant uint QMV_N1_FC [[function_constant(5)]];
constant uint QMV_N2_FC [[function_constant(6)]];
constant uint QMV_N3_FC [[function_constant(7)]];
constant float QMV_EPS = is_function_constant_defined(QMV_EPS_FC) ? QMV_EPS_FC : 0.0f;
constant bool QMV_ADD = is_function_constant_defined(QMV_ADD_FC) && QMV_ADD_FC;
constant uint QMV_N1 = is_function_constant_defined(QMV_N1_FC) ? QMV_N1_FC : 0u;
constant uint QMV_N2 = is_function_constant_defined(QMV_N2_FC) ? QMV_N2_FC : 0u;
constant uint QMV_N3 = is_function_constant_defined(QMV_N3_FC) ? QMV_N3_FC : 0u;
constant uint QMV_BATCH_FC [[function_constant(8)]];
constant uint QMV_BATCH = is_function_constant_defined(QMV_BATCH_FC) ? QMV_BATCH_FC : 1u;

#define QMV_ROWS 4
#define QMV_SIMDGROUPS 2
#define QMV_VALUES 16  // values per lane per step
#define QMV_MAX_BATCH 8

// qmv_inv_rms is rsqrt(mean(x²) + QMV_EPS) over QMV_K values, computed by one whole simdgroup.
inline float qmv_inv_rms(device const float* x, uint lane) {
  float ss = 0.0f;
  for (uint i = lane * 4; i < QMV_K; i += 32 * 4) {
    const float4 v = *(device const float4*)(x + i);
    ss += (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w);
  }
  ss = simd_sum(ss);
  return rsqrt(ss / float(QMV_K) + QMV_EPS);
}

// qmv_load_x reads a lane's QMV_VALUES values of x at column k (normed with inv and the gain
// for NORM) into xs, each pre-divided by the place value of its code inside a half-word, and
// returns their sum.
template <int BITS, bool NORM>
inline float qmv_load_x(device const float* x, device const bfloat* gain, uint k, float inv,
                        thread float* xs) {
  float xsum = 0.0f;
  for (uint i = 0; i < QMV_VALUES; i += 4) {
    float4 v = *(device const float4*)(x + k + i);
    if (NORM) {
      const float4 g = float4(float(gain[k + i]), float(gain[k + i + 1]), float(gain[k + i + 2]),
                              float(gain[k + i + 3]));
      v = (v * inv) * g;  // add_rmsnorm's h * r * w
    }
    xsum += (v.x + v.y) + (v.z + v.w);
    if (BITS == 4) {
      xs[i] = v.x;
      xs[i + 1] = v.y / 16.0f;
      xs[i + 2] = v.z / 256.0f;
      xs[i + 3] = v.w / 4096.0f;
    } else {
      xs[i] = v.x;
      xs[i + 1] = v.y / 256.0f;
      xs[i + 2] = v.z;
      xs[i + 3] = v.w / 256.0f;
    }
  }
  return xsum;
}

// qmv_dot is Σ q·x over one row's HALVES half-words of codes c (in place) and the pre-divided xs.
template <int BITS>
inline float qmv_dot(thread const ushort* c, thread const float* xs) {
  constexpr uint HALVES = QMV_VALUES * BITS / 16;
  float qx = 0.0f;
  for (uint h = 0; h < HALVES; h++) {
    if (BITS == 4) {
      qx += xs[4 * h] * float(c[h] & 0x000fu) + xs[4 * h + 1] * float(c[h] & 0x00f0u) +
            xs[4 * h + 2] * float(c[h] & 0x0f00u) + xs[4 * h + 3] * float(c[h] & 0xf000u);
    } else {
      qx += xs[2 * h] * float(c[h] & 0x00ffu) + xs[2 * h + 1] * float(c[h] & 0xff00u);
    }
  }
  return qx;
}

// qmv_weights is one K step of a simdgroup's weight rows, as a lane reads them: each row's
// half-words of codes and its group's scale and bias.
template <int BITS>
struct qmv_weights {
  ushort c[QMV_ROWS][QMV_VALUES * BITS / 16];
  float scale[QMV_ROWS];
  float bias[QMV_ROWS];
};

// qmv_load_w reads the step at column k of rows row0 .. row0+live-1.
template <int BITS>
inline qmv_weights<BITS> qmv_load_w(device const uint* w, device const bfloat* scales,
                                    device const bfloat* biases, uint row0, uint live, uint k) {
  constexpr uint PER_HALF = 16 / BITS;            // values per 16-bit half-word
  constexpr uint HALVES = QMV_VALUES / PER_HALF;  // half-words per row per step
  qmv_weights<BITS> s;
  for (uint r = 0; r < QMV_ROWS; r++) {
    if (r >= live) {
      break;  // the same for the whole simdgroup; constant bounds keep the arrays in registers
    }
    device const ushort* q = (device const ushort*)w + ulong(row0 + r) * (QMV_K / PER_HALF) + k / PER_HALF;
    for (uint h = 0; h < HALVES; h++) {
      s.c[r][h] = q[h];
    }
    const ulong gi = ulong(row0 + r) * (QMV_K / 64) + k / 64;
    s.scale[r] = float(scales[gi]);
    s.bias[r] = float(biases[gi]);
  }
  return s;
}

// qmv_rows computes rows row0 .. row0+3 (those below n) of one matrix for each of the QMV_BATCH
// rows of x ([QMV_BATCH][QMV_K]) into y ([QMV_BATCH][n]); run by a whole simdgroup. Each step's
// codes, scales and biases are read once and applied to every batch row; a batch row's own
// accumulation (lane, order, reduction) is the one-row kernel's, so its result does not depend
// on QMV_BATCH or on the other rows.
template <int BITS, bool NORM>
inline void qmv_rows(device const uint* w, device const bfloat* scales, device const bfloat* biases,
                     device const float* x, device const bfloat* gain, device float* y, uint n,
                     uint row0, uint lane) {
  const uint live = min(uint(QMV_ROWS), n - row0);  // rows of this simdgroup below n
  float inv[QMV_MAX_BATCH];
  float acc[QMV_MAX_BATCH][QMV_ROWS];
  for (uint b = 0; b < QMV_BATCH; b++) {
    inv[b] = NORM ? qmv_inv_rms(x + b * QMV_K, lane) : 1.0f;
    for (uint r = 0; r < QMV_ROWS; r++) {
      acc[b][r] = 0.0f;
    }
  }
  for (uint k = lane * QMV_VALUES; k < QMV_K; k += 32 * QMV_VALUES) {
    const qmv_weights<BITS> ws = qmv_load_w<BITS>(w, scales, biases, row0, live, k);
    for (uint b = 0; b < QMV_BATCH; b++) {
      float xs[QMV_VALUES];
      const float xsum = qmv_load_x<BITS, NORM>(x + b * QMV_K, gain, k, inv[b], xs);
      for (uint r = 0; r < QMV_ROWS; r++) {
        if (r >= live) {
          break;
        }
        acc[b][r] += ws.scale[r] * qmv_dot<BITS>(ws.c[r], xs) + ws.bias[r] * xsum;
      }
    }
  }
  for (uint b = 0; b < QMV_BATCH; b++) {
    for (uint r = 0; r < QMV_ROWS; r++) {
      const float s = simd_sum(acc[b][r]);
      if (lane == 0 && r < live) {
        device float* out = y + ulong(b) * n + row0 + r;
        *out = QMV_ADD ? *out + s : s;
      }
    }
  }
}

template <int BITS>
[[kernel]] void qmv(device const uint* w [[buffer(0)]],
                    device const bfloat* scales [[buffer(1)]],
                    device const bfloat* biases [[buffer(2)]],
                    device const float* x [[buffer(3)]],
                    device float* y [[buffer(4)]],
                    uint group [[threadgroup_position_in_grid]],
                    uint sg [[simdgroup_index_in_threadgroup]],
                    uint lane [[thread_index_in_simdgroup]]) {
  const uint row0 = (group * QMV_SIMDGROUPS + sg) * QMV_ROWS;
  if (row0 >= QMV_N) {
    return;  // the whole simdgroup; there is no barrier
  }
  qmv_rows<BITS, false>(w, scales, biases, x, scales, y, QMV_N, row0, lane);  // no gain read
}

template <int BITS>
[[kernel]] void qmv_norm(device const uint* w [[buffer(0)]],
                         device const bfloat* scales [[buffer(1)]],
                         device const bfloat* biases [[buffer(2)]],
                         device const float* x [[buffer(3)]],
                         device float* y [[buffer(4)]],
                         device const bfloat* gain [[buffer(5)]],
                         uint group [[threadgroup_position_in_grid]],
                         uint sg [[simdgroup_index_in_threadgroup]],
                         uint lane [[thread_index_in_simdgroup]]) {
  const uint row0 = (group * QMV_SIMDGROUPS + sg) * QMV_ROWS;
  if (row0 >= QMV_N) {
    return;  // the whole simdgroup; there is no barrier
  }
  qmv_rows<BITS, true>(w, scales, biases, x, gain, y, QMV_N, row0, lane);
}

// qmv_multi_rows picks group's matrix and rows and computes them.
template <int BITS, bool NORM>
inline void qmv_multi_rows(device const uint* w0, device const bfloat* s0, device const bfloat* b0,
                           device float* y0, device const uint* w1, device const bfloat* s1,
                           device const bfloat* b1, device float* y1, device const uint* w2,
                           device const bfloat* s2, device const bfloat* b2, device float* y2,
                           device const uint* w3, device const bfloat* s3, device const bfloat* b3,
                           device float* y3, device const float* x, device const bfloat* gain,
                           uint group, uint sg, uint lane) {
  const uint rows_per_group = QMV_SIMDGROUPS * QMV_ROWS;
  const uint t0 = (QMV_N + rows_per_group - 1) / rows_per_group;
  const uint t1 = t0 + (QMV_N1 + rows_per_group - 1) / rows_per_group;
  const uint t2 = t1 + (QMV_N2 + rows_per_group - 1) / rows_per_group;
  device const uint* w;
  device const bfloat *s, *b;
  device float* y;
  uint n, first;
  if (group < t0) {
    w = w0, s = s0, b = b0, y = y0, n = QMV_N, first = 0;
  } else if (group < t1) {
    w = w1, s = s1, b = b1, y = y1, n = QMV_N1, first = t0;
  } else if (group < t2) {
    w = w2, s = s2, b = b2, y = y2, n = QMV_N2, first = t1;
  } else {
    w = w3, s = s3, b = b3, y = y3, n = QMV_N3, first = t2;
  }
  const uint row0 = ((group - first) * QMV_SIMDGROUPS + sg) * QMV_ROWS;
  if (row0 >= n) {
    return;  // the whole simdgroup (also a grid larger than the matrices need)
  }
  qmv_rows<BITS, NORM>(w, s, b, x, gain, y, n, row0, lane);
}

template <int BITS>
[[kernel]] void qmv_multi(device const uint* w0 [[buffer(0)]],
                          device const bfloat* s0 [[buffer(1)]],
                          device const bfloat* b0 [[buffer(2)]],
                          device float* y0 [[buffer(3)]],
                          device const uint* w1 [[buffer(4)]],
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
                          device const float* x [[buffer(16)]],
                          uint group [[threadgroup_position_in_grid]],
                          uint sg [[simdgroup_index_in_threadgroup]],
                          uint lane [[thread_index_in_simdgroup]]) {
  qmv_multi_rows<BITS, false>(w0, s0, b0, y0, w1, s1, b1, y1, w2, s2, b2, y2, w3, s3, b3, y3, x,
                              s0, group, sg, lane);  // no gain read
}

template <int BITS>
[[kernel]] void qmv_multi_norm(device const uint* w0 [[buffer(0)]],
                               device const bfloat* s0 [[buffer(1)]],
                               device const bfloat* b0 [[buffer(2)]],
                               device float* y0 [[buffer(3)]],
                               device const uint* w1 [[buffer(4)]],
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
                               device const float* x [[buffer(16)]],
                               device const bfloat* gain [[buffer(17)]],
                               uint group [[threadgroup_position_in_grid]],
                               uint sg [[simdgroup_index_in_threadgroup]],
                               uint lane [[thread_index_in_simdgroup]]) {
  qmv_multi_rows<BITS, true>(w0, s0, b0, y0, w1, s1, b1, y1, w2, s2, b2, y2, w3, s3, b3, y3, x,
                             gain, group, sg, lane);
}

template [[host_name("qmv_q4")]] [[kernel]] decltype(qmv<4>) qmv<4>;
template [[host_name("qmv_q8")]] [[kernel]] decltype(qmv<8>) qmv<8>;
template [[host_name("qmv_norm_q4")]] [[kernel]] decltype(qmv_norm<4>) qmv_norm<4>;
template [[host_name("qmv_norm_q8")]] [[kernel]] decltype(qmv_norm<8>) qmv_norm<8>;
template [[host_name("qmv_multi_q4")]] [[kernel]] decltype(qmv_multi<4>) qmv_multi<4>;
template [[host_name("qmv_multi_q8")]] [[kernel]] decltype(qmv_multi<8>) qmv_multi<8>;
template [[host_name("qmv_multi_norm_q4")]] [[kernel]] decltype(qmv_multi_norm<4>) qmv_multi_norm<4>;
template [[host_name("qmv_multi_norm_q8")]] [[kernel]] decltype(qmv_multi_norm<8>) qmv_multi_norm<8>;
