// attn_decode.metal: decode attention of one token over the KV cache, split over the
// context (flash-decoding), with the GQA group folded into one threadgroup so each K/V row is
// read from device memory once for all the query heads that share it (engine/cpu attention(),
// the part after RoPE):
//
//   s_j = (q_h · k_j) * HD^-1/2          j = 0..pos (causal: the cache holds 0..pos)
//   o_h = Σ_j softmax(s)_j v_j,   out_h = o_h ⊙ sigmoid(gate_h)
//
// attn_decode_partial: grid (NKV, SPLITS) threadgroups of 32·G threads (G = NQ/NKV query heads
// per kv head; 8 for the model: 256 threads). Simdgroup g handles query head kvh·G + g; lane l
// holds dims [l·E, l·E+E) of q and of the output (E = HD/32). The threadgroup walks its chunk of
// positions in tiles of ATTN_TILE rows: the K and V rows of a tile are copied once into
// threadgroup memory ([[threadgroup(0)]]: 2·ATTN_TILE·HD bf16, 16 KiB for HD = 256; with an
// 8-bit cache (ATTN_KV_BITS, attn_rope.metal's format and page pool) 2·ATTN_TILE·HD codes then 2·ATTN_TILE·HD/32
// half scales, 8.5 KiB; 16-byte loads by all threads), then every simdgroup scores them against
// its query (one simd_sum per row; with 8-bit codes a lane's E dims share one block, so its
// partial dot product is scaled once) and folds them into an online softmax in float32 (running max
// m, running sum l, unnormalised output o, rescaled once per tile). It writes the split's
// partial (m, l) and o; a split whose chunk is empty writes the neutral partial
// (-FLT_MAX, 0, zeros). Finite sentinels only: the kernels stay correct under fast math.
//
// The split rule (the grid is sized once, for the maximum context; pos comes from the step
// buffer at run time), n = pos + 1:
//   chunk  = max(ATTN_MIN_CHUNK, roundup(ceil(n / SPLITS), ATTN_TILE))
//   split s covers positions [s·chunk, min((s+1)·chunk, n)); active = ceil(n / chunk) <= SPLITS
// so a short context uses few threadgroups of at least 64 positions and a long one spreads over
// all SPLITS (kernels.AttnSplits picks SPLITS from the maximum context: up to 64 per kv head).
//
// attn_decode_combine: NQ threadgroups (one per query head) of any size (AttnCombineThreads =
// 256: one thread per dim). Over the active splits: M = max m_s, w_s = exp(m_s - M),
// out[d] = (Σ_s w_s o_s[d]) / (Σ_s w_s l_s) * sigmoid(gate[d]), the gate read from the q
// projection ([NQ][query | gate], as attn_qk_rope_kv leaves it). The output is the float32
// [NQ·HD] vector o_proj consumes.
//
// Multi-row decode: R sequences in one dispatch, the row r = the grid's last dimension
// (partial: (NKV, SPLITS, R); combine: (NQ, R)). Row r reads its own position step[2r] ([R]{pos,
// token}) and block table table[r·TABLE_LEN ..] ([R][TABLE_LEN], TABLE_LEN = ceil(MAX_CTX /
// PAGE)) into the shared page pool; q, qg, out, o_part and ml_part hold a row each ([R][...]).
// SPLITS stays the plan's, and a threadgroup reads only its row, so each row takes the one-row
// dispatch's chunks, lanes and order: bit-identical to it whatever R is and whatever the other
// rows hold. R = 1 is the one-row dispatch.
#include <metal_stdlib>
using namespace metal;

constant uint ATTN_NQ [[function_constant(0)]];       // query heads (16)
constant uint ATTN_NKV [[function_constant(1)]];      // kv heads (2)
constant uint ATTN_HD [[function_constant(2)]];       // head dim (256): a multiple of 32, <= 256
constant uint ATTN_MAX_CTX [[function_constant(4)]];  // positions a sequence holds
constant uint ATTN_SPLITS [[function_constant(6)]];   // the grid's splits per kv head
constant uint ATTN_KV_BITS [[function_constant(7)]];  // cache format: 16 (bfloat) or 8 (int8 blocks)
constant uint ATTN_PAGE [[function_constant(8)]];     // positions per page, a multiple of ATTN_TILE
constant uint ATTN_POOL [[function_constant(9)]];     // rows per kv head in the pool

constant uint ATTN_TABLE_LEN = (ATTN_MAX_CTX + ATTN_PAGE - 1) / ATTN_PAGE;  // a sequence's table

#define ATTN_TILE 16
#define ATTN_MIN_CHUNK 64
#define ATTN_MAX_HD 256
#define ATTN_MAX_E 8  // ATTN_MAX_HD / 32

// The positions attended to (0..pos, clamped to the cache) and the chunk per split.
inline uint attn_positions(device const uint* step) { return min(step[0] + 1, ATTN_MAX_CTX); }

inline uint attn_chunk(uint n) {
  uint c = (n + ATTN_SPLITS - 1) / ATTN_SPLITS;
  c = (c + ATTN_TILE - 1) / ATTN_TILE * ATTN_TILE;
  return max(c, uint(ATTN_MIN_CHUNK));
}

kernel void attn_decode_partial(device const float* q_all [[buffer(0)]],     // [R][NQ*HD] rotated
                                device const uchar* k_cache [[buffer(1)]],   // [NKV][POOL][HD]
                                device const uchar* v_cache [[buffer(2)]],   // [NKV][POOL][HD]
                                device const uint* steps [[buffer(3)]],      // [R]{pos, token}
                                device float* o_all [[buffer(4)]],           // [R][NQ][SPLITS][HD]
                                device float2* ml_all [[buffer(5)]],         // [R][NQ][SPLITS]
                                device const uint* tables [[buffer(6)]],     // [R][TABLE_LEN] pages
                                threadgroup uint4* tiles [[threadgroup(0)]],  // K, V tiles: 2*TILE*HD bf16
                                uint3 tg [[threadgroup_position_in_grid]],   // (kv head, split, row)
                                uint tid [[thread_index_in_threadgroup]],
                                uint ntg [[threads_per_threadgroup]],
                                uint sg [[simdgroup_index_in_threadgroup]],
                                uint lane [[thread_index_in_simdgroup]]) {
  const uint G = ATTN_NQ / ATTN_NKV;
  const uint E = ATTN_HD / 32;
  const uint kvh = tg.x, split = tg.y;
  const uint h = kvh * G + sg;
  // the row's sequence: its step, table, queries and partials
  device const uint* step = steps + 2 * tg.z;
  device const uint* table = tables + ulong(tg.z) * ATTN_TABLE_LEN;
  device const float* q = q_all + ulong(tg.z) * ATTN_NQ * ATTN_HD;
  device float* o_part = o_all + ulong(tg.z) * ATTN_NQ * ATTN_SPLITS * ATTN_HD;
  device float2* ml_part = ml_all + ulong(tg.z) * ATTN_NQ * ATTN_SPLITS;
  const uint n = attn_positions(step);
  const uint chunk = attn_chunk(n);
  const uint begin = split * chunk;
  const ulong part = ulong(h) * ATTN_SPLITS + split;

  if (begin >= n) {  // an empty chunk (the same for the whole threadgroup): neutral partial
    for (uint d = lane; d < ATTN_HD; d += 32) {
      o_part[part * ATTN_HD + d] = 0.0f;
    }
    if (lane == 0) {
      ml_part[part] = float2(-FLT_MAX, 0.0f);
    }
    return;
  }
  const uint end = min(begin + chunk, n);
  const float scale = 1.0f / sqrt(float(ATTN_HD));

  float qr[ATTN_MAX_E], o[ATTN_MAX_E];
  for (uint e = 0; e < E; e++) {
    qr[e] = q[h * ATTN_HD + lane * E + e];
    o[e] = 0.0f;
  }
  float m = -FLT_MAX, l = 0.0f;

  // Tiles in threadgroup memory: K then V values (bf16, or int8 codes followed by the K then V
  // block scales). A lane's dims lane·E..lane·E+E-1 lie in one block of 32 (E <= 8).
  const bool q8 = ATTN_KV_BITS == 8;
  const uint SB = ATTN_HD / 32;              // block scales per row
  const uint VB = q8 ? ATTN_HD : 2 * ATTN_HD;  // value bytes per row
  const ulong head_row = ulong(kvh) * ATTN_POOL;
  device const half* k_scales = (device const half*)(k_cache + ulong(ATTN_NKV) * ATTN_POOL * ATTN_HD);
  device const half* v_scales = (device const half*)(v_cache + ulong(ATTN_NKV) * ATTN_POOL * ATTN_HD);
  threadgroup uint4* k_tile = tiles;
  threadgroup uint4* v_tile = tiles + ATTN_TILE * VB / 16;
  threadgroup half* ks_tile = (threadgroup half*)(tiles + 2 * ATTN_TILE * VB / 16);
  threadgroup half* vs_tile = ks_tile + ATTN_TILE * SB;
  threadgroup const bfloat* kt = (threadgroup const bfloat*)k_tile;
  threadgroup const bfloat* vt = (threadgroup const bfloat*)v_tile;
  threadgroup const char* kt8 = (threadgroup const char*)k_tile;
  threadgroup const char* vt8 = (threadgroup const char*)v_tile;
  const uint blk = lane * E / 32;
  for (uint t0 = begin; t0 < end; t0 += ATTN_TILE) {
    const uint rows = min(uint(ATTN_TILE), end - t0);
    // a tile starts at a multiple of ATTN_TILE, so it lies inside one page
    const ulong r0 = head_row + table[t0 / ATTN_PAGE] * ATTN_PAGE + t0 % ATTN_PAGE;
    device const uint4* ks = (device const uint4*)(k_cache + r0 * VB);
    device const uint4* vs = (device const uint4*)(v_cache + r0 * VB);
    for (uint i = tid; i < rows * VB / 16; i += ntg) {
      k_tile[i] = ks[i];
      v_tile[i] = vs[i];
    }
    if (q8) {
      for (uint i = tid; i < rows * SB; i += ntg) {
        ks_tile[i] = k_scales[r0 * SB + i];
        vs_tile[i] = v_scales[r0 * SB + i];
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    float s[ATTN_TILE];
    float mt = m;
    for (uint j = 0; j < rows; j++) {
      float acc = 0.0f;
      if (q8) {
        for (uint e = 0; e < E; e++) {
          acc += qr[e] * float(kt8[j * ATTN_HD + lane * E + e]);
        }
        acc *= float(ks_tile[j * SB + blk]);
      } else {
        for (uint e = 0; e < E; e++) {
          acc += qr[e] * float(kt[j * ATTN_HD + lane * E + e]);
        }
      }
      s[j] = simd_sum(acc) * scale;
      mt = max(mt, s[j]);
    }
    const float corr = exp(m - mt);
    l *= corr;
    for (uint e = 0; e < E; e++) {
      o[e] *= corr;
    }
    for (uint j = 0; j < rows; j++) {
      const float p = exp(s[j] - mt);
      l += p;
      if (q8) {
        const float pv = p * float(vs_tile[j * SB + blk]);
        for (uint e = 0; e < E; e++) {
          o[e] += pv * float(vt8[j * ATTN_HD + lane * E + e]);
        }
      } else {
        for (uint e = 0; e < E; e++) {
          o[e] += p * float(vt[j * ATTN_HD + lane * E + e]);
        }
      }
    }
    m = mt;
    threadgroup_barrier(mem_flags::mem_threadgroup);  // the tile is read; the next may overwrite it
  }
  for (uint e = 0; e < E; e++) {
    o_part[part * ATTN_HD + lane * E + e] = o[e];
  }
  if (lane == 0) {
    ml_part[part] = float2(m, l);
  }
}

kernel void attn_decode_combine(device const float* o_all [[buffer(0)]],     // [R][NQ][SPLITS][HD]
                                device const float2* ml_all [[buffer(1)]],   // [R][NQ][SPLITS]
                                device const float* qg_all [[buffer(2)]],    // [R][NQ][2*HD]: gate
                                device const uint* steps [[buffer(3)]],      // [R]{pos, token}
                                device float* out_all [[buffer(4)]],         // [R][NQ*HD]
                                uint2 tg [[threadgroup_position_in_grid]],   // (query head, row)
                                uint tid [[thread_index_in_threadgroup]],
                                uint ntg [[threads_per_threadgroup]]) {
  const uint h = tg.x;
  // the row's sequence: its step, partials, gates and output
  device const uint* step = steps + 2 * tg.y;
  device const float* o_part = o_all + ulong(tg.y) * ATTN_NQ * ATTN_SPLITS * ATTN_HD;
  device const float2* ml_part = ml_all + ulong(tg.y) * ATTN_NQ * ATTN_SPLITS;
  device const float* qg = qg_all + ulong(tg.y) * ATTN_NQ * 2 * ATTN_HD;
  device float* out = out_all + ulong(tg.y) * ATTN_NQ * ATTN_HD;
  const uint n = attn_positions(step);
  const uint chunk = attn_chunk(n);
  const uint active = (n + chunk - 1) / chunk;
  device const float2* ml = ml_part + ulong(h) * ATTN_SPLITS;
  device const float* op = o_part + ulong(h) * ATTN_SPLITS * ATTN_HD;

  float M = -FLT_MAX;
  for (uint s = 0; s < active; s++) {
    M = max(M, ml[s].x);
  }
  float L = 0.0f;
  for (uint s = 0; s < active; s++) {
    L += ml[s].y * exp(ml[s].x - M);
  }
  for (uint d = tid; d < ATTN_HD; d += ntg) {
    float acc = 0.0f;
    for (uint s = 0; s < active; s++) {
      acc += op[s * ATTN_HD + d] * exp(ml[s].x - M);
    }
    const float g = qg[ulong(h) * 2 * ATTN_HD + ATTN_HD + d];
    out[h * ATTN_HD + d] = acc / L * (1.0f / (1.0f + exp(-g)));
  }
}
