// moe.metal: the sparse MoE block of one decode token (engine/cpu moe() for T = 1) in three
// dispatches; the expert choice never leaves the GPU.
//
//   moe_router        l = W_router·x (8-bit, E rows), s = w_seg·x (8-bit, 1 row);
//                     P = softmax(l) (float32, over all E); S = the K largest P, largest first,
//                     ties to the lower id; ids[j] = S_j, weights[j] = P[S_j] / Σ_{e∈S} P[e]
//                     (summed largest first), weights[K] = sigmoid(s).
//   moe_gate_up       act[slot·I + r] = silu(gate_e[r]·x) · (up_e[r]·x): for slot < K the rows
//                     e·I + r of the stacked gate/up tensors [E·I, H] with e = ids[slot]; slot K
//                     is the shared expert (its own gate_proj/up_proj, SI rows).
//   moe_down_combine  res[d] += Σ_{slot ≤ K} weights[slot] · (down_slot[d] · act_slot), with
//                     down_slot rows e·H + d of the stacked down tensor [E·H, I] for slot < K and
//                     the shared expert's down_proj [H, SI] for slot K. Summed in slot order (the
//                     reference adds experts in ascending id, then the shared one).
//   moe_topk          moe_router's routing alone, from logits another kernel computed (qmv_q8):
//                     the alternative to the router GEMV on one threadgroup.
//
//   moe_router_norm,  the same, but x is the un-normed residual: each simdgroup computes
//   moe_gate_up_norm  r = rsqrt(mean(x²) + MOE_EPS) itself and uses x̂ = (x·r)·gain (bf16 [H], the
//                     post-attention norm; buffer 9 / 15), add_rmsnorm's per-element product.
//
// x is the post-attention RMSNorm output (float32, [H]); res is the residual stream. All matrices
// are MLX affine (see qmv.metal): uint32 words of codes, least significant first, bf16 scale and
// bias per 64 values of a row. Every GEMV here is qmv.metal's design: a lane reads 16 consecutive
// values of the input per step (a simdgroup 512), pre-divided by the place value of each code in
// its 16-bit half-word, codes masked in place, Σ w·x = scale·Σ q·x' + bias·Σ x per group; a
// simdgroup computes 4 rows at a time and reduces them with simd_sum.
//
// Geometry (threadgroups × threads):
//   moe_router        1 × 32·n (n simdgroups, 32 for the model); simdgroup sg computes rows
//                     4sg.., 4(sg+n).. of the E + 1 logits (row E is the shared gate) into
//                     threadgroup memory; after one barrier simdgroup 0 does softmax and top-K.
//   moe_gate_up       (ceil(max(I, SI) / 8), K + 1) × 64: 8 rows of one slot per threadgroup,
//                     gate and up of 4 rows per simdgroup (8 dot products sharing x).
//   moe_down_combine  ceil(H / 8) × 64: 4 output rows per simdgroup, all K + 1 slots.
//   moe_topk          1 × 32.
// H, I and SI must be multiples of 64; E <= 1024; 1 <= K <= min(E, 32).
//
// Rows (multi-row decode): MOE_BATCH (function constant 8, 1 to 8; unset: 1) is the number R of
// decode rows, each a different sequence's token: x and res [R][H], ids [R][K], weights
// [R][K + 1], act [R][K·I + SI]. Each row's arithmetic (lanes, accumulation order, simd_sum, its
// experts combined in its own slot order) is the one-row kernel's, so a row's results are
// bit-identical whatever R is and whatever the other rows hold, and R = 1 is the one-row kernel.
//   moe_router        the same single threadgroup: each simdgroup step's router codes are read
//                     once and applied to every row of a pass (as many rows as MOE_LOGITS holds
//                     logits for: all 8 at E = 256); simdgroup j then routes the pass's row j.
//   moe_gate_up       grid (ceil(max(I, SI) / 8), K·R + 1): y < K·R is the pair row·K + slot;
//                     the first row's pair of each expert runs it for every row that chose it (an
//                     expert shared by rows is read once), the others return; y = K·R is the
//                     shared expert for every row, its weights read once.
//   moe_down_combine  the same grid: each simdgroup computes the shared expert's down rows for
//                     every row first (weights read once), then row by row its K experts in slot
//                     order, the shared part added last as in the one-row kernel.
#include <metal_stdlib>
using namespace metal;

constant uint MOE_H [[function_constant(0)]];   // hidden size (2048)
constant uint MOE_E [[function_constant(1)]];   // routed experts (256)
constant uint MOE_K [[function_constant(2)]];   // experts per token (8)
constant uint MOE_I [[function_constant(3)]];   // routed expert intermediate size (512)
constant uint MOE_SI [[function_constant(4)]];  // shared expert intermediate size (512)
constant float MOE_EPS_FC [[function_constant(5)]];  // RMSNorm epsilon of the _norm kernels
constant float MOE_EPS = is_function_constant_defined(MOE_EPS_FC) ? MOE_EPS_FC : 0.0f;
constant uint MOE_BATCH_FC [[function_constant(8)]];  // decode rows (1 to 8; unset: 1)
constant uint MOE_BATCH = is_function_constant_defined(MOE_BATCH_FC) ? MOE_BATCH_FC : 1u;

#define MOE_MAX_E 1024  // experts moe_router/moe_topk can route (32 per lane)
#define MOE_ROWS 4      // rows per simdgroup pass
#define MOE_SIMDGROUPS 2  // per threadgroup, moe_gate_up and moe_down_combine
#define MOE_NONE 0xffffffffu
#define MOE_MAX_BATCH 8  // decode rows: the per-row accumulators a lane holds are sized for it
#define MOE_LOGITS 2056  // moe_router's threadgroup logits: 8 rows of E + 1 = 257, 2 of 1,025

// load_x reads the 16 values at x for BITS-bit codes, divided by the place value of each code
// inside its 16-bit half-word (exact), into xs, and returns their plain sum. With NORM, x is
// first normalised: (x·inv)·gain, gain pointing at the same 16 positions.
template <int BITS, bool NORM = false>
inline float load_x(device const float* x, thread float* xs, device const bfloat* gain = nullptr,
                    float inv = 1.0f) {
  float sum = 0.0f;
  for (uint i = 0; i < 16; i += 4) {
    float4 v = *(device const float4*)(x + i);
    if (NORM) {
      const float4 g = float4(float(gain[i]), float(gain[i + 1]), float(gain[i + 2]), float(gain[i + 3]));
      v = (v * inv) * g;  // add_rmsnorm's h * r * w
    }
    sum += (v.x + v.y) + (v.z + v.w);
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
  return sum;
}

// inv_rms is rsqrt(mean(x²) + MOE_EPS) over MOE_H values, computed by one whole simdgroup.
inline float inv_rms(device const float* x, uint lane) {
  float ss = 0.0f;
  for (uint i = lane * 4; i < MOE_H; i += 32 * 4) {
    const float4 v = *(device const float4*)(x + i);
    ss += (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w);
  }
  ss = simd_sum(ss);
  return rsqrt(ss / float(MOE_H) + MOE_EPS);
}

// qdot is Σ q·x' over the 16 codes starting at half-word q (device memory, or the lane's copy
// in registers: the same arithmetic), for xs from load_x.
template <int BITS, typename Q>
inline float qdot(Q q, thread const float* xs) {
  float acc = 0.0f;
  if (BITS == 4) {
    for (uint h = 0; h < 4; h++) {
      const ushort c = q[h];
      acc += xs[4 * h] * float(c & 0x000fu) + xs[4 * h + 1] * float(c & 0x00f0u) +
             xs[4 * h + 2] * float(c & 0x0f00u) + xs[4 * h + 3] * float(c & 0xf000u);
    }
  } else {
    for (uint h = 0; h < 8; h++) {
      const ushort c = q[h];
      acc += xs[2 * h] * float(c & 0x00ffu) + xs[2 * h + 1] * float(c & 0xff00u);
    }
  }
  return acc;
}

// route turns the E logits in p (threadgroup memory; lane l owns entries l, l + 32, ...) into
// ids[0..K) and weights[0..K). Run by one whole simdgroup; p is overwritten with the
// probabilities. The top-K compares probabilities as unsigned bit patterns (the same order for
// the non-negative floats softmax gives, and never unordered, so every round picks a valid id).
inline void route(threadgroup float* p, uint lane, device uint* ids, device float* weights) {
  float m = -FLT_MAX;
  for (uint e = lane; e < MOE_E; e += 32) {
    m = max(m, p[e]);
  }
  m = simd_max(m);
  float sum = 0.0f;
  for (uint e = lane; e < MOE_E; e += 32) {
    const float v = exp(p[e] - m);
    p[e] = v;
    sum += v;
  }
  sum = simd_sum(sum);
  for (uint e = lane; e < MOE_E; e += 32) {
    p[e] = p[e] / sum;  // engine/cpu's softmax: exp(l - max) / Σ
  }

  uint taken = 0;  // bit j: expert lane + 32j is selected
  uint my_id = 0;  // lane t < K keeps round t's winner
  float my_p = 0.0f;
  float total = 0.0f;  // Σ of the selected probabilities, largest first
  for (uint t = 0; t < MOE_K; t++) {
    uint best = 0, best_id = MOE_NONE;
    for (uint j = 0, e = lane; e < MOE_E; j++, e += 32) {
      const uint key = as_type<uint>(p[e]);
      if ((taken >> j & 1u) == 0 && (best_id == MOE_NONE || key > best)) {
        best = key;
        best_id = e;
      }
    }
    const uint top = simd_max(best);
    const uint id = simd_min(best_id != MOE_NONE && best == top ? best_id : MOE_NONE);
    if (id % 32 == lane) {
      taken |= 1u << (id / 32);
    }
    const float pv = as_type<float>(top);
    total += pv;
    if (lane == t) {
      my_id = id;
      my_p = pv;
    }
  }
  if (lane < MOE_K) {
    ids[lane] = my_id;
    weights[lane] = my_p / total;
  }
}

// router_logits computes the E router logits and the shared gate's logit of nb rows of x
// ([nb][H]) into logits ([nb][E + 1]); simdgroup sg takes router rows 4sg.., 4(sg+nsg).. Each
// step's codes, scales and biases are read once for all nb rows; a row's accumulation is the
// one-row kernel's whatever nb is.
template <bool NORM>
inline void router_logits(device const uint* router_w, device const bfloat* router_s,
                          device const bfloat* router_b, device const uint* seg_w,
                          device const bfloat* seg_s, device const bfloat* seg_b,
                          device const float* x, device const bfloat* gain, uint nb,
                          threadgroup float* logits, uint sg, uint nsg, uint lane) {
  const uint rows = MOE_E + 1;
  float inv[MOE_MAX_BATCH];
  for (uint b = 0; b < MOE_BATCH; b++) {
    if (b >= nb) {
      break;  // constant bounds keep the per-row arrays in registers
    }
    inv[b] = NORM ? inv_rms(x + b * MOE_H, lane) : 1.0f;
  }
  const uint halves_per_row = MOE_H / 2;
  const uint groups_per_row = MOE_H / 64;
  for (uint row0 = sg * MOE_ROWS; row0 < rows; row0 += nsg * MOE_ROWS) {
    const uint live = min(uint(MOE_ROWS), rows - row0);  // the same for the whole simdgroup
    float acc[MOE_MAX_BATCH * MOE_ROWS];
    for (uint i = 0; i < MOE_BATCH * MOE_ROWS; i++) {
      acc[i] = 0.0f;
    }
    for (uint k = lane * 16; k < MOE_H; k += 32 * 16) {
      ushort c[MOE_ROWS][8];
      float s[MOE_ROWS], bi[MOE_ROWS];
      for (uint r = 0; r < MOE_ROWS; r++) {
        if (r >= live) {
          break;
        }
        const uint row = row0 + r;
        device const ushort* q;
        if (row < MOE_E) {
          q = (device const ushort*)router_w + ulong(row) * halves_per_row + k / 2;
          const ulong gi = ulong(row) * groups_per_row + k / 64;
          s[r] = float(router_s[gi]);
          bi[r] = float(router_b[gi]);
        } else {
          q = (device const ushort*)seg_w + k / 2;
          s[r] = float(seg_s[k / 64]);
          bi[r] = float(seg_b[k / 64]);
        }
        for (uint h = 0; h < 8; h++) {
          c[r][h] = q[h];
        }
      }
      for (uint b = 0; b < MOE_BATCH; b++) {
        if (b >= nb) {
          break;
        }
        float xs[16];
        const float xsum = load_x<8, NORM>(x + b * MOE_H + k, xs, gain + k, inv[b]);
        for (uint r = 0; r < MOE_ROWS; r++) {
          if (r >= live) {
            break;
          }
          acc[b * MOE_ROWS + r] += s[r] * qdot<8>(c[r], xs) + bi[r] * xsum;
        }
      }
    }
    for (uint b = 0; b < MOE_BATCH; b++) {
      if (b >= nb) {
        break;  // the same for the whole simdgroup
      }
      for (uint r = 0; r < MOE_ROWS; r++) {
        const float v = simd_sum(acc[b * MOE_ROWS + r]);
        if (lane == 0 && r < live) {
          logits[b * rows + row0 + r] = v;
        }
      }
    }
  }
}

// moe_router_rows is moe_router's body; logits is its threadgroup array. The MOE_BATCH rows run
// in passes of as many rows as logits holds; simdgroup j routes the pass's row j.
template <bool NORM>
inline void moe_router_rows(device const uint* router_w, device const bfloat* router_s,
                            device const bfloat* router_b, device const uint* seg_w,
                            device const bfloat* seg_s, device const bfloat* seg_b,
                            device const float* x, device const bfloat* gain, device uint* ids,
                            device float* weights, threadgroup float* logits, uint sg, uint nsg,
                            uint lane) {
  const uint rows = MOE_E + 1;
  const uint per_pass = min(MOE_BATCH, uint(MOE_LOGITS) / rows);
  for (uint b0 = 0; b0 < MOE_BATCH; b0 += per_pass) {
    const uint nb = min(per_pass, MOE_BATCH - b0);
    if (b0 > 0) {
      threadgroup_barrier(mem_flags::mem_threadgroup);  // the last pass's routing is done with logits
    }
    router_logits<NORM>(router_w, router_s, router_b, seg_w, seg_s, seg_b, x + b0 * MOE_H, gain, nb,
                        logits, sg, nsg, lane);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint j = sg; j < nb; j += nsg) {
      const uint b = b0 + j;
      threadgroup float* p = logits + j * rows;
      if (lane == 0) {
        weights[b * (MOE_K + 1) + MOE_K] = 1.0f / (1.0f + exp(-p[MOE_E]));
      }
      route(p, lane, ids + b * MOE_K, weights + b * (MOE_K + 1));
    }
  }
}

[[max_total_threads_per_threadgroup(1024)]]
kernel void moe_router(device const uint* router_w [[buffer(0)]],   // [E, H] 8-bit codes
                       device const bfloat* router_s [[buffer(1)]],  // [E, H/64]
                       device const bfloat* router_b [[buffer(2)]],  // [E, H/64]
                       device const uint* seg_w [[buffer(3)]],       // [1, H] 8-bit codes
                       device const bfloat* seg_s [[buffer(4)]],     // [H/64]
                       device const bfloat* seg_b [[buffer(5)]],     // [H/64]
                       device const float* x [[buffer(6)]],          // [R][H]
                       device uint* ids [[buffer(7)]],               // [R][K]
                       device float* weights [[buffer(8)]],          // [R][K + 1]
                       uint sg [[simdgroup_index_in_threadgroup]],
                       uint nsg [[simdgroups_per_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float logits[MOE_LOGITS];  // per row: E router logits, then the shared gate's
  moe_router_rows<false>(router_w, router_s, router_b, seg_w, seg_s, seg_b, x, seg_s, ids, weights,
                         logits, sg, nsg, lane);  // seg_s: no gain read
}

[[max_total_threads_per_threadgroup(1024)]]
kernel void moe_router_norm(device const uint* router_w [[buffer(0)]],
                            device const bfloat* router_s [[buffer(1)]],
                            device const bfloat* router_b [[buffer(2)]],
                            device const uint* seg_w [[buffer(3)]],
                            device const bfloat* seg_s [[buffer(4)]],
                            device const bfloat* seg_b [[buffer(5)]],
                            device const float* x [[buffer(6)]],       // [R][H], the un-normed residual
                            device uint* ids [[buffer(7)]],
                            device float* weights [[buffer(8)]],
                            device const bfloat* gain [[buffer(9)]],   // [H] bf16
                            uint sg [[simdgroup_index_in_threadgroup]],
                            uint nsg [[simdgroups_per_threadgroup]],
                            uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float logits[MOE_LOGITS];
  moe_router_rows<true>(router_w, router_s, router_b, seg_w, seg_s, seg_b, x, gain, ids, weights,
                        logits, sg, nsg, lane);
}

kernel void moe_topk(device const float* logits [[buffer(0)]],  // [T][E] router logits
                     device const float* seg [[buffer(1)]],     // [T] shared gate logits
                     device uint* ids [[buffer(2)]],            // [T][K]
                     device float* weights [[buffer(3)]],       // [T][K + 1]
                     uint t [[threadgroup_position_in_grid]],   // the token (a prefill chunk's)
                     uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float p[MOE_MAX_E];
  for (uint e = lane; e < MOE_E; e += 32) {
    p[e] = logits[ulong(t) * MOE_E + e];  // each lane reads back only its own entries: no barrier
  }
  if (lane == 0) {
    weights[t * (MOE_K + 1) + MOE_K] = 1.0f / (1.0f + exp(-seg[t]));
  }
  route(p, lane, ids + t * MOE_K, weights + t * (MOE_K + 1));
}

// moe_sort groups a prefill chunk's (token, slot) pairs by expert for the grouped GEMMs: the T·K
// pairs of ids [T][K] (moe_topk's) sorted by expert, then token (stable, so the result is the
// same on every run): tok[i] and w[i] are pair i's token and routing weight, offs[e] .. offs[e+1]
// expert e's range, pos[t·K + slot] where token t's slot went. blocks lists units of at most
// MOE_BM pairs of one expert (the grouped GEMMs' tile height), {expert, first pair, pairs}:
// expert e's c_e pairs take ceil(c_e / MOE_BM) of them, so there are at most T·K / MOE_BM + E
// (the grid the grouped GEMMs are sized for; the rest are {MOE_NONE, 0, 0}).
// One threadgroup of up to 1024 threads; thread e counts and places expert e's pairs by scanning
// the ids in token order (O(E·T·K) reads: a first version), E <= the threadgroup's threads.
constant uint MOE_T_FC [[function_constant(6)]];  // moe_sort: tokens in the chunk
constant uint MOE_T = is_function_constant_defined(MOE_T_FC) ? MOE_T_FC : 1u;
constant uint MOE_BM_FC [[function_constant(7)]];  // moe_sort: pairs per grouped-GEMM block (8, 16 or 32)
constant uint MOE_BM = is_function_constant_defined(MOE_BM_FC) ? MOE_BM_FC : 32u;

[[max_total_threads_per_threadgroup(1024)]]
kernel void moe_sort(device const uint* ids [[buffer(0)]],        // [T][K]
                     device const float* weights [[buffer(1)]],   // [T][K + 1]
                     device uint* offs [[buffer(2)]],             // [E + 1]
                     device uint* tok [[buffer(3)]],              // [T·K] token of each sorted pair
                     device float* w [[buffer(4)]],               // [T·K] its routing weight
                     device uint4* blocks [[buffer(5)]],          // [T·K / MOE_BM + E] {e, first, n, 0}
                     device uint* pos [[buffer(6)]],              // [T·K] pair (t, slot)'s sorted index
                     uint tid [[thread_index_in_threadgroup]],
                     uint ntg [[threads_per_threadgroup]]) {
  threadgroup uint count[MOE_MAX_E];
  threadgroup uint start[MOE_MAX_E + 1];
  threadgroup uint bstart[MOE_MAX_E + 1];
  for (uint e = tid; e < MOE_E; e += ntg) {
    uint c = 0;
    for (uint i = 0; i < MOE_T * MOE_K; i++) {
      c += ids[i] == e ? 1u : 0u;
    }
    count[e] = c;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid == 0) {  // exclusive prefix sums of the pairs and of the blocks
    uint acc = 0, bacc = 0;
    for (uint e = 0; e < MOE_E; e++) {
      start[e] = acc;
      bstart[e] = bacc;
      acc += count[e];
      bacc += (count[e] + MOE_BM - 1) / MOE_BM;
    }
    start[MOE_E] = acc;
    bstart[MOE_E] = bacc;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint e = tid; e <= MOE_E; e += ntg) {
    offs[e] = start[e];
  }
  for (uint e = tid; e < MOE_E; e += ntg) {
    uint at = start[e];
    for (uint i = 0; i < MOE_T * MOE_K; i++) {
      if (ids[i] == e) {
        const uint t = i / MOE_K, slot = i % MOE_K;
        tok[at] = t;
        w[at] = weights[t * (MOE_K + 1) + slot];
        pos[i] = at;
        at++;
      }
    }
    for (uint b = 0; b < (count[e] + MOE_BM - 1) / MOE_BM; b++) {
      blocks[bstart[e] + b] = uint4(e, start[e] + b * MOE_BM, min(uint(MOE_BM), count[e] - b * MOE_BM), 0u);
    }
  }
  const uint nblocks = MOE_T * MOE_K / MOE_BM + MOE_E;
  for (uint b = bstart[MOE_E] + tid; b < nblocks; b += ntg) {
    blocks[b] = uint4(MOE_NONE, 0u, 0u, 0u);
  }
}

// gate_up_pass accumulates rows row0 .. row0+live-1 of one gate/up pair (gq/uq at row row0, its
// scales and biases likewise) for nb rows of x, x + rows[b]·H (normed with inv[b]), into ag and
// au ([nb][MOE_ROWS]); run by a whole simdgroup. Each step's codes are read once for all nb rows.
template <bool NORM>
inline void gate_up_pass(device const ushort* gq, device const bfloat* gs, device const bfloat* gb,
                         device const ushort* uq, device const bfloat* us, device const bfloat* ub,
                         device const float* x, thread const uint* rows, device const bfloat* gain,
                         thread const float* inv, uint nb, uint live, uint lane, thread float* ag,
                         thread float* au) {
  const uint halves_per_row = MOE_H / 4;
  const uint groups_per_row = MOE_H / 64;
  for (uint k = lane * 16; k < MOE_H; k += 32 * 16) {
    ushort gc[MOE_ROWS][4], uc[MOE_ROWS][4];
    float gsc[MOE_ROWS], gbi[MOE_ROWS], usc[MOE_ROWS], ubi[MOE_ROWS];
    for (uint r = 0; r < MOE_ROWS; r++) {
      if (r >= live) {
        break;  // the same for the whole simdgroup
      }
      const uint o = r * halves_per_row + k / 4;
      const uint gi = r * groups_per_row + k / 64;
      for (uint h = 0; h < 4; h++) {
        gc[r][h] = gq[o + h];
        uc[r][h] = uq[o + h];
      }
      gsc[r] = float(gs[gi]);
      gbi[r] = float(gb[gi]);
      usc[r] = float(us[gi]);
      ubi[r] = float(ub[gi]);
    }
    for (uint b = 0; b < MOE_BATCH; b++) {
      if (b >= nb) {
        break;  // constant bounds keep the per-row arrays in registers
      }
      float xs[16];
      const float xsum = load_x<4, NORM>(x + rows[b] * MOE_H + k, xs, gain + k, inv[b]);
      for (uint r = 0; r < MOE_ROWS; r++) {
        if (r >= live) {
          break;
        }
        ag[b * MOE_ROWS + r] += gsc[r] * qdot<4>(gc[r], xs) + gbi[r] * xsum;
        au[b * MOE_ROWS + r] += usc[r] * qdot<4>(uc[r], xs) + ubi[r] * xsum;
      }
    }
  }
}

// expert_of is the expert of pair p = row·K + slot of ids, clamped so a bad id never reads wild.
inline uint expert_of(device const uint* ids, uint p) { return min(ids[p], MOE_E - 1); }

// expert_pairs lists in rows and slots the pairs that pair y runs and returns how many (0: an
// earlier row's pair runs y). A decode row's first pair of an expert joins the first row that
// chose it, whose pair runs the expert once for all of them (at most one pair a row); a repeat
// within a row, which moe_router never makes, runs alone.
inline uint expert_pairs(device const uint* ids, uint y, thread uint* rows, thread uint* slots) {
  const uint e = expert_of(ids, y), row = y / MOE_K;
  rows[0] = row;
  slots[0] = y % MOE_K;
  for (uint p = row * MOE_K; p < y; p++) {
    if (expert_of(ids, p) == e) {
      return 1;  // a repeat within the row
    }
  }
  for (uint p = 0; p < row * MOE_K; p++) {
    if (expert_of(ids, p) == e) {
      return 0;  // an earlier row's pair runs it
    }
  }
  uint nb = 1;
  for (uint r = row + 1; r < MOE_BATCH; r++) {
    for (uint slot = 0; slot < MOE_K; slot++) {
      if (expert_of(ids, r * MOE_K + slot) == e) {
        rows[nb] = r;
        slots[nb] = slot;
        nb++;
        break;
      }
    }
  }
  return nb;
}

// moe_gate_up_rows is moe_gate_up's body. Threadgroup row y < K·MOE_BATCH is pair y = row·K +
// slot, which runs its expert for the pairs expert_pairs lists (rows sharing an expert read its
// weights once) or returns; y = K·MOE_BATCH is the shared expert for every decode row.
template <bool NORM>
inline void moe_gate_up_rows(device const uint* ids, device const uint* gate_w,
                             device const bfloat* gate_s, device const bfloat* gate_b,
                             device const uint* up_w, device const bfloat* up_s,
                             device const bfloat* up_b, device const uint* sh_gate_w,
                             device const bfloat* sh_gate_s, device const bfloat* sh_gate_b,
                             device const uint* sh_up_w, device const bfloat* sh_up_s,
                             device const bfloat* sh_up_b, device const float* x,
                             device const bfloat* gain, device float* act, uint2 group, uint sg,
                             uint lane) {
  const uint pairs = MOE_K * MOE_BATCH;
  const bool sh_expert = group.y >= pairs;  // the shared expert's threadgroup row
  const uint n = sh_expert ? MOE_SI : MOE_I;
  const uint row0 = (group.x * MOE_SIMDGROUPS + sg) * MOE_ROWS;
  if (row0 >= n) {
    return;  // the whole simdgroup; there is no barrier
  }
  uint rows[MOE_MAX_BATCH], slots[MOE_MAX_BATCH];  // the pairs it runs: decode row and slot
  uint nb = 0;
  ulong first = row0;  // the first weight row, in the stacked tensors or the shared expert's
  if (sh_expert) {
    for (; nb < MOE_BATCH; nb++) {
      rows[nb] = nb;
      slots[nb] = MOE_K;
    }
  } else {
    nb = expert_pairs(ids, group.y, rows, slots);
    if (nb == 0) {
      return;  // another pair runs this expert (the same for the whole threadgroup)
    }
    first += ulong(expert_of(ids, group.y)) * MOE_I;
  }
  const uint live = min(uint(MOE_ROWS), n - row0);
  float inv[MOE_MAX_BATCH];
  float ag[MOE_MAX_BATCH * MOE_ROWS], au[MOE_MAX_BATCH * MOE_ROWS];
  for (uint b = 0; b < MOE_BATCH; b++) {
    if (b >= nb) {
      break;
    }
    inv[b] = NORM ? inv_rms(x + rows[b] * MOE_H, lane) : 1.0f;
    for (uint r = 0; r < MOE_ROWS; r++) {
      ag[b * MOE_ROWS + r] = 0.0f;
      au[b * MOE_ROWS + r] = 0.0f;
    }
  }
  const uint halves_per_row = MOE_H / 4;
  const uint groups_per_row = MOE_H / 64;
  device const uint *gw = sh_expert ? sh_gate_w : gate_w, *uw = sh_expert ? sh_up_w : up_w;
  device const bfloat *gs = sh_expert ? sh_gate_s : gate_s, *gb = sh_expert ? sh_gate_b : gate_b;
  device const bfloat *us = sh_expert ? sh_up_s : up_s, *ub = sh_expert ? sh_up_b : up_b;
  gate_up_pass<NORM>((device const ushort*)gw + first * halves_per_row, gs + first * groups_per_row,
                     gb + first * groups_per_row, (device const ushort*)uw + first * halves_per_row,
                     us + first * groups_per_row, ub + first * groups_per_row, x, rows, gain, inv,
                     nb, live, lane, ag, au);
  const uint act_len = MOE_K * MOE_I + MOE_SI;
  for (uint b = 0; b < MOE_BATCH; b++) {
    if (b >= nb) {
      break;  // the same for the whole simdgroup
    }
    for (uint r = 0; r < MOE_ROWS; r++) {
      const float g = simd_sum(ag[b * MOE_ROWS + r]);
      const float u = simd_sum(au[b * MOE_ROWS + r]);
      if (lane == 0 && r < live) {
        act[rows[b] * act_len + slots[b] * MOE_I + row0 + r] = g * (1.0f / (1.0f + exp(-g))) * u;
      }
    }
  }
}

kernel void moe_gate_up(device const uint* ids [[buffer(0)]],          // [R][K]
                        device const uint* gate_w [[buffer(1)]],        // [E·I, H] 4-bit
                        device const bfloat* gate_s [[buffer(2)]],      // [E·I, H/64]
                        device const bfloat* gate_b [[buffer(3)]],
                        device const uint* up_w [[buffer(4)]],          // [E·I, H] 4-bit
                        device const bfloat* up_s [[buffer(5)]],
                        device const bfloat* up_b [[buffer(6)]],
                        device const uint* sh_gate_w [[buffer(7)]],     // [SI, H] 4-bit
                        device const bfloat* sh_gate_s [[buffer(8)]],
                        device const bfloat* sh_gate_b [[buffer(9)]],
                        device const uint* sh_up_w [[buffer(10)]],      // [SI, H] 4-bit
                        device const bfloat* sh_up_s [[buffer(11)]],
                        device const bfloat* sh_up_b [[buffer(12)]],
                        device const float* x [[buffer(13)]],           // [R][H]
                        device float* act [[buffer(14)]],               // [R][K·I + SI]
                        uint2 group [[threadgroup_position_in_grid]],
                        uint sg [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
  moe_gate_up_rows<false>(ids, gate_w, gate_s, gate_b, up_w, up_s, up_b, sh_gate_w, sh_gate_s,
                          sh_gate_b, sh_up_w, sh_up_s, sh_up_b, x, gate_s, act, group, sg,
                          lane);  // gate_s: no gain read
}

kernel void moe_gate_up_norm(device const uint* ids [[buffer(0)]],
                             device const uint* gate_w [[buffer(1)]],
                             device const bfloat* gate_s [[buffer(2)]],
                             device const bfloat* gate_b [[buffer(3)]],
                             device const uint* up_w [[buffer(4)]],
                             device const bfloat* up_s [[buffer(5)]],
                             device const bfloat* up_b [[buffer(6)]],
                             device const uint* sh_gate_w [[buffer(7)]],
                             device const bfloat* sh_gate_s [[buffer(8)]],
                             device const bfloat* sh_gate_b [[buffer(9)]],
                             device const uint* sh_up_w [[buffer(10)]],
                             device const bfloat* sh_up_s [[buffer(11)]],
                             device const bfloat* sh_up_b [[buffer(12)]],
                             device const float* x [[buffer(13)]],       // [R][H], the un-normed residual
                             device float* act [[buffer(14)]],
                             device const bfloat* gain [[buffer(15)]],   // [H] bf16
                             uint2 group [[threadgroup_position_in_grid]],
                             uint sg [[simdgroup_index_in_threadgroup]],
                             uint lane [[thread_index_in_simdgroup]]) {
  moe_gate_up_rows<true>(ids, gate_w, gate_s, gate_b, up_w, up_s, up_b, sh_gate_w, sh_gate_s,
                         sh_gate_b, sh_up_w, sh_up_s, sh_up_b, x, gain, act, group, sg, lane);
}

// down_pass accumulates rows row0 .. row0+live-1 of a 4-bit matrix of cols columns (q at row
// row0, s and bi its scales and biases likewise) times nb activation vectors (a + b·stride) into
// part ([nb][MOE_ROWS]); run by a whole simdgroup. Each step's codes are read once for all nb.
inline void down_pass(device const ushort* q, device const bfloat* s, device const bfloat* bi,
                      uint cols, device const float* a, uint stride, uint nb, uint live, uint lane,
                      thread float* part) {
  const uint halves_per_row = cols / 4;
  const uint groups_per_row = cols / 64;
  for (uint i = 0; i < MOE_BATCH * MOE_ROWS; i++) {
    part[i] = 0.0f;
  }
  for (uint k = lane * 16; k < cols; k += 32 * 16) {
    ushort c[MOE_ROWS][4];
    float sc[MOE_ROWS], bs[MOE_ROWS];
    for (uint r = 0; r < MOE_ROWS; r++) {
      if (r >= live) {
        break;  // the same for the whole simdgroup
      }
      for (uint h = 0; h < 4; h++) {
        c[r][h] = q[r * halves_per_row + k / 4 + h];
      }
      const uint gi = r * groups_per_row + k / 64;
      sc[r] = float(s[gi]);
      bs[r] = float(bi[gi]);
    }
    for (uint b = 0; b < MOE_BATCH; b++) {
      if (b >= nb) {
        break;  // constant bounds keep the per-row arrays in registers
      }
      float xs[16];
      const float asum = load_x<4>(a + b * stride + k, xs);
      for (uint r = 0; r < MOE_ROWS; r++) {
        if (r >= live) {
          break;
        }
        part[b * MOE_ROWS + r] += sc[r] * qdot<4>(c[r], xs) + bs[r] * asum;
      }
    }
  }
}

kernel void moe_down_combine(device const uint* ids [[buffer(0)]],         // [R][K]
                             device const float* weights [[buffer(1)]],    // [R][K + 1]
                             device const uint* down_w [[buffer(2)]],      // [E·H, I] 4-bit
                             device const bfloat* down_s [[buffer(3)]],    // [E·H, I/64]
                             device const bfloat* down_b [[buffer(4)]],
                             device const uint* sh_down_w [[buffer(5)]],   // [H, SI] 4-bit
                             device const bfloat* sh_down_s [[buffer(6)]],
                             device const bfloat* sh_down_b [[buffer(7)]],
                             device const float* act [[buffer(8)]],        // [R][K·I + SI]
                             device float* res [[buffer(9)]],              // [R][H], += in place
                             uint group [[threadgroup_position_in_grid]],
                             uint sg [[simdgroup_index_in_threadgroup]],
                             uint lane [[thread_index_in_simdgroup]]) {
  const uint row0 = (group * MOE_SIMDGROUPS + sg) * MOE_ROWS;
  if (row0 >= MOE_H) {
    return;  // the whole simdgroup; there is no barrier
  }
  const uint live = min(uint(MOE_ROWS), MOE_H - row0);
  const uint act_len = MOE_K * MOE_I + MOE_SI;
  float sh[MOE_MAX_BATCH * MOE_ROWS];  // the shared expert's part of every decode row
  down_pass((device const ushort*)sh_down_w + ulong(row0) * (MOE_SI / 4), sh_down_s + ulong(row0) * (MOE_SI / 64),
            sh_down_b + ulong(row0) * (MOE_SI / 64), MOE_SI, act + MOE_K * MOE_I, act_len, MOE_BATCH,
            live, lane, sh);
  for (uint b = 0; b < MOE_BATCH; b++) {
    float acc[MOE_ROWS] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (uint slot = 0; slot < MOE_K; slot++) {  // the row's experts in its own slot order
      const ulong first = ulong(min(ids[b * MOE_K + slot], MOE_E - 1)) * MOE_H + row0;
      float part[MOE_MAX_BATCH * MOE_ROWS];
      down_pass((device const ushort*)down_w + first * (MOE_I / 4), down_s + first * (MOE_I / 64),
                down_b + first * (MOE_I / 64), MOE_I, act + b * act_len + slot * MOE_I, 0u, 1u, live,
                lane, part);
      const float w = weights[b * (MOE_K + 1) + slot];
      for (uint r = 0; r < MOE_ROWS; r++) {
        acc[r] += w * part[r];
      }
    }
    const float w = weights[b * (MOE_K + 1) + MOE_K];  // the shared expert last
    for (uint r = 0; r < MOE_ROWS; r++) {
      acc[r] += w * sh[b * MOE_ROWS + r];
    }
    for (uint r = 0; r < MOE_ROWS; r++) {
      const float v = simd_sum(acc[r]);
      if (lane == 0 && r < live) {
        res[b * MOE_H + row0 + r] += v;
      }
    }
  }
}

// moe_combine adds a prefill chunk's MoE output to the residual: res[t] += Σ over token t's K
// experts, in ascending expert id (engine/cpu's order), of y[pos[t·K + slot]] (moe_down_mm's
// weighted rows), then the shared expert's row sh[t] times its gate weights[t][K] (the sigmoid
// moe_topk wrote). Grid: (ceil(H / 256), T) threadgroups of 256, a thread per hidden dim.
//
// moe_combine_norm does the same and then normalises the row for the next layer, out[t] =
// res[t] · rsqrt(mean(res[t]²) + MOE_EPS) · gain, with add_rmsnorm's arithmetic (a thread per
// 256th dim, simdgroup sums, then their sum), so the next layer's input norm is not a dispatch
// of its own. Grid: (1, T) threadgroups of 256.

// Activation storage of moe_combine and moe_combine_norm (kernels.ActInBF16, ActOutBF16): y and sh
// are the inputs, out the output; set, they are bfloat, widened on load and rounded to nearest
// even on store. res is the residual stream, always float32.
constant bool MOE_IN_BF16_FC [[function_constant(20)]];
constant bool MOE_OUT_BF16_FC [[function_constant(21)]];
constant bool MOE_IN_BF16 = is_function_constant_defined(MOE_IN_BF16_FC) && MOE_IN_BF16_FC;
constant bool MOE_OUT_BF16 = is_function_constant_defined(MOE_OUT_BF16_FC) && MOE_OUT_BF16_FC;

inline float act_load(device const float* p, ulong i) {
  return MOE_IN_BF16 ? float(((device const bfloat*)p)[i]) : p[i];
}

// combine_dim is token t's MoE output at hidden dim d.
inline float combine_dim(device const uint* ids, device const float* weights, device const uint* pos,
                         device const float* y, device const float* sh, uint t, uint d) {
  // the token's slots by ascending expert id (K <= 32: a selection each round)
  float acc = 0.0f;
  uint last = 0, have = 0;
  for (uint n = 0; n < MOE_K; n++) {
    uint best = MOE_NONE, slot = 0;
    for (uint k = 0; k < MOE_K; k++) {
      const uint e = ids[t * MOE_K + k];
      if ((have == 0 || e > last) && e < best) {
        best = e;
        slot = k;
      }
    }
    acc += act_load(y, ulong(pos[t * MOE_K + slot]) * MOE_H + d);
    last = best;
    have = 1;
  }
  return acc + weights[t * (MOE_K + 1) + MOE_K] * act_load(sh, ulong(t) * MOE_H + d);
}

kernel void moe_combine(device const uint* ids [[buffer(0)]],        // [T][K]
                        device const float* weights [[buffer(1)]],   // [T][K + 1]
                        device const uint* pos [[buffer(2)]],        // [T·K] (moe_sort)
                        device const float* y [[buffer(3)]],         // [T·K][H] sorted pairs' rows
                        device const float* sh [[buffer(4)]],        // [T][H] the shared expert's
                        device float* res [[buffer(5)]],             // [T][H], updated in place
                        uint2 tg [[threadgroup_position_in_grid]],
                        uint tid [[thread_index_in_threadgroup]],
                        uint ntg [[threads_per_threadgroup]]) {
  const uint t = tg.y, d = tg.x * ntg + tid;
  if (d >= MOE_H) {
    return;
  }
  res[ulong(t) * MOE_H + d] += combine_dim(ids, weights, pos, y, sh, t, d);
}

kernel void moe_combine_norm(device const uint* ids [[buffer(0)]],
                             device const float* weights [[buffer(1)]],
                             device const uint* pos [[buffer(2)]],
                             device const float* y [[buffer(3)]],
                             device const float* sh [[buffer(4)]],
                             device float* res [[buffer(5)]],
                             device const bfloat* gain [[buffer(6)]],  // [H] the next layer's input norm
                             device float* out [[buffer(7)]],          // [T][H] the normed residual
                             uint2 tg [[threadgroup_position_in_grid]],
                             uint tid [[thread_index_in_threadgroup]],
                             uint ntg [[threads_per_threadgroup]],
                             uint lane [[thread_index_in_simdgroup]],
                             uint sg [[simdgroup_index_in_threadgroup]],
                             uint nsg [[simdgroups_per_threadgroup]]) {
  threadgroup float partial[32];  // one sum of squares per simdgroup
  threadgroup float inv_rms;
  const uint t = tg.y;
  const ulong base = ulong(t) * MOE_H;
  float ss = 0.0f;
  for (uint d = tid; d < MOE_H; d += ntg) {
    const float h = res[base + d] + combine_dim(ids, weights, pos, y, sh, t, d);
    res[base + d] = h;
    ss += h * h;
  }
  ss = simd_sum(ss);
  if (lane == 0) {
    partial[sg] = ss;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (sg == 0) {
    float v = lane < nsg ? partial[lane] : 0.0f;
    v = simd_sum(v);
    if (lane == 0) {
      inv_rms = rsqrt(v / float(MOE_H) + MOE_EPS);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const float r = inv_rms;
  for (uint d = tid; d < MOE_H; d += ntg) {
    const float v = res[base + d] * r * float(gain[d]);  // this thread wrote res[base + d] above
    if (MOE_OUT_BF16) {
      ((device bfloat*)out)[base + d] = bfloat(v);
    } else {
      out[base + d] = v;
    }
  }
}
