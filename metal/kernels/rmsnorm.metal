// rmsnorm.metal: residual add fused with RMSNorm, one threadgroup per row.
//
//   h       = x[row] + d[row]                 written to res[row] (res may alias x)
//   out[row] = h * rsqrt(mean(h*h) + EPS) * w  (w: bf16 gain, stored as the checkpoint has it)
//
// Any threadgroup size up to 1024 works (256 is the intended one); the row is read and written
// with a stride of the threadgroup size, so neighbouring threads touch neighbouring floats.
#include <metal_stdlib>
using namespace metal;

constant uint H [[function_constant(0)]];     // row width: 2048 for the model's hidden size
constant float EPS [[function_constant(1)]];  // 1e-6 for the model
// Activation storage (kernels.ActInBF16, ActOutBF16), as the chunk mode stores them: d is the
// input, out the output; set, they are bfloat (widened on load, rounded to nearest even on
// store). x and res, the residual stream, are always float32.
constant bool IN_BF16_FC [[function_constant(20)]];
constant bool OUT_BF16_FC [[function_constant(21)]];
constant bool IN_BF16 = is_function_constant_defined(IN_BF16_FC) && IN_BF16_FC;
constant bool OUT_BF16 = is_function_constant_defined(OUT_BF16_FC) && OUT_BF16_FC;

kernel void add_rmsnorm(device const float* x [[buffer(0)]],
                        device const float* d [[buffer(1)]],
                        device const bfloat* w [[buffer(2)]],
                        device float* res [[buffer(3)]],
                        device float* out [[buffer(4)]],
                        uint row [[threadgroup_position_in_grid]],
                        uint tid [[thread_index_in_threadgroup]],
                        uint ntg [[threads_per_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]],
                        uint sg [[simdgroup_index_in_threadgroup]],
                        uint nsg [[simdgroups_per_threadgroup]]) {
  threadgroup float partial[32];  // one sum of squares per simdgroup
  threadgroup float inv_rms;

  const ulong base = ulong(row) * H;
  float ss = 0.0f;
  for (uint i = tid; i < H; i += ntg) {
    const float h = x[base + i] + (IN_BF16 ? float(((device const bfloat*)d)[base + i]) : d[base + i]);
    res[base + i] = h;
    ss += h * h;
  }
  ss = simd_sum(ss);
  if (lane == 0) {
    partial[sg] = ss;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (sg == 0) {
    float t = lane < nsg ? partial[lane] : 0.0f;
    t = simd_sum(t);
    if (lane == 0) {
      inv_rms = rsqrt(t / float(H) + EPS);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  const float r = inv_rms;
  for (uint i = tid; i < H; i += ntg) {
    const float v = res[base + i] * r * float(w[i]);  // this thread wrote res[base + i] above
    if (OUT_BF16) {
      ((device bfloat*)out)[base + i] = bfloat(v);
    } else {
      out[base + i] = v;
    }
  }
}
