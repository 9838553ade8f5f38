// attn_prefill.metal: causal attention for a prefill chunk of T tokens at positions pos0 ..
// pos0+T-1 (step.pos = pos0) over the KV pool (attn_rope.metal's pages and formats), the chunk's
// own K and V already written: flash attention on simdgroup matrices, GQA heads sharing K/V tiles.
//
//   s_j = (q_t,h · k_j) / sqrt(HD) for keys j <= pos0 + t;  o = Σ_j softmax(s)_j v_j;
//   out_t,h = o ⊙ sigmoid(gate_t,h)                         (engine/cpu attention, per token)
//
// Geometry: (NKV, ceil(T / 8)) threadgroups of 32·G threads (G = NQ/NKV query heads per kv head,
// a simdgroup each). Threadgroup (j, b) computes tokens 8b .. 8b+7 of kv head j's G query heads.
// Per tile of 8 keys its threads stage K and V as float (converted from bf16 or from int8 codes
// and their block scale) in threadgroup memory; each simdgroup computes S = Q·Kᵀ (8 tokens × 8
// keys, HD/8 multiply-accumulates over float 8×8 matrices), lanes 0-7 fold a row each into an
// online softmax (causal mask, running max and sum in threadgroup memory), the O accumulator's
// rows are rescaled through thread_elements() (the lane layout the selftest probes), and
// O += P·V (HD/8 more). Keys past the chunk's last position are staged as 0 and masked.
//
// q holds the rotated queries, [ceil(T/8)·8][NQ][HD]: rows past T may hold anything (they are
// computed and not stored). out is [T][NQ·HD] (o_proj's input), qg [T][NQ][2·HD] (the gates).
// Threadgroup memory: 2·8·(HD+4) floats (K and V tiles) + per simdgroup an 8×8 staging tile and
// 24 floats of softmax state, sized for the largest shape: 27 KiB.
#include <metal_stdlib>
using namespace metal;

constant uint ATTN_NQ [[function_constant(0)]];
constant uint ATTN_NKV [[function_constant(1)]];
constant uint ATTN_HD [[function_constant(2)]];       // a multiple of 8, at most 256
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

#define AP_BQ 8           // tokens per threadgroup
#define AP_BK 8           // keys per tile
#define AP_MAX_HD 256
#define AP_MAX_BLOCKS 32  // AP_MAX_HD / 8
#define AP_MAX_G 32
#define AP_KV_TILE 2080   // AP_BK · (AP_MAX_HD + 4) floats
// The K and V tiles' row stride: HD + 4 floats, so that an 8×8 simdgroup_load's rows (or, for
// Kᵀ, its columns) start in different banks of a 32-bank memory (HD, a multiple of 32, would
// start them all in one; see qmm.metal's QMM_LD); the 4 floats after each row are never written
// or read.
#define AP_LD (ATTN_HD + 4)
#define AP_STAGE 2048     // AP_MAX_G · 64 floats

// The float value of dim d of pool row prow of kv head kvh (a bf16 value, or code · scale).
inline float ap_kv(device const uchar* cache, uint kvh, uint prow, uint d) {
  const ulong row = ulong(kvh) * ATTN_POOL + prow;
  if (ATTN_KV_BITS == 8) {
    device const half* scales = (device const half*)(cache + ulong(ATTN_NKV) * ATTN_POOL * ATTN_HD);
    return float(((device const char*)cache)[row * ATTN_HD + d]) * float(scales[row * (ATTN_HD / 32) + d / 32]);
  }
  return float(((device const bfloat*)cache)[row * ATTN_HD + d]);
}

kernel void attn_prefill(device const float* q [[buffer(0)]],        // [ceil(T/8)·8][NQ][HD] rotated
                         device const uchar* k_cache [[buffer(1)]],  // [NKV][POOL][HD]
                         device const uchar* v_cache [[buffer(2)]],  // [NKV][POOL][HD]
                         device const uint* step [[buffer(3)]],      // {pos0, token}
                         device const uint* table [[buffer(4)]],     // [MAX_CTX / PAGE] pages
                         device const float* qg [[buffer(5)]],       // [T][NQ][2·HD]: the gates
                         device float* out [[buffer(6)]],            // [T][NQ·HD]
                         uint2 tg [[threadgroup_position_in_grid]],  // (kv head, token block)
                         uint tid [[thread_index_in_threadgroup]],
                         uint ntg [[threads_per_threadgroup]],
                         uint sg [[simdgroup_index_in_threadgroup]],
                         uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float kt[AP_KV_TILE];  // [AP_BK][AP_LD]
  threadgroup float vt[AP_KV_TILE];  // [AP_BK][AP_LD]
  threadgroup float stage[AP_STAGE];  // per simdgroup [8][8]: S, then P, then O's blocks
  threadgroup float rm[AP_STAGE / 8];    // per simdgroup [8] running max
  threadgroup float rl[AP_STAGE / 8];    // per simdgroup [8] running sum
  threadgroup float rc[AP_STAGE / 8];    // per simdgroup [8] this tile's correction

  const uint G = ATTN_NQ / ATTN_NKV, NB = ATTN_HD / 8;
  const uint kvh = tg.x, h = kvh * G + sg;
  const uint t0 = tg.y * AP_BQ;
  const uint pos0 = step[0];
  const uint tokens = min(uint(AP_BQ), ATTN_T - t0);
  const uint nkeys = min(pos0 + t0 + tokens, ATTN_MAX_CTX);  // keys the block's last token sees
  const float scale = 1.0f / sqrt(float(ATTN_HD));
  threadgroup float* st = stage + sg * 64;

  simdgroup_float8x8 qm[AP_MAX_BLOCKS], om[AP_MAX_BLOCKS];
  for (uint b = 0; b < NB; b++) {
    if (ATTN_IN_BF16) {  // bfloat rows widened through the simdgroup's stage
      for (uint i = lane; i < 64; i += 32) {
        st[i] = attn_act(q, ((ulong(t0) + i / 8) * ATTN_NQ + h) * ATTN_HD + b * 8 + i % 8);
      }
      simdgroup_barrier(mem_flags::mem_threadgroup);
      simdgroup_load(qm[b], st, 8);
      simdgroup_barrier(mem_flags::mem_threadgroup);
    } else {
      simdgroup_load(qm[b], q + (ulong(t0) * ATTN_NQ + h) * ATTN_HD + b * 8, ATTN_NQ * ATTN_HD);
    }
    om[b] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  }
  if (lane < 8) {
    rm[sg * 8 + lane] = -FLT_MAX;
    rl[sg * 8 + lane] = 0.0f;
  }

  for (uint k0 = 0; k0 < nkeys; k0 += AP_BK) {
    threadgroup_barrier(mem_flags::mem_threadgroup);  // the previous tile is read
    for (uint i = tid; i < AP_BK * ATTN_HD; i += ntg) {
      const uint j = i / ATTN_HD, d = i % ATTN_HD, key = k0 + j;
      float kv = 0.0f, vv = 0.0f;
      if (key < nkeys) {
        const uint prow = table[key / ATTN_PAGE] * ATTN_PAGE + key % ATTN_PAGE;
        kv = ap_kv(k_cache, kvh, prow, d);
        vv = ap_kv(v_cache, kvh, prow, d);
      }
      kt[j * AP_LD + d] = kv;
      vt[j * AP_LD + d] = vv;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    simdgroup_float8x8 s = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (uint b = 0; b < NB; b++) {
      simdgroup_float8x8 kb;
      simdgroup_load(kb, kt + b * 8, AP_LD, ulong2(0, 0), true);  // Kᵀ: [dims of block b][keys]
      simdgroup_multiply_accumulate(s, qm[b], kb, s);
    }
    simdgroup_store(s, st, 8);
    simdgroup_barrier(mem_flags::mem_threadgroup);
    if (lane < 8) {  // row `lane`: token t0 + lane, at position pos0 + t0 + lane
      const uint qpos = pos0 + t0 + lane;
      const float m_old = rm[sg * 8 + lane];
      float m = m_old;
      for (uint j = 0; j < AP_BK; j++) {
        if (k0 + j <= qpos && k0 + j < nkeys) {
          m = max(m, st[lane * 8 + j] * scale);
        }
      }
      float sum = 0.0f;
      for (uint j = 0; j < AP_BK; j++) {
        const bool on = k0 + j <= qpos && k0 + j < nkeys;
        const float p = on ? exp(st[lane * 8 + j] * scale - m) : 0.0f;
        st[lane * 8 + j] = p;
        sum += p;
      }
      const float c = exp(m_old - m);
      rc[sg * 8 + lane] = c;
      rl[sg * 8 + lane] = rl[sg * 8 + lane] * c + sum;
      rm[sg * 8 + lane] = m;
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);
    // Rescale O's rows by this tile's correction: this lane's two elements of every block lie
    // in one row (the hardware layout: rows ((l/4)&4) + ((l/2)%4)).
    const float c = rc[sg * 8 + ((lane / 4) & 4) + ((lane / 2) % 4)];
    simdgroup_float8x8 p;
    simdgroup_load(p, st, 8);
    for (uint b = 0; b < NB; b++) {
      om[b].thread_elements() *= c;
      simdgroup_float8x8 vb;
      simdgroup_load(vb, vt + b * 8, AP_LD);
      simdgroup_multiply_accumulate(om[b], p, vb, om[b]);
    }
  }

  // out = O / l ⊙ sigmoid(gate), rows < tokens only, a block of 8 dims at a time.
  for (uint b = 0; b < NB; b++) {
    simdgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_store(om[b], st, 8);
    simdgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = lane; i < 64; i += 32) {
      const uint r = i / 8, d = b * 8 + i % 8;
      if (r < tokens) {
        const ulong t = t0 + r;
        const float g = attn_act(qg, (t * ATTN_NQ + h) * 2 * ATTN_HD + ATTN_HD + d);
        attn_store(out, t * ATTN_NQ * ATTN_HD + h * ATTN_HD + d, st[i] / rl[sg * 8 + r] * (1.0f / (1.0f + exp(-g))));
      }
    }
  }
}
