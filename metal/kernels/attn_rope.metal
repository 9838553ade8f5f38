// attn_rope.metal: the per-token preparation of a gated full-attention layer, all heads in one
// dispatch (engine/cpu attention(), before the scores):
//
//   query head h (threadgroups 0..NQ-1), from the q projection laid out [NQ][query(HD) | gate(HD)]:
//     q = RMSNorm(query_h) * q_norm           (x * rsqrt(mean(x^2) + EPS) * w, float32)
//     q = RoPE(q, pos)                        -> q_out[h] (float32); the gate stays where it is
//   kv head j (threadgroups NQ..NQ+NKV-1):
//     k = RoPE(RMSNorm(k_j) * k_norm, pos)    -> k_cache[j][pos] (bfloat16)
//     v_j (not normalised)                    -> v_cache[j][pos] (bfloat16)
//
// RoPE is partial NeoX: dims i and i + ROT/2 for i < ROT/2 rotate by theta_i = float(pos) *
// inv_freq[i] (a float32 product, as engine/cpu), dims ROT..HD-1 pass through:
//   x'_i = x_i cos - x_{i+ROT/2} sin,   x'_{i+ROT/2} = x_{i+ROT/2} cos + x_i sin.
// inv_freq (buffer 5) is the host's table, computed as engine/cpu computes it (kernels.RopeInvFreq:
// 1/float32(pow(theta, float32(2i)/float32(ROT))) with a float64 pow), so the angles are the
// reference's bits; cos and sin are metal::precise (the fast ones are only accurate on [-pi, pi]).
//
// The KV cache is bfloat16 [NKV][MAX_CTX][HD] per layer, K stored post-norm and post-RoPE.
// step (buffer 6) is {pos, token}; nothing is written to the cache when pos >= MAX_CTX.
//
// Geometry: NQ + NKV threadgroups (18 for the model) of any size up to 1024 (AttnRopeThreads =
// 256, one thread per dim for HD = 256). The normalised head goes through threadgroup memory
// (HD <= 512 floats) so a thread can read its RoPE partner.
#include <metal_stdlib>
using namespace metal;

constant uint ATTN_NQ [[function_constant(0)]];       // query heads (16)
constant uint ATTN_NKV [[function_constant(1)]];      // kv heads (2); NQ is a multiple
constant uint ATTN_HD [[function_constant(2)]];       // head dim (256), at most 512
constant uint ATTN_ROT [[function_constant(3)]];      // rotary dims (64), even, <= HD
constant uint ATTN_MAX_CTX [[function_constant(4)]];  // positions the cache holds
constant float ATTN_EPS [[function_constant(5)]];     // RMSNorm epsilon (1e-6)

#define ATTN_ROPE_MAX_HD 512

kernel void attn_qk_rope_kv(device const float* qg [[buffer(0)]],        // [NQ][2*HD]
                            device const float* k [[buffer(1)]],         // [NKV*HD]
                            device const float* v [[buffer(2)]],         // [NKV*HD]
                            device const float* q_norm [[buffer(3)]],    // [HD]
                            device const float* k_norm [[buffer(4)]],    // [HD]
                            device const float* inv_freq [[buffer(5)]],  // [ROT/2]
                            device const uint* step [[buffer(6)]],       // {pos, token}
                            device float* q_out [[buffer(7)]],           // [NQ*HD]
                            device bfloat* k_cache [[buffer(8)]],        // [NKV][MAX_CTX][HD]
                            device bfloat* v_cache [[buffer(9)]],        // [NKV][MAX_CTX][HD]
                            uint head [[threadgroup_position_in_grid]],
                            uint tid [[thread_index_in_threadgroup]],
                            uint ntg [[threads_per_threadgroup]],
                            uint lane [[thread_index_in_simdgroup]],
                            uint sg [[simdgroup_index_in_threadgroup]],
                            uint nsg [[simdgroups_per_threadgroup]]) {
  threadgroup float y[ATTN_ROPE_MAX_HD];  // the normalised head
  threadgroup float partial[32];          // Σ x² per simdgroup
  threadgroup float inv_rms;

  const uint pos = step[0];
  const bool is_q = head < ATTN_NQ;
  const uint kvh = head - ATTN_NQ;  // meaningful when !is_q
  device const float* x = is_q ? qg + ulong(head) * 2 * ATTN_HD : k + kvh * ATTN_HD;
  device const float* w = is_q ? q_norm : k_norm;

  float ss = 0.0f;
  for (uint d = tid; d < ATTN_HD; d += ntg) {
    const float xv = x[d];
    ss += xv * xv;
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
      inv_rms = rsqrt(t / float(ATTN_HD) + ATTN_EPS);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const float r = inv_rms;
  for (uint d = tid; d < ATTN_HD; d += ntg) {
    y[d] = x[d] * r * w[d];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  const uint half_rot = ATTN_ROT / 2;
  const ulong row = (ulong(kvh) * ATTN_MAX_CTX + pos) * ATTN_HD;
  for (uint d = tid; d < ATTN_HD; d += ntg) {
    float o = y[d];
    if (d < ATTN_ROT) {
      const uint i = d < half_rot ? d : d - half_rot;
      const float th = float(pos) * inv_freq[i];
      const float c = precise::cos(th), s = precise::sin(th);
      const float a = y[i], b = y[i + half_rot];
      o = d < half_rot ? a * c - b * s : b * c + a * s;
    }
    if (is_q) {
      q_out[head * ATTN_HD + d] = o;
    } else if (pos < ATTN_MAX_CTX) {
      k_cache[row + d] = bfloat(o);
      v_cache[row + d] = bfloat(v[kvh * ATTN_HD + d]);
    }
  }
}
