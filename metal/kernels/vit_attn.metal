// vit_attn.metal: the vision tower's attention over one image's N patches and its position
// embedding (engine/vision's float32 forward pass is the reference).
//
// vit_attention: non-causal multi-head attention, the 2-D rotary applied to q and k as they load.
//
//   qkv [N][3·D] (D = HEADS·HD): q | k | v, each head-major; out [N][D], head-major.
//   q', k' = x·cos θ + rotate_half(x)·sin θ, rotate_half(x) = [−x[HD/2:], x[:HD/2]];
//   θ_j = row·inv_j (j < HD/4), col·inv_(j−HD/4) (HD/4 ≤ j < HD/2), θ_(j+HD/2) = θ_j, where
//   (row, col) is the patch's place in the grid (block-major order: 2×2 merge blocks row-major,
//   the block's patches row-major) and inv_freq holds the HD/4 inverse frequencies, computed on
//   the host as engine/vision does (so the kernel needs no pow);
//   out_p = Σ_j softmax_j(q'_p · k'_j / √HD) v_j over every patch j.
//
// Geometry: (⌈N/32⌉, HEADS) threadgroups of 128 threads (4 simdgroups). Threadgroup (b, h)
// computes queries 32b … 32b+31 of head h, 8 a simdgroup, held rotated in HD/8 float 8×8
// matrices. Keys stream in tiles of 32 (flash attention: never an N×N buffer): the threadgroup
// stages the tile's rotated K and its V as float in threadgroup memory (keys past N as 0,
// masked), each simdgroup computes S = Q·Kᵀ (8 × 32, four 8×8 blocks of HD/8 multiply-
// accumulates), folds it into an online softmax (4 lanes a row, 8 keys a lane, the row's max
// and sum combined across its lanes by xor shuffles: a fixed tree), rescales O's rows and adds
// O += P·V. Every output's arithmetic is fixed by N and HD alone (tiles in key order, fixed
// lanes), whatever the thread schedule: deterministic.
//
// cos and sin are metal::precise (the file is Relaxed, which would make the plain ones fast):
// θ reaches ~100 radians on a large image, where the fast forms lose absolute accuracy.
// Threadgroup memory: 2 tiles of 32·(MAX_HD+4) floats + 4·8·32 floats of scores: 29 KiB.
//
// vit_pos_embed: h[p] += the bilinear resample of the SIDE×SIDE learned table (bfloat rows of D)
// at patch p's (row, col), as engine/vision's positionEmbeddings: the taps and weights of each
// grid row and of each grid column are computed on the host (kernels.ViTPosAxis: transformers'
// float32 convention, aligned corners) and passed as [n][4] words {tap0, tap1, bits(w0),
// bits(w1)}; the four products tap(row a, col b)·(w_row[a]·w_col[b]) are summed in the order
// (0,0), (0,1), (1,0), (1,1). Geometry: a threadgroup per patch, any size, striding over D.
#include <metal_stdlib>
using namespace metal;

// Each kernel reads only its own constants (and VIT_GW); the others are declared optional
// (defaulting to 0, never read) so that a dispatch sets just what its kernel uses.
constant uint VIT_HD_FC [[function_constant(0)]];     // head dim: a multiple of 8, at most 96 (72)
constant uint VIT_HEADS_FC [[function_constant(1)]];  // heads (16)
constant uint VIT_N_FC [[function_constant(2)]];      // patches
constant uint VIT_GW [[function_constant(3)]];        // grid width in patches, even
constant uint VIT_D_FC [[function_constant(4)]];      // vit_pos_embed: hidden size (1152)
constant uint VIT_SIDE_FC [[function_constant(5)]];   // vit_pos_embed: the table's side (48)
constant uint VIT_HD = is_function_constant_defined(VIT_HD_FC) ? VIT_HD_FC : 0;
constant uint VIT_HEADS = is_function_constant_defined(VIT_HEADS_FC) ? VIT_HEADS_FC : 0;
constant uint VIT_N = is_function_constant_defined(VIT_N_FC) ? VIT_N_FC : 0;
constant uint VIT_D = is_function_constant_defined(VIT_D_FC) ? VIT_D_FC : 0;
constant uint VIT_SIDE = is_function_constant_defined(VIT_SIDE_FC) ? VIT_SIDE_FC : 0;

#define VA_BQ 8          // queries per simdgroup
#define VA_SG 4          // simdgroups per threadgroup
#define VA_ROWS 32       // VA_BQ · VA_SG: queries per threadgroup
#define VA_BK 32         // keys per tile
#define VA_MAX_HD 96
#define VA_TILE 3200     // VA_BK · (VA_MAX_HD + 4) floats
#define VA_STAGE 1024    // VA_SG · VA_BQ · VA_BK floats
// Tile rows are HD + 4 floats apart so that an 8×8 load's rows (or Kᵀ's columns) start in
// different banks (see attn_prefill.metal); the 4 floats after each row are never read.
#define VA_LD (VIT_HD + 4)

// The (row, col) of block-major patch p: merge blocks of 2×2 row-major, patches row-major inside.
inline uint2 vit_patch_at(uint p) {
  const uint bw = VIT_GW / 2, blk = p / 4, in = p % 4;
  return uint2((blk / bw) * 2 + in / 2, (blk % bw) * 2 + in % 2);
}

// Writes dims jj and jj + HD/2 of src (a q or k head row of patch p) rotated into dst: the two
// dims share the angle, and each needs the other (rotate_half), so a thread does the pair.
inline void vit_rotate_pair(threadgroup float* dst, device const float* src, uint p, uint jj,
                            device const float* inv_freq) {
  const uint half_hd = VIT_HD / 2, quarter = VIT_HD / 4;
  const uint2 rc = vit_patch_at(p);
  const float a = float(jj < quarter ? rc.x : rc.y) * inv_freq[jj % quarter];
  const float cs = precise::cos(a), sn = precise::sin(a);
  const float x0 = src[jj], x1 = src[jj + half_hd];
  dst[jj] = x0 * cs - x1 * sn;
  dst[jj + half_hd] = x1 * cs + x0 * sn;
}

// The row's online-softmax step for one tile: this lane's 8 scores of row lane/4 (keys
// k0 + 8·(lane%4) …) become exp(s − m_new) in place; m and l (the row's running max and sum, the
// same in its 4 lanes) are updated; it returns the correction exp(m_old − m_new) for O's row.
inline float vit_softmax_tile(threadgroup float* s, uint k0, uint lane, thread float& m, thread float& l) {
  const uint row = lane / 4, first = (lane % 4) * 8;
  const float scale = 1.0f / sqrt(float(VIT_HD));
  float mt = m;
  for (uint i = 0; i < 8; i++) {
    if (k0 + first + i < VIT_N) {
      mt = max(mt, s[row * VA_BK + first + i] * scale);
    }
  }
  mt = max(mt, simd_shuffle_xor(mt, ushort(1)));
  mt = max(mt, simd_shuffle_xor(mt, ushort(2)));
  float sum = 0.0f;
  for (uint i = 0; i < 8; i++) {
    const bool on = k0 + first + i < VIT_N;
    const float p = on ? exp(s[row * VA_BK + first + i] * scale - mt) : 0.0f;
    s[row * VA_BK + first + i] = p;
    sum += p;
  }
  // a + b is b + a in IEEE arithmetic, so both lanes of each step hold the same sum.
  sum += simd_shuffle_xor(sum, ushort(1));
  sum += simd_shuffle_xor(sum, ushort(2));
  const float c = exp(m - mt);
  l = l * c + sum;
  m = mt;
  return c;
}

// Stages keys k0 … k0+31 of head h: K rotated into kt, V into vt, keys past N as 0.
inline void vit_stage_kv(threadgroup float* kt, threadgroup float* vt, device const float* qkv,
                         device const float* inv_freq, uint h, uint k0, uint tid, uint ntg) {
  const uint D = VIT_HEADS * VIT_HD, half_hd = VIT_HD / 2;
  for (uint i = tid; i < VA_BK * half_hd; i += ntg) {
    const uint j = i / half_hd, jj = i % half_hd, key = k0 + j;
    threadgroup float* kd = kt + j * VA_LD;
    threadgroup float* vd = vt + j * VA_LD;
    if (key < VIT_N) {
      device const float* row = qkv + ulong(key) * 3 * D + h * VIT_HD;
      vit_rotate_pair(kd, row + D, key, jj, inv_freq);
      vd[jj] = row[2 * D + jj];
      vd[jj + half_hd] = row[2 * D + jj + half_hd];
    } else {
      kd[jj] = kd[jj + half_hd] = 0.0f;
      vd[jj] = vd[jj + half_hd] = 0.0f;
    }
  }
}

kernel void vit_attention(device const float* qkv [[buffer(0)]],       // [N][3·D]
                          device const float* inv_freq [[buffer(1)]],  // [HD/4]
                          device float* out [[buffer(2)]],             // [N][D]
                          uint2 tg [[threadgroup_position_in_grid]],    // (query block, head)
                          uint tid [[thread_index_in_threadgroup]],
                          uint ntg [[threads_per_threadgroup]],
                          uint sg [[simdgroup_index_in_threadgroup]],
                          uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float kt[VA_TILE];  // [VA_BK][VA_LD] rotated keys (first: the rotated queries)
  threadgroup float vt[VA_TILE];  // [VA_BK][VA_LD] values
  threadgroup float stage[VA_STAGE];  // per simdgroup [8][32]: S, then P

  const uint D = VIT_HEADS * VIT_HD, NB = VIT_HD / 8, half_hd = VIT_HD / 2;
  const uint h = tg.y, q0 = tg.x * VA_ROWS;
  threadgroup float* st = stage + sg * VA_BQ * VA_BK;

  // The threadgroup's 32 queries, rotated, through kt (its 32 rows; rows past N as 0).
  for (uint i = tid; i < VA_ROWS * half_hd; i += ntg) {
    const uint r = i / half_hd, jj = i % half_hd, p = q0 + r;
    threadgroup float* dst = kt + r * VA_LD;
    if (p < VIT_N) {
      vit_rotate_pair(dst, qkv + ulong(p) * 3 * D + h * VIT_HD, p, jj, inv_freq);
    } else {
      dst[jj] = dst[jj + half_hd] = 0.0f;
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_float8x8 qm[VA_MAX_HD / 8], om[VA_MAX_HD / 8];
  for (uint b = 0; b < NB; b++) {
    simdgroup_load(qm[b], kt + sg * VA_BQ * VA_LD + b * 8, VA_LD);
    om[b] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  }
  float m = -FLT_MAX, l = 0.0f;  // row lane/4's running max and sum

  for (uint k0 = 0; k0 < VIT_N; k0 += VA_BK) {
    threadgroup_barrier(mem_flags::mem_threadgroup);  // Q, or the previous tile, is read
    vit_stage_kv(kt, vt, qkv, inv_freq, h, k0, tid, ntg);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint kb = 0; kb < VA_BK / 8; kb++) {
      simdgroup_float8x8 s = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
      for (uint b = 0; b < NB; b++) {
        simdgroup_float8x8 km;
        simdgroup_load(km, kt + kb * 8 * VA_LD + b * 8, VA_LD, ulong2(0, 0), true);  // Kᵀ
        simdgroup_multiply_accumulate(s, qm[b], km, s);
      }
      simdgroup_store(s, st + kb * 8, VA_BK);
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);
    const float c = vit_softmax_tile(st, k0, lane, m, l);
    simdgroup_barrier(mem_flags::mem_threadgroup);
    // This lane's two elements of each O block lie in row ((lane/4)&4) + ((lane/2)%4) (the
    // hardware layout); that row's correction is held by lane 4·row.
    const float co = simd_shuffle(c, ushort(4 * (((lane / 4) & 4) + ((lane / 2) % 4))));
    for (uint b = 0; b < NB; b++) {
      om[b].thread_elements() *= co;
    }
    for (uint kb = 0; kb < VA_BK / 8; kb++) {
      simdgroup_float8x8 pm;
      simdgroup_load(pm, st + kb * 8, VA_BK);
      for (uint b = 0; b < NB; b++) {
        simdgroup_float8x8 vm;
        simdgroup_load(vm, vt + kb * 8 * VA_LD + b * 8, VA_LD);
        simdgroup_multiply_accumulate(om[b], pm, vm, om[b]);
      }
    }
  }

  // out = O / l for the rows inside N, a block of 8 dims at a time through st.
  const float l_lo = simd_shuffle(l, ushort(4 * (lane / 8))), l_hi = simd_shuffle(l, ushort(4 * (lane / 8 + 4)));
  for (uint b = 0; b < NB; b++) {
    simdgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_store(om[b], st, 8);
    simdgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = lane; i < 64; i += 32) {
      const uint p = q0 + sg * VA_BQ + i / 8;
      if (p < VIT_N) {
        out[ulong(p) * D + h * VIT_HD + b * 8 + i % 8] = st[i] / (i < 32 ? l_lo : l_hi);
      }
    }
  }
}

kernel void vit_pos_embed(device float* h [[buffer(0)]],             // [N][D], updated in place
                          device const bfloat* table [[buffer(1)]],  // [SIDE·SIDE][D]
                          device const uint* rows [[buffer(2)]],     // [GH][4]: taps, weight bits
                          device const uint* cols [[buffer(3)]],     // [GW][4]
                          uint p [[threadgroup_position_in_grid]],
                          uint tid [[thread_index_in_threadgroup]],
                          uint ntg [[threads_per_threadgroup]]) {
  const uint2 rc = vit_patch_at(p);
  device const uint* ra = rows + 4 * rc.x;
  device const uint* ca = cols + 4 * rc.y;
  ulong at[4];
  float w[4];
  for (uint a = 0; a < 2; a++) {
    for (uint b = 0; b < 2; b++) {
      at[2 * a + b] = ulong(ra[a] * VIT_SIDE + ca[b]) * VIT_D;
      w[2 * a + b] = as_type<float>(ra[2 + a]) * as_type<float>(ca[2 + b]);
    }
  }
  for (uint d = tid; d < VIT_D; d += ntg) {
    float s = float(table[at[0] + d]) * w[0];
    s += float(table[at[1] + d]) * w[1];
    s += float(table[at[2] + d]) * w[2];
    s += float(table[at[3] + d]) * w[3];
    h[ulong(p) * VIT_D + d] += s;
  }
}
