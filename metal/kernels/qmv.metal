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
#include <metal_stdlib>
using namespace metal;

constant uint QMV_N [[function_constant(0)]];  // rows of W: output features
constant uint QMV_K [[function_constant(1)]];  // columns of W: input features, a multiple of 64

#define QMV_ROWS 4
#define QMV_SIMDGROUPS 2
#define QMV_VALUES 16  // values per lane per step

template <int BITS>
[[kernel]] void qmv(device const uint* w [[buffer(0)]],
                    device const bfloat* scales [[buffer(1)]],
                    device const bfloat* biases [[buffer(2)]],
                    device const float* x [[buffer(3)]],
                    device float* y [[buffer(4)]],
                    uint group [[threadgroup_position_in_grid]],
                    uint sg [[simdgroup_index_in_threadgroup]],
                    uint lane [[thread_index_in_simdgroup]]) {
  constexpr uint PER_HALF = 16 / BITS;         // values per 16-bit half-word
  constexpr uint HALVES = QMV_VALUES / PER_HALF;  // half-words per row per step
  const uint halves_per_row = QMV_K / PER_HALF;
  const uint groups_per_row = QMV_K / 64;
  const uint row0 = (group * QMV_SIMDGROUPS + sg) * QMV_ROWS;
  device const ushort* codes = (device const ushort*)w;

  float acc[QMV_ROWS] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (uint k = lane * QMV_VALUES; k < QMV_K; k += 32 * QMV_VALUES) {
    // x, pre-divided by the place value of each code inside its half-word.
    float xs[QMV_VALUES];
    float xsum = 0.0f;
    for (uint i = 0; i < QMV_VALUES; i += 4) {
      const float4 v = *(device const float4*)(x + k + i);
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
    const uint g = k / 64;
    for (uint r = 0; r < QMV_ROWS; r++) {
      const uint row = row0 + r;
      if (row >= QMV_N) {
        break;  // the same for the whole simdgroup
      }
      device const ushort* q = codes + ulong(row) * halves_per_row + k / PER_HALF;
      float qx = 0.0f;
      for (uint h = 0; h < HALVES; h++) {
        const ushort c = q[h];
        if (BITS == 4) {
          qx += xs[4 * h] * float(c & 0x000fu) + xs[4 * h + 1] * float(c & 0x00f0u) +
                xs[4 * h + 2] * float(c & 0x0f00u) + xs[4 * h + 3] * float(c & 0xf000u);
        } else {
          qx += xs[2 * h] * float(c & 0x00ffu) + xs[2 * h + 1] * float(c & 0xff00u);
        }
      }
      const ulong gi = ulong(row) * groups_per_row + g;
      acc[r] += float(scales[gi]) * qx + float(biases[gi]) * xsum;
    }
  }
  for (uint r = 0; r < QMV_ROWS; r++) {
    const float s = simd_sum(acc[r]);
    if (lane == 0 && row0 + r < QMV_N) {
      y[row0 + r] = s;
    }
  }
}

template [[host_name("qmv_q4")]] [[kernel]] decltype(qmv<4>) qmv<4>;
template [[host_name("qmv_q8")]] [[kernel]] decltype(qmv<8>) qmv<8>;
