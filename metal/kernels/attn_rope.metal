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
// The KV cache is a pool of pages of ATTN_PAGE positions, [NKV][POOL][HD] per layer (POOL =
// rows per kv head, a whole number of pages); a sequence's position p lives in row
// table[p / PAGE] · PAGE + p % PAGE (the block table, buffer 10, shared by the layers), so
// sequences that share a prefix share its pages. K is stored post-norm and post-RoPE, in one of
// two formats (ATTN_KV_BITS):
//   16: bfloat16 values;
//    8: int8 codes, then (after all NKV·POOL·HD codes) one half scale per block of 32 dims,
//       [NKV][POOL][HD/32]: scale = half(max|x| over the block / 127), code = round(x / scale)
//       clamped to ±127 (0 when the scale is 0), x ≈ code · scale.
// step (buffer 6) is {pos, token}; nothing is written to the cache when pos >= MAX_CTX (the
// positions a sequence may hold).
//
// Geometry: (NQ + NKV, T) threadgroups (18 × 1 for the model's decode step; T tokens of a
// prefill chunk at positions step.pos .. step.pos + T - 1, their rows of qg, k, v and q_out
// consecutive) of any size up to 1024 (AttnRopeThreads =
// 256, one thread per dim for HD = 256). The normalised head goes through threadgroup memory
// (HD <= 512 floats) so a thread can read its RoPE partner.
//
// Multi-row decode (ATTN_SEQ_ROWS set): grid y indexes R different sequences instead of one
// sequence's tokens — row r at its own position step[2r] ([R]{pos, token}) through its own block
// table, table[r·TABLE_LEN ..] ([R][TABLE_LEN], TABLE_LEN = ceil(MAX_CTX / PAGE)), into the shared
// page pool; qg, k, v and q_out hold a row per sequence as in a chunk. A threadgroup reads only
// its row, so each row is bit-identical to a one-row dispatch on it whatever R is. Unset: the
// kernel above (a chunk's tokens, or the one-row decode step at T = 1).
//
// Multimodal RoPE (ATTN_MROPE set): a token (or row) t has three rotary positions, {time,
// height, width}, each its cache slot plus an offset, rope_off[t] (buffer 11, uint32 two's
// complement: an image moves the text after it behind its slots), and frequency i turns by
// theta_i = float(pos + rope_off[t][axis_i]) * inv_freq[i], axis_i = rope_axis[i] (buffer 12, the
// host's table from the config's interleaved sections). Text has three equal offsets, the
// sequence's delta, which stays the same from one decode step to the next: the GPU-resident
// decode loop advances pos alone. Unset, the two buffers are not arguments and the kernel is the
// one above.
#include <metal_stdlib>
using namespace metal;

constant uint ATTN_NQ [[function_constant(0)]];       // query heads (16)
constant uint ATTN_NKV [[function_constant(1)]];      // kv heads (2); NQ is a multiple
constant uint ATTN_HD [[function_constant(2)]];       // head dim (256), at most 512
constant uint ATTN_ROT [[function_constant(3)]];      // rotary dims (64), even, <= HD
constant uint ATTN_MAX_CTX [[function_constant(4)]];  // positions the cache holds
constant float ATTN_EPS [[function_constant(5)]];     // RMSNorm epsilon (1e-6)
constant uint ATTN_KV_BITS [[function_constant(7)]];  // cache format: 16 (bfloat) or 8 (int8 blocks)
constant uint ATTN_PAGE [[function_constant(8)]];     // positions per page, a multiple of 16
constant uint ATTN_POOL [[function_constant(9)]];     // rows per kv head in the pool (pages · PAGE)
constant bool ATTN_SEQ_ROWS_FC [[function_constant(11)]];  // grid y: sequences, not a chunk's tokens
constant bool ATTN_SEQ_ROWS = is_function_constant_defined(ATTN_SEQ_ROWS_FC) && ATTN_SEQ_ROWS_FC;
constant bool ATTN_MROPE_FC [[function_constant(12)]];  // rotary positions per axis (rope_off, rope_axis)
constant bool ATTN_MROPE = is_function_constant_defined(ATTN_MROPE_FC) && ATTN_MROPE_FC;
constant uint ATTN_TABLE_LEN = (ATTN_MAX_CTX + ATTN_PAGE - 1) / ATTN_PAGE;  // a sequence's table

#define ATTN_ROPE_MAX_HD 512

// attn_store_q8 writes dim d of the row starting at value index row (kv head · POOL + the
// position's pool row, times HD) into an 8-bit cache: its code, and the block's scale from the block's 32 values of x
// (every thread of the block computes the same scale; the block's first dim writes it).
template <typename X>
inline void attn_store_q8(device uchar* cache, ulong row, uint d, X x) {
  const uint b0 = d / 32 * 32;
  float amax = 0.0f;
  for (uint i = b0; i < b0 + 32; i++) {
    amax = max(amax, fabs(float(x[i])));
  }
  // precise divisions: the codes are the Go reference's under the file's relaxed math
  const half sc = half(precise::divide(amax, 127.0f));
  const float s = float(sc);
  const float q = s > 0.0f ? clamp(rint(precise::divide(float(x[d]), s)), -127.0f, 127.0f) : 0.0f;
  ((device char*)cache)[row + d] = char(q);
  if (d == b0) {
    device half* scales = (device half*)(cache + ulong(ATTN_NKV) * ATTN_POOL * ATTN_HD);
    scales[row / 32 + d / 32] = sc;
  }
}

// Activation storage (kernels.ActInBF16, ActOutBF16; the chunk form sets both, the decode forms
// neither): qg, k and v are the inputs, q_out the output; set, they are bfloat, widened on load
// and rounded to nearest even on store. The caches keep their formats.
constant bool ATTN_IN_BF16_FC [[function_constant(20)]];
constant bool ATTN_OUT_BF16_FC [[function_constant(21)]];
constant bool ATTN_IN_BF16 = is_function_constant_defined(ATTN_IN_BF16_FC) && ATTN_IN_BF16_FC;
constant bool ATTN_OUT_BF16 = is_function_constant_defined(ATTN_OUT_BF16_FC) && ATTN_OUT_BF16_FC;

inline float attn_act(device const float* p, ulong i) {
  return ATTN_IN_BF16 ? float(((device const bfloat*)p)[i]) : p[i];
}

kernel void attn_qk_rope_kv(device const float* qg [[buffer(0)]],        // [NQ][2*HD]
                            device const float* k [[buffer(1)]],         // [NKV*HD]
                            device const float* v [[buffer(2)]],         // [NKV*HD]
                            device const float* q_norm [[buffer(3)]],    // [HD]
                            device const float* k_norm [[buffer(4)]],    // [HD]
                            device const float* inv_freq [[buffer(5)]],  // [ROT/2]
                            device const uint* step [[buffer(6)]],       // {pos, token} ([R] rows)
                            device float* q_out [[buffer(7)]],           // [NQ*HD]
                            device uchar* k_cache [[buffer(8)]],         // [NKV][POOL][HD]
                            device uchar* v_cache [[buffer(9)]],         // [NKV][POOL][HD]
                            device const uint* table [[buffer(10)]],     // [TABLE_LEN] pages ([R] rows)
                            // ATTN_MROPE only: [T or R][3] offsets from the slot (time, height,
                            // width), and the axis of each frequency [ROT/2]; gated on ATTN_MROPE,
                            // which is false while ATTN_MROPE_FC is unset, so a text-only model's
                            // pipelines (which leave it unset) have no such arguments
                            device const uint* rope_off [[buffer(11), function_constant(ATTN_MROPE)]],
                            device const uint* rope_axis [[buffer(12), function_constant(ATTN_MROPE)]],
                            uint2 tg [[threadgroup_position_in_grid]],  // (head, token or row)
                            uint tid [[thread_index_in_threadgroup]],
                            uint ntg [[threads_per_threadgroup]],
                            uint lane [[thread_index_in_simdgroup]],
                            uint sg [[simdgroup_index_in_threadgroup]],
                            uint nsg [[simdgroups_per_threadgroup]]) {
  threadgroup float y[ATTN_ROPE_MAX_HD];  // the normalised head
  threadgroup float ko[ATTN_ROPE_MAX_HD];  // 8-bit cache: the rotated k row, quantised after
  threadgroup float partial[32];          // Σ x² per simdgroup
  threadgroup float inv_rms;

  // A prefill chunk dispatches one row of threadgroups per token: token t at position step.pos + t,
  // its rows of qg, k, v and q_out t rows in (decode: one token, t = 0). Multi-row decode: row t
  // is a sequence of its own, with its own position and block table.
  const uint head = tg.x, t = tg.y;
  const uint pos = ATTN_SEQ_ROWS ? step[2 * t] : step[0] + t;
  device const uint* table_t = ATTN_SEQ_ROWS ? table + ulong(t) * ATTN_TABLE_LEN : table;
  // element offsets of token t's rows (the activations' element type is the constants')
  const ulong qg_t = ulong(t) * ATTN_NQ * 2 * ATTN_HD, kv_t = ulong(t) * ATTN_NKV * ATTN_HD;
  const ulong q_out_t = ulong(t) * ATTN_NQ * ATTN_HD;
  const bool is_q = head < ATTN_NQ;
  const uint kvh = head - ATTN_NQ;  // meaningful when !is_q
  device const float* x = is_q ? qg : k;
  const ulong x0 = is_q ? qg_t + ulong(head) * 2 * ATTN_HD : kv_t + kvh * ATTN_HD;
  device const float* w = is_q ? q_norm : k_norm;

  float ss = 0.0f;
  for (uint d = tid; d < ATTN_HD; d += ntg) {
    const float xv = attn_act(x, x0 + d);
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
    y[d] = attn_act(x, x0 + d) * r * w[d];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  const uint half_rot = ATTN_ROT / 2;
  // the position's pool row (read only where the cache is written: pos < MAX_CTX)
  const uint prow = !is_q && pos < ATTN_MAX_CTX ? table_t[pos / ATTN_PAGE] * ATTN_PAGE + pos % ATTN_PAGE : 0;
  const ulong row = (ulong(kvh) * ATTN_POOL + prow) * ATTN_HD;
  for (uint d = tid; d < ATTN_HD; d += ntg) {
    float o = y[d];
    if (d < ATTN_ROT) {
      const uint i = d < half_rot ? d : d - half_rot;
      const uint rp = ATTN_MROPE ? pos + rope_off[3 * t + rope_axis[i]] : pos;  // the rotary position
      const float th = float(rp) * inv_freq[i];
      const float c = precise::cos(th), s = precise::sin(th);
      const float a = y[i], b = y[i + half_rot];
      o = d < half_rot ? a * c - b * s : b * c + a * s;
    }
    if (is_q && ATTN_OUT_BF16) {
      ((device bfloat*)q_out)[q_out_t + head * ATTN_HD + d] = bfloat(o);
    } else if (is_q) {
      q_out[q_out_t + head * ATTN_HD + d] = o;
    } else if (pos < ATTN_MAX_CTX && ATTN_KV_BITS == 16) {
      ((device bfloat*)k_cache)[row + d] = bfloat(o);
      ((device bfloat*)v_cache)[row + d] = bfloat(attn_act(v, kv_t + kvh * ATTN_HD + d));
    } else {
      ko[d] = o;
    }
  }
  if (is_q || pos >= ATTN_MAX_CTX || ATTN_KV_BITS == 16) {
    return;  // the same for the whole threadgroup
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const ulong vh = kv_t + kvh * ATTN_HD;
  for (uint d = tid; d < ATTN_HD; d += ntg) {
    attn_store_q8(k_cache, row, d, ko);
    if (ATTN_IN_BF16) {
      attn_store_q8(v_cache, row, d, (device const bfloat*)v + vh);
    } else {
      attn_store_q8(v_cache, row, d, v + vh);
    }
  }
}
