// attn_prefill_tensor.metal: attn_prefill (attn_prefill.metal: causal flash attention for a
// prefill chunk over the paged KV pool, either format, GQA, the output gate) on Metal 4 tensor
// ops, which run on M5's neural accelerators: the same buffers, constants and semantics, its own
// grid. Compiled only where the device and OS have tensor ops (MSL 4.0 with __HAVE_TENSOR__);
// elsewhere the file is empty and attn_prefill runs.
//
// Geometry: (NKV, ceil(T / BQ)) threadgroups of 4 simdgroups (execution_simdgroups<4>), BQ =
// 32 / G tokens (G = NQ/NKV, which must divide 32). Threadgroup (j, b) computes 32 rows, row r
// being token BQ·b + r/G of query head j·G + r%G: the G heads of a token share the K/V tiles, and
// the 32 rows fill the tensor ops' tile. Per tile of AT_BK keys:
//   S = Q̃·K̃ᵀ (32 × AT_BK, into threadgroup memory), an online softmax per row (4 threads a row:
//   causal mask against the row's own position, running max and sum in threadgroup memory),
//   P̃ = bfloat(P), O = O·c + P̃·Ṽ (O a float cooperative tensor, c the row's correction)
// and out = O / l ⊙ sigmoid(gate) for the rows of real tokens. Q̃ is q rounded to bfloat; K̃ and
// Ṽ are exact from a bf16 cache and code·scale rounded to bfloat from an 8-bit one; l sums the
// rounded P̃, so each row's weights sum to 1 — the only rounding beyond the Go reference's on
// Q̃ is bfloat's of P (and of K and V from an 8-bit cache), which the cases' tolerance bounds.
// O's elements are reached only through get_capacity, is_valid_element,
// get_multidimensional_index and element access, never through a lane layout.
//
// Every tile is AT_D = 256 columns wide (the largest head dim, the model's): Q, K and V are
// staged with zeros past HD, so the ops' shapes are compile-time constants and no op relies on
// edge tiles; a smaller HD computes zero columns that are never stored. K and V take turns in one
// tile: V is staged while the softmax runs, so sharing costs no barrier.
// Threadgroup memory: Q 16 KiB + K/V 8 KiB + S 2 KiB + P 1 KiB + 384 B of row state = 27.4 KiB.
#include <metal_stdlib>
using namespace metal;

#if defined(__HAVE_TENSOR__) && __METAL_VERSION__ >= 400
#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>
using namespace mpp::tensor_ops;

constant uint ATTN_NQ [[function_constant(0)]];
constant uint ATTN_NKV [[function_constant(1)]];
constant uint ATTN_HD [[function_constant(2)]];       // a multiple of 8, at most AT_D
constant uint ATTN_MAX_CTX [[function_constant(4)]];  // positions a sequence holds
constant uint ATTN_KV_BITS [[function_constant(7)]];
constant uint ATTN_PAGE [[function_constant(8)]];
constant uint ATTN_POOL [[function_constant(9)]];
constant uint ATTN_T [[function_constant(10)]];       // tokens in the chunk
// Activation storage (kernels.ActInBF16, ActOutBF16), as the chunk mode stores them: q and qg are
// the inputs, out the output; set, they are bfloat, widened on load and rounded to nearest even
// on store.
constant bool ATTN_IN_BF16_FC [[function_constant(20)]];
constant bool ATTN_OUT_BF16_FC [[function_constant(21)]];
constant bool ATTN_IN_BF16 = is_function_constant_defined(ATTN_IN_BF16_FC) && ATTN_IN_BF16_FC;
constant bool ATTN_OUT_BF16 = is_function_constant_defined(ATTN_OUT_BF16_FC) && ATTN_OUT_BF16_FC;

inline float attn_act(device const float* p, ulong i) {
  return ATTN_IN_BF16 ? float(((device const bfloat*)p)[i]) : p[i];
}

inline void attn_store(device float* p, ulong i, float v) {
  if (ATTN_OUT_BF16) {
    ((device bfloat*)p)[i] = bfloat(v);
  } else {
    p[i] = v;
  }
}

#define AT_ROWS 32     // (token, head) rows per threadgroup
#define AT_BK 16       // keys per tile
#define AT_D 256       // the tiles' width: the largest head dim
#define AT_THREADS 128
#define AT_RT 4        // softmax threads a row: AT_ROWS · AT_RT = AT_THREADS

typedef tensor<threadgroup bfloat, dextents<int32_t, 2>, tensor_inline> at_tile;
typedef tensor<threadgroup float, dextents<int32_t, 2>, tensor_inline> at_ftile;

// at_qk is S = Q̃ (32 × AT_D) · K̃ᵀ (K̃ given as AT_BK × AT_D, transposed on the right).
using at_qk = matmul2d<matmul2d_descriptor(AT_ROWS, AT_BK, AT_D, false, true, false, matmul2d_descriptor::mode::multiply),
                       execution_simdgroups<4>>;
// at_pv is O += P̃ (32 × AT_BK) · Ṽ (AT_BK × AT_D).
using at_pv = matmul2d<matmul2d_descriptor(AT_ROWS, AT_D, AT_BK, false, false, false,
                                           matmul2d_descriptor::mode::multiply_accumulate),
                       execution_simdgroups<4>>;
// at_acc is O: a float cooperative tensor of at_pv's destination layout, made only by
// at_pv::get_destination_cooperative_tensor (at_dest).
using at_acc = at_pv::cooperative_tensor_destination_t<at_tile, at_tile, float, int>;

// at_dest is a new O (poison until zeroed) of at_pv's destination layout.
inline at_acc at_dest() {
  at_pv op;
  return op.get_destination_cooperative_tensor<at_tile, at_tile, float>();
}

// at_mem is a threadgroup's memory: Q̃, the K/V tile, S, P̃ and each row's running max m, sum l
// and this tile's correction c.
struct at_mem {
  bfloat q[AT_ROWS * AT_D];
  bfloat kv[AT_BK * AT_D];
  float s[AT_ROWS * AT_BK];
  bfloat p[AT_ROWS * AT_BK];
  float m[AT_ROWS], l[AT_ROWS], c[AT_ROWS];
};

// at_kv4 is dims d .. d+3 of pool row `row` as float: bf16 values, or 8-bit codes times their
// block's scale (d a multiple of 4, so the four share a block of 32).
inline float4 at_kv4(device const uchar* cache, ulong row, uint d) {
  if (ATTN_KV_BITS == 8) {
    device const half* scales = (device const half*)(cache + ulong(ATTN_NKV) * ATTN_POOL * ATTN_HD);
    const float4 codes = float4(*(device const char4*)(cache + row * ATTN_HD + d));
    return codes * float(scales[row * (ATTN_HD / 32) + d / 32]);
  }
  return float4(*(device const bfloat4*)((device const bfloat*)cache + row * ATTN_HD + d));
}

// at_stage_q writes Q̃ of the threadgroup's rows into t.q (rows of tokens past the chunk, and
// columns past HD, as 0: q holds only whole blocks of 8 rows).
inline void at_stage_q(device const float* q, uint kvh, uint t0, uint tid, threadgroup at_mem& t) {
  const uint G = ATTN_NQ / ATTN_NKV, C = AT_D / 4;
  for (uint i = tid; i < AT_ROWS * C; i += AT_THREADS) {
    const uint r = i / C, d = (i % C) * 4, tok = t0 + r / G;
    float4 v = float4(0.0f);
    if (tok < ATTN_T && d < ATTN_HD) {
      const ulong at = (ulong(tok) * ATTN_NQ + kvh * G + r % G) * ATTN_HD + d;
      v = ATTN_IN_BF16 ? float4(*(device const bfloat4*)((device const bfloat*)q + at)) : *(device const float4*)(q + at);
    }
    *(threadgroup bfloat4*)(t.q + r * AT_D + d) = bfloat4(v);
  }
}

// at_stage_kv writes keys k0 .. k0+AT_BK-1 of kv head kvh from cache into t.kv as bfloat
// [AT_BK][AT_D] (keys at or past nkeys, and columns past HD, as 0).
inline void at_stage_kv(device const uchar* cache, device const uint* table, uint kvh, uint k0, uint nkeys, uint tid,
                        threadgroup at_mem& t) {
  const uint C = AT_D / 4;
  for (uint i = tid; i < AT_BK * C; i += AT_THREADS) {
    const uint j = i / C, d = (i % C) * 4, key = k0 + j;
    float4 v = float4(0.0f);
    if (key < nkeys && d < ATTN_HD) {
      v = at_kv4(cache, ulong(kvh) * ATTN_POOL + table[key / ATTN_PAGE] * ATTN_PAGE + key % ATTN_PAGE, d);
    }
    *(threadgroup bfloat4*)(t.kv + j * AT_D + d) = bfloat4(v);
  }
}

// at_softmax folds the tile's scores into row tid / AT_RT's online softmax, AT_RT threads a row
// and AT_BK / AT_RT keys a thread: key k0 + j counts for a row at position qpos if k0 + j <= qpos
// and k0 + j < nkeys. It writes P̃ = bfloat(exp(s − m)), the new max and sum (of P̃) and the
// correction exp(m_old − m) that O's row takes.
inline void at_softmax(threadgroup at_mem& t, uint k0, uint nkeys, uint qpos0, uint tid) {
  const uint KT = AT_BK / AT_RT, r = tid / AT_RT, j0 = (tid % AT_RT) * KT;
  const uint qpos = qpos0 + r / (ATTN_NQ / ATTN_NKV);
  const float scale = 1.0f / sqrt(float(ATTN_HD));
  const float m_old = t.m[r];
  float s[KT];
  float m = m_old;
  for (uint j = 0; j < KT; j++) {
    const uint key = k0 + j0 + j;
    s[j] = t.s[r * AT_BK + j0 + j] * scale;
    if (key <= qpos && key < nkeys) {
      m = max(m, s[j]);
    }
  }
  for (ushort d = 1; d < AT_RT; d *= 2) {
    m = max(m, simd_shuffle_xor(m, d));
  }
  float sum = 0.0f;
  for (uint j = 0; j < KT; j++) {
    const uint key = k0 + j0 + j;
    const bfloat p = key <= qpos && key < nkeys ? bfloat(exp(s[j] - m)) : bfloat(0.0f);
    t.p[r * AT_BK + j0 + j] = p;
    sum += float(p);
  }
  for (ushort d = 1; d < AT_RT; d *= 2) {
    sum += simd_shuffle_xor(sum, d);
  }
  if (tid % AT_RT == 0) {
    const float c = exp(m_old - m);
    t.c[r] = c;
    t.l[r] = t.l[r] * c + sum;
    t.m[r] = m;
  }
}

// at_store writes out = O / l ⊙ sigmoid(gate) for the rows of real tokens and the columns < HD.
inline void at_store(thread at_acc& acc, threadgroup at_mem& t, device const float* qg, device float* out, uint kvh,
                     uint t0) {
  const uint G = ATTN_NQ / ATTN_NKV;
  for (uint16_t i = 0; i < acc.get_capacity(); i++) {
    if (acc.is_valid_element(i)) {
      const auto ix = acc.get_multidimensional_index(i);  // ix[0]: dim, ix[1]: row
      const uint r = uint(ix[1]), d = uint(ix[0]);
      const ulong tok = t0 + r / G, h = kvh * G + r % G;
      if (tok < ATTN_T && d < ATTN_HD) {
        const float g = attn_act(qg, (tok * ATTN_NQ + h) * 2 * ATTN_HD + ATTN_HD + d);
        attn_store(out, tok * ATTN_NQ * ATTN_HD + h * ATTN_HD + d, acc[i] / t.l[r] * (1.0f / (1.0f + exp(-g))));
      }
    }
  }
}

kernel void attn_prefill_tensor(device const float* q [[buffer(0)]],        // [ceil(T/8)·8][NQ][HD] rotated
                                device const uchar* k_cache [[buffer(1)]],  // [NKV][POOL][HD]
                                device const uchar* v_cache [[buffer(2)]],  // [NKV][POOL][HD]
                                device const uint* step [[buffer(3)]],      // {pos0, token}
                                device const uint* table [[buffer(4)]],     // [MAX_CTX / PAGE] pages
                                device const float* qg [[buffer(5)]],       // [T][NQ][2·HD]: the gates
                                device float* out [[buffer(6)]],            // [T][NQ·HD]
                                uint2 tg [[threadgroup_position_in_grid]],  // (kv head, token block)
                                uint tid [[thread_index_in_threadgroup]]) {
  threadgroup at_mem t;
  const uint BQ = AT_ROWS / (ATTN_NQ / ATTN_NKV), kvh = tg.x, t0 = tg.y * BQ, pos0 = step[0];
  const uint nkeys = min(pos0 + min(t0 + BQ, ATTN_T), ATTN_MAX_CTX);  // keys the block's last token sees
  at_tile tq(t.q, dextents<int32_t, 2>(AT_D, AT_ROWS));
  at_tile tk(t.kv, dextents<int32_t, 2>(AT_D, AT_BK));  // K̃, then Ṽ
  at_ftile ts(t.s, dextents<int32_t, 2>(AT_BK, AT_ROWS));
  at_tile tp(t.p, dextents<int32_t, 2>(AT_BK, AT_ROWS));
  at_qk qk;
  at_pv pv;
  auto acc = at_dest();
  for (uint16_t i = 0; i < acc.get_capacity(); i++) {
    if (acc.is_valid_element(i)) {
      acc[i] = 0.0f;
    }
  }
  at_stage_q(q, kvh, t0, tid, t);
  if (tid < AT_ROWS) {
    t.m[tid] = -FLT_MAX;
    t.l[tid] = 0.0f;
  }
  for (uint k0 = 0; k0 < nkeys; k0 += AT_BK) {
    threadgroup_barrier(mem_flags::mem_threadgroup);  // the previous tile's Ṽ and P̃ are read
    at_stage_kv(k_cache, table, kvh, k0, nkeys, tid, t);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    qk.run(tq, tk, ts);
    threadgroup_barrier(mem_flags::mem_threadgroup);  // S is written and K̃ read: Ṽ takes the tile
    at_stage_kv(v_cache, table, kvh, k0, nkeys, tid, t);
    at_softmax(t, k0, nkeys, pos0 + t0, tid);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint16_t i = 0; i < acc.get_capacity(); i++) {
      if (acc.is_valid_element(i)) {
        acc[i] *= t.c[acc.get_multidimensional_index(i)[1]];
      }
    }
    pv.run(tp, tk, acc);
  }
  at_store(acc, t, qg, out, kvh, t0);
}
#endif
