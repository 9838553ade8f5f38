// gdn.metal: one decode step of a Gated DeltaNet layer's recurrence, from the conv output to the
// gated RMSNorm, for every value head (engine/cpu gdn(), the part after the causal conv):
//
//   q, k  = l2norm(q)/sqrt(DK), l2norm(k)            (per key head; eps 1e-6 inside the sum)
//   beta  = sigmoid(b[h]);  g = exp(-exp(A_log[h]) * softplus(a[h] + dt_bias[h]))
//   S     = g*S                                       (decay)
//   kv    = S^T k                                     (read)
//   delta = beta * (v - kv)                           (delta)
//   S     = S + k delta^T                             (write)
//   o     = S^T q                                     (output)
//   y     = norm_w * (o * rsqrt(mean(o^2) + EPS)) * silu(z)   (gated RMSNorm over the head)
//
// State: fp32 [HV][DV][DK], updated in place. Each value column j of a head keeps its DK key
// rows contiguous (engine/cpu stores [HV][DK][DV]; this is its transpose, so a simdgroup reads a
// column with consecutive addresses).
//
// Geometry: one threadgroup per value head (HV groups), NSG simdgroups of 32 (NSG <= 32; 32 is
// the 1024-thread production shape). A simdgroup owns columns sg, sg + NSG, ...; for each it
// keeps the column's DK values in registers (DK/32 per lane, lane l holds rows l*DK/32 ...),
// so a column is read once and written once, with two simd_sums. The column outputs meet in
// threadgroup memory ([[threadgroup(0)]], DV floats) for the gated norm: one barrier.
//
// Rows (the multi-row decode step, R sequences each with its own state): the grid's second
// dimension is the row r, a row of HV threadgroups per row. Row r reads its row of qkv
// ([R][2*HK*DK + HV*DV]), z ([R][HV*DV]), a and b ([R][HV]), updates its own state
// ([R][HV][DV][DK]) in place and writes y[r] ([R][HV*DV]); the parameters are shared. A
// threadgroup's operations do not depend on r or on the other rows, so each row is bit-identical
// to a one-row dispatch on it; R = 1 is today's dispatch.
//
// Groups (GDN_GROUPS set: speculative decoding's verify step): a sequence with K drafted tokens
// occupies K+1 consecutive rows, a group, which must run one after another from the sequence's
// committed state, and only after the step does the host know how many of them to keep. A copy
// of the state after every row would cost 2 MiB a row for each layer (60 MiB for the model's 30
// DeltaNet layers) in writes alone; instead the group form leaves the committed state alone and
// records what each row fed into the update besides the state (its ring entry, below: 24 KiB a
// layer, ~0.75 MB a row for 30 layers), and gdn_commit replays the kept rows from the ring. groups
// ([R]) holds a group's row count n >= 1 at its first row and 0 at its other rows. The threadgroup
// of a group's first row does the group's work; those of its other rows return at once. It
// normalises every row's q and k and computes its gates once, into threadgroup memory; then each
// simdgroup takes each of its columns through the rows in turn, the column's state in registers
// (read once), and the rows' gated norms follow the last column (two barriers in all). Every
// row's y is what gdn_step on the running state gives (the same helpers in the same order: bit
// for bit in IEEE arithmetic; Metal's relaxed math may contract the two kernels differently) and
// every row gets its ring entry. n = 1 (a plain sequence) writes the state back like gdn_step
// (its ring entry is written too, but must not be replayed); n > 1 leaves the state as it was.
#include <metal_stdlib>
using namespace metal;

constant uint GDN_HK [[function_constant(0)]];    // key heads (16)
constant uint GDN_HV [[function_constant(1)]];    // value heads (32), a multiple of GDN_HK
constant uint GDN_DK [[function_constant(2)]];    // key head dim (128): 32, 64, 96 or 128
constant uint GDN_DV [[function_constant(3)]];    // value head dim (128)
constant float GDN_EPS [[function_constant(4)]];  // the gated norm's epsilon (1e-6)
constant uint GDN_T_FC [[function_constant(5)]];  // gdn_chunk: tokens in the chunk
constant uint GDN_T = is_function_constant_defined(GDN_T_FC) ? GDN_T_FC : 1u;
// gdn_step's group form (the verify step); unset, gdn_step is the plain per-row kernel, without
// the groups and ring arguments.
constant bool GDN_GROUPS_FC [[function_constant(6)]];
constant bool GDN_GROUPS = is_function_constant_defined(GDN_GROUPS_FC) && GDN_GROUPS_FC;

#define GDN_MAX_PER_LANE 4  // DK <= 128

// A row's ring entry (GDNShape.Ring in gdn.go): the L2-normalised k of every key head [HK][DK],
// the v of every value head [HV][DV], then beta [HV] and decay [HV] of every value head — what
// the state update reads besides the state itself, as float32 (a store and a load are exact).
#define GDN_RING_V (GDN_HK * GDN_DK)
#define GDN_RING_BETA (GDN_RING_V + GDN_HV * GDN_DV)
#define GDN_RING_DECAY (GDN_RING_BETA + GDN_HV)
#define GDN_RING_LEN (GDN_RING_DECAY + GDN_HV)

inline float softplus(float x) {
  // torch: log1p(exp(x)), x itself above 20. For x < -15, log1p(exp(x)) = exp(x) in float.
  if (x > 20.0f) {
    return x;
  }
  if (x < -15.0f) {
    return exp(x);
  }
  return log(1.0f + exp(x));
}

// The pieces of a token's update below are shared by gdn_step, its group form and gdn_commit,
// so all three compute a row with the same operations in the same order.

// gdn_qk loads this lane's DK/32 entries of key head kh's q and k from a row of qkv and
// L2-normalises them (q also by 1/sqrt(DK)); the sums of squares go over the simdgroup.
inline void gdn_qk(device const float* qkv, uint kh, uint lane, thread float* qr, thread float* kr) {
  const uint E = GDN_DK / 32;
  device const float* q = qkv + kh * GDN_DK + lane * E;
  device const float* k = qkv + GDN_HK * GDN_DK + kh * GDN_DK + lane * E;
  float qss = 0.0f, kss = 0.0f;
  for (uint i = 0; i < E; i++) {
    qr[i] = q[i];
    kr[i] = k[i];
    qss += qr[i] * qr[i];
    kss += kr[i] * kr[i];
  }
  qss = simd_sum(qss);
  kss = simd_sum(kss);
  const float qn = rsqrt(qss + 1e-6f) * rsqrt(float(GDN_DK));
  const float kn = rsqrt(kss + 1e-6f);
  for (uint i = 0; i < E; i++) {
    qr[i] *= qn;
    kr[i] *= kn;
  }
}

inline float gdn_beta(float b) { return 1.0f / (1.0f + exp(-b)); }

inline float gdn_decay(float a_log, float a, float dt_bias) { return exp(-exp(a_log) * softplus(a + dt_bias)); }

// gdn_advance moves one value column of the state by a token: s is this lane's DK/32 key rows of
// it, kr the token's normalised k (the same rows), v the column's value: decay, read (over the
// simdgroup), delta, write.
inline void gdn_advance(thread float* s, thread const float* kr, float v, float beta, float decay) {
  const uint E = GDN_DK / 32;
  float kv = 0.0f;
  for (uint i = 0; i < E; i++) {
    s[i] *= decay;  // decay
    kv += s[i] * kr[i];
  }
  kv = simd_sum(kv);  // read
  const float delta = (v - kv) * beta;
  for (uint i = 0; i < E; i++) {
    s[i] += kr[i] * delta;  // write
  }
}

// gdn_output is the column's output S^T q (over the simdgroup).
inline float gdn_output(thread const float* s, thread const float* qr) {
  float o = 0.0f;
  for (uint i = 0; i < GDN_DK / 32; i++) {
    o += s[i] * qr[i];
  }
  return simd_sum(o);
}

// gdn_gate is the gated RMSNorm of a head's output o_j, the simdgroups' Σ o² in partial.
inline float gdn_gate(float o, threadgroup const float* partial, uint nsg, float z, float w) {
  float total = 0.0f;
  for (uint i = 0; i < nsg; i++) {
    total += partial[i];
  }
  const float r = rsqrt(total / float(GDN_DV) + GDN_EPS);
  const float silu = z * (1.0f / (1.0f + exp(-z)));
  return w * (o * r) * silu;
}

// The group form's threadgroup memory ([[threadgroup(0)]]; floats, for a group of n rows): the
// column outputs [n][DV], the rows' normalised q and k [n][2][DK], the simdgroups' Σ o² [n][32]
// and the rows' beta and decay [n][2]. The call sizes it for R rows, the longest group a grid of
// R rows can hold.
#define GDN_G_QK(n) ((n) * GDN_DV)
#define GDN_G_PARTIAL(n) (GDN_G_QK(n) + (n) * 2 * GDN_DK)
#define GDN_G_GATES(n) (GDN_G_PARTIAL(n) + (n) * 32)

// gdn_group_prep readies the n rows of the group at row r0 for head: a simdgroup a row computes
// the row's normalised q and k and its gates into threadgroup memory and writes the row's ring
// entry (k by the first value head of the key head, which all of them compute alike); each
// simdgroup zeroes its Σ o² of every row.
inline void gdn_group_prep(device const float* qkv_rows, device const float* a_rows, device const float* b_rows,
                           device const float* a_log, device const float* dt_bias, device float* ring,
                           threadgroup float* tgm, uint r0, uint n, uint head, uint sg, uint nsg, uint lane) {
  const uint E = GDN_DK / 32, kh = head / (GDN_HV / GDN_HK);
  for (uint t = sg; t < n; t += nsg) {
    const ulong row = r0 + t;
    device const float* qkv = qkv_rows + row * (2 * GDN_HK * GDN_DK + GDN_HV * GDN_DV);
    device float* entry = ring + row * GDN_RING_LEN;
    float qr[GDN_MAX_PER_LANE], kr[GDN_MAX_PER_LANE];
    gdn_qk(qkv, kh, lane, qr, kr);
    threadgroup float* qk = tgm + GDN_G_QK(n) + t * 2 * GDN_DK + lane * E;
    for (uint i = 0; i < E; i++) {
      qk[i] = qr[i];
      qk[GDN_DK + i] = kr[i];
      if (head % (GDN_HV / GDN_HK) == 0) {
        entry[kh * GDN_DK + lane * E + i] = kr[i];
      }
    }
    for (uint j = lane; j < GDN_DV; j += 32) {
      entry[GDN_RING_V + head * GDN_DV + j] = qkv[2 * GDN_HK * GDN_DK + head * GDN_DV + j];
    }
    if (lane == 0) {
      const float beta = gdn_beta(b_rows[row * GDN_HV + head]);
      const float decay = gdn_decay(a_log[head], a_rows[row * GDN_HV + head], dt_bias[head]);
      entry[GDN_RING_BETA + head] = beta;
      entry[GDN_RING_DECAY + head] = decay;
      tgm[GDN_G_GATES(n) + 2 * t] = beta;
      tgm[GDN_G_GATES(n) + 2 * t + 1] = decay;
    }
  }
  for (uint t = 0; lane == 0 && t < n; t++) {
    tgm[GDN_G_PARTIAL(n) + t * 32 + sg] = 0.0f;
  }
}

// gdn_group_columns runs the group's rows through each of this simdgroup's columns, the
// column's state in registers from the first row to the last: each row's column output and its
// square (added to the simdgroup's Σ o² in column order, as gdn_step does) go to threadgroup
// memory. The state is written back only for a plain row (n = 1).
inline void gdn_group_columns(device const float* qkv_rows, device float* state, threadgroup float* tgm, uint r0,
                              uint n, uint head, uint sg, uint nsg, uint lane) {
  const uint E = GDN_DK / 32;
  for (uint j = sg; j < GDN_DV; j += nsg) {
    device float* st = state + (ulong(head) * GDN_DV + j) * GDN_DK + lane * E;
    float s[GDN_MAX_PER_LANE];
    for (uint i = 0; i < E; i++) {
      s[i] = st[i];
    }
    for (uint t = 0; t < n; t++) {
      threadgroup const float* qk = tgm + GDN_G_QK(n) + t * 2 * GDN_DK + lane * E;
      float qr[GDN_MAX_PER_LANE], kr[GDN_MAX_PER_LANE];
      for (uint i = 0; i < E; i++) {
        qr[i] = qk[i];
        kr[i] = qk[GDN_DK + i];
      }
      const ulong row = r0 + t;
      const float v = qkv_rows[row * (2 * GDN_HK * GDN_DK + GDN_HV * GDN_DV) + 2 * GDN_HK * GDN_DK + head * GDN_DV + j];
      gdn_advance(s, kr, v, tgm[GDN_G_GATES(n) + 2 * t], tgm[GDN_G_GATES(n) + 2 * t + 1]);
      const float o = gdn_output(s, qr);
      if (lane == 0) {
        tgm[t * GDN_DV + j] = o;
        tgm[GDN_G_PARTIAL(n) + t * 32 + sg] += o * o;
      }
    }
    for (uint i = 0; n == 1 && i < E; i++) {
      st[i] = s[i];
    }
  }
}

// gdn_group is the group form for the group at row r0 (n rows, no more than the grid has left,
// so that a wrong count cannot reach past the buffers or the threadgroup memory) and head.
inline void gdn_group(device const float* qkv_rows, device const float* z_rows, device const float* a_rows,
                      device const float* b_rows, device const float* a_log, device const float* dt_bias,
                      device const float* norm_w, device float* states, device float* y_rows, uint n,
                      device float* ring, threadgroup float* tgm, uint head, uint r0, uint tid, uint ntg, uint sg,
                      uint nsg, uint lane) {
  gdn_group_prep(qkv_rows, a_rows, b_rows, a_log, dt_bias, ring, tgm, r0, n, head, sg, nsg, lane);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  gdn_group_columns(qkv_rows, states + ulong(r0) * (GDN_HV * GDN_DV * GDN_DK), tgm, r0, n, head, sg, nsg, lane);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint i = tid; i < n * GDN_DV; i += ntg) {
    const uint t = i / GDN_DV, j = i % GDN_DV;
    const ulong at = (ulong(r0) + t) * (GDN_HV * GDN_DV) + head * GDN_DV + j;
    y_rows[at] = gdn_gate(tgm[t * GDN_DV + j], tgm + GDN_G_PARTIAL(n) + t * 32, nsg, z_rows[at], norm_w[j]);
  }
}

[[max_total_threads_per_threadgroup(1024)]]
kernel void gdn_step(device const float* qkv_rows [[buffer(0)]],  // [R][2*HK*DK + HV*DV]: q, k, v
                     device const float* z_rows [[buffer(1)]],    // [R][HV*DV]
                     device const float* a_rows [[buffer(2)]],    // [R][HV]
                     device const float* b_rows [[buffer(3)]],    // [R][HV]
                     device const float* a_log [[buffer(4)]],     // [HV]
                     device const float* dt_bias [[buffer(5)]],   // [HV]
                     device const float* norm_w [[buffer(6)]],    // [DV]
                     device float* states [[buffer(7)]],          // [R][HV][DV][DK]
                     device float* y_rows [[buffer(8)]],          // [R][HV*DV]
                     // the group form's: row counts at the groups' first rows, and the ring
                     device const uint* groups [[buffer(9), function_constant(GDN_GROUPS)]],  // [R]
                     device float* ring [[buffer(10), function_constant(GDN_GROUPS)]],        // [R][RING_LEN]
                     threadgroup float* o_tg [[threadgroup(0)]],  // [DV]; the group form's layout above
                     uint2 tg [[threadgroup_position_in_grid]],  // (head, row)
                     uint2 ntgs [[threadgroups_per_grid]],
                     uint tid [[thread_index_in_threadgroup]],
                     uint ntg [[threads_per_threadgroup]],
                     uint sg [[simdgroup_index_in_threadgroup]],
                     uint nsg [[simdgroups_per_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float partial[32];  // Σ o² per simdgroup

  if (GDN_GROUPS) {
    const uint n = min(groups[tg.y], ntgs.y - tg.y);
    if (n > 0) {
      gdn_group(qkv_rows, z_rows, a_rows, b_rows, a_log, dt_bias, norm_w, states, y_rows, n, ring, o_tg, tg.x, tg.y,
                tid, ntg, sg, nsg, lane);
    }
    return;
  }

  // This row's sequence: everything below is the one-row kernel on these.
  const uint head = tg.x;
  const ulong row = tg.y;
  device const float* qkv = qkv_rows + row * (2 * GDN_HK * GDN_DK + GDN_HV * GDN_DV);
  device const float* z = z_rows + row * (GDN_HV * GDN_DV);
  device const float* a = a_rows + row * GDN_HV;
  device const float* b = b_rows + row * GDN_HV;
  device float* state = states + row * (GDN_HV * GDN_DV * GDN_DK);
  device float* y = y_rows + row * (GDN_HV * GDN_DV);

  const uint E = GDN_DK / 32;  // key rows per lane
  const uint kh = head / (GDN_HV / GDN_HK);
  device const float* v = qkv + 2 * GDN_HK * GDN_DK + head * GDN_DV;

  // q and k of this head's key head, L2-normalised (every simdgroup does it: no barrier).
  float qr[GDN_MAX_PER_LANE], kr[GDN_MAX_PER_LANE];
  gdn_qk(qkv, kh, lane, qr, kr);
  const float beta = gdn_beta(b[head]);
  const float decay = gdn_decay(a_log[head], a[head], dt_bias[head]);

  float oss = 0.0f;
  for (uint j = sg; j < GDN_DV; j += nsg) {
    device float* st = state + (ulong(head) * GDN_DV + j) * GDN_DK + lane * E;
    float s[GDN_MAX_PER_LANE];
    for (uint i = 0; i < E; i++) {
      s[i] = st[i];
    }
    gdn_advance(s, kr, v[j], beta, decay);
    for (uint i = 0; i < E; i++) {
      st[i] = s[i];
    }
    const float o = gdn_output(s, qr);  // output
    if (lane == 0) {
      o_tg[j] = o;
    }
    oss += o * o;
  }
  if (lane == 0) {
    partial[sg] = oss;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  for (uint j = tid; j < GDN_DV; j += ntg) {
    y[head * GDN_DV + j] = gdn_gate(o_tg[j], partial, nsg, z[head * GDN_DV + j], norm_w[j]);
  }
}

// gdn_commit: after a verify step, the rows of a group that the host keeps (keep [R]: at a
// group's first row r0 the count to keep, 0 .. n; 0 at every other row) join the sequence's
// state: rows r0 .. r0+keep-1 are replayed from the ring into state r0 with gdn_advance, the
// update gdn_step makes, on the float32 values the group form computed — so the state is what
// keep one-row gdn_step dispatches would have left (bit for bit in IEEE arithmetic; Metal's
// relaxed math may contract the kernels differently), for the cost of reading and writing the
// state once. A plain row (a group of 1) has advanced its state already: its keep is 0. Grid
// (HV, R), a threadgroup per value head and row, any number of simdgroups (a column each at a
// time); keep 0 returns at once.
[[max_total_threads_per_threadgroup(1024)]]
kernel void gdn_commit(device float* states [[buffer(0)]],      // [R][HV][DV][DK]
                       device const float* ring [[buffer(1)]],  // [R][RING_LEN], the verify step's
                       device const uint* keep [[buffer(2)]],   // [R]
                       uint2 tg [[threadgroup_position_in_grid]],  // (head, row)
                       uint2 ntgs [[threadgroups_per_grid]],
                       uint sg [[simdgroup_index_in_threadgroup]],
                       uint nsg [[simdgroups_per_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]]) {
  const uint head = tg.x, r0 = tg.y;
  const uint n = min(keep[r0], ntgs.y - r0);  // never past the last row
  const uint E = GDN_DK / 32, kh = head / (GDN_HV / GDN_HK);
  device float* state = states + ulong(r0) * (GDN_HV * GDN_DV * GDN_DK);
  for (uint j = sg; n > 0 && j < GDN_DV; j += nsg) {
    device float* st = state + (ulong(head) * GDN_DV + j) * GDN_DK + lane * E;
    float s[GDN_MAX_PER_LANE];
    for (uint i = 0; i < E; i++) {
      s[i] = st[i];
    }
    for (uint t = 0; t < n; t++) {
      device const float* entry = ring + (ulong(r0) + t) * GDN_RING_LEN;
      float kr[GDN_MAX_PER_LANE];
      for (uint i = 0; i < E; i++) {
        kr[i] = entry[kh * GDN_DK + lane * E + i];
      }
      gdn_advance(s, kr, entry[GDN_RING_V + head * GDN_DV + j], entry[GDN_RING_BETA + head], entry[GDN_RING_DECAY + head]);
    }
    for (uint i = 0; i < E; i++) {
      st[i] = s[i];
    }
  }
}

// gdn_chunk: gdn_step for the GDN_T tokens of a prefill chunk in one dispatch, as a sequential
// scan: the recurrence itself is serial in the tokens, so each threadgroup (one value head) keeps
// its state in registers for the whole chunk and reads and writes it once, not once per token.
// Token t's inputs are row t of x [T][2*HK*DK + HV*DV] (the in-projection before the causal
// conv, which the kernel applies itself: see GDN_CB), z [T][HV*DV], a and b [T][HV]; its output
// row t of y [T][HV*DV].
//
// Layout ("packed", after mlx-lm's scan): a simdgroup holds GDN_PACK_COLS value columns, four
// lanes a column, each lane a quarter of the column's DK state values (up to 32). A column's dot
// products then end in two simd_shuffle_xor steps among its four lanes instead of a 32-lane
// simd_sum, and a simdgroup's eight columns advance side by side: per token the serial chain is
// the q/k norms, k·s, and q·s, two shuffle steps each. The four lanes add the partial sums in
// the same pairs ((0+1)+(2+3), addition being commutative), so they agree on every total. The
// gated norm's sum over DV meets in threadgroup memory; o_tg ([[threadgroup(0)]], 2·DV floats)
// and the partial sums alternate between two halves by token, so one barrier a token suffices
// (a thread writes half p again only at token t+2, after every thread has passed token t+1's
// barrier and so finished reading token t's half). Geometry: ceil(DV / 8) simdgroups, DK a
// multiple of 32 up to 128.
#define GDN_PACK_COLS 8
#define GDN_PACK_MAX 32  // DK / 4
// The causal conv is folded in (the conv's output never goes through memory): per block of
// GDN_CB tokens the threadgroup convolves the GDN_UCH = 2·DK + DV channels its head reads into
// [[threadgroup(1)]] (GDN_CB·GDN_UCH floats, 12 KiB for the model), one barrier a block.
#define GDN_CB 8
#define GDN_UCH (2 * GDN_DK + GDN_DV)

// Activation storage (kernels.ActInBF16, ActOutBF16): x, z, a and b are the inputs, y the output;
// set, they are bfloat, widened on load and rounded to nearest even on store. The state and the
// conv window stay float32.
constant bool GDN_IN_BF16_FC [[function_constant(20)]];
constant bool GDN_OUT_BF16_FC [[function_constant(21)]];
constant bool GDN_IN_BF16 = is_function_constant_defined(GDN_IN_BF16_FC) && GDN_IN_BF16_FC;
constant bool GDN_OUT_BF16 = is_function_constant_defined(GDN_OUT_BF16_FC) && GDN_OUT_BF16_FC;

inline float gdn_act(device const float* p, ulong i) {
  return GDN_IN_BF16 ? float(((device const bfloat*)p)[i]) : p[i];
}

// column_sum adds v over the four lanes of a column, in the same pairs on each lane.
inline float column_sum(float v) {
  v += simd_shuffle_xor(v, 1);
  return v + simd_shuffle_xor(v, 2);
}

// gdn_conv_block convolves tokens t0 .. t0+n-1 of the channels head h needs (its key head's q
// and k channels, its own v channels: GDN_UCH of them) into u_tg ([GDN_CB][GDN_UCH]): conv1d's
// window ‖ x through the taps, summed in conv1d_step's order, then SiLU — so u equals the
// unfused conv's exactly. win is the window before the chunk (read only: the value heads of a
// key head read the same q/k entries, and conv1d_chunk shifts it after this dispatch).
inline void gdn_conv_block(device const float* x, device const float4* taps, device const float* win, uint kh, uint h,
                           uint t0, uint n, uint tid, uint ntg, threadgroup float* u_tg) {
  const uint C = GDN_HK * 2 * GDN_DK + GDN_HV * GDN_DV;
  for (uint i = tid; i < n * GDN_UCH; i += ntg) {
    const uint tok = t0 + i / GDN_UCH, ch = i % GDN_UCH;
    const uint c = ch < GDN_DK          ? kh * GDN_DK + ch
                   : ch < 2 * GDN_DK   ? GDN_HK * GDN_DK + kh * GDN_DK + (ch - GDN_DK)
                                        : 2 * GDN_HK * GDN_DK + h * GDN_DV + (ch - 2 * GDN_DK);
    float xe[4];  // rows tok-3 .. tok of window ‖ x
    for (uint j = 0; j < 4; j++) {
      const int row = int(tok) + int(j) - 3;
      xe[j] = row < 0 ? win[uint(row + 3) * C + c] : gdn_act(x, ulong(row) * C + c);
    }
    const float4 t = taps[c];
    float acc = 0.0f;
    acc += t.x * xe[0];
    acc += t.y * xe[1];
    acc += t.z * xe[2];
    acc += t.w * xe[3];
    u_tg[(i / GDN_UCH) * GDN_UCH + ch] = acc * (1.0f / (1.0f + exp(-acc)));
  }
}

[[max_total_threads_per_threadgroup(1024)]]
kernel void gdn_chunk(device const float* x [[buffer(0)]],        // [T][2*HK*DK + HV*DV] before the conv
                      device const float* z [[buffer(1)]],        // [T][HV*DV]
                      device const float* a [[buffer(2)]],        // [T][HV]
                      device const float* b [[buffer(3)]],        // [T][HV]
                      device const float* a_log [[buffer(4)]],    // [HV]
                      device const float* dt_bias [[buffer(5)]],  // [HV]
                      device const float* norm_w [[buffer(6)]],   // [DV]
                      device float* state [[buffer(7)]],          // [HV][DV][DK]
                      device float* y [[buffer(8)]],              // [T][HV*DV]
                      device const float4* taps [[buffer(9)]],    // [C][4] the conv's
                      device const float* win [[buffer(10)]],     // [3][C] the conv window, read only
                      threadgroup float* o_tg [[threadgroup(0)]],  // [2][DV]
                      threadgroup float* u_tg [[threadgroup(1)]],  // [GDN_CB][GDN_UCH] a block's conv output
                      uint head [[threadgroup_position_in_grid]],
                      uint tid [[thread_index_in_threadgroup]],
                      uint ntg [[threads_per_threadgroup]],
                      uint sg [[simdgroup_index_in_threadgroup]],
                      uint nsg [[simdgroups_per_threadgroup]],
                      uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float partial[2][32];  // Σ o² per simdgroup, by token parity

  const uint P = GDN_DK / 4;  // state values per lane
  const uint kh = head / (GDN_HV / GDN_HK);
  const float a_exp = exp(a_log[head]);
  const uint quarter = lane % 4, j = sg * GDN_PACK_COLS + lane / 4;  // this lane's column
  const bool live = j < GDN_DV;  // the last simdgroup's spare lanes compute zeros, write nothing

  float s[GDN_PACK_MAX];
  device float* st = state + (ulong(head) * GDN_DV + (live ? j : 0)) * GDN_DK + quarter * P;
  for (uint i = 0; i < P; i++) {
    s[i] = live ? st[i] : 0.0f;
  }

  for (uint t = 0; t < GDN_T; t++) {
    if (t % GDN_CB == 0) {
      // every read of the previous block's u_tg came before the last token's barrier
      gdn_conv_block(x, taps, win, kh, head, t, min(uint(GDN_CB), GDN_T - t), tid, ntg, u_tg);
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    threadgroup const float* row = u_tg + (t % GDN_CB) * GDN_UCH;
    threadgroup const float* q = row + quarter * P;
    threadgroup const float* k = row + GDN_DK + quarter * P;
    float kr[GDN_PACK_MAX];
    float qss = 0.0f, kss = 0.0f;
    for (uint i = 0; i < P; i++) {
      const float qi = q[i];
      kr[i] = k[i];
      qss += qi * qi;
      kss += kr[i] * kr[i];
    }
    qss = column_sum(qss);
    kss = column_sum(kss);
    const float qn = rsqrt(qss + 1e-6f) * rsqrt(float(GDN_DK));
    const float kn = rsqrt(kss + 1e-6f);
    const float beta = 1.0f / (1.0f + exp(-gdn_act(b, t * GDN_HV + head)));
    const float decay = exp(-a_exp * softplus(gdn_act(a, t * GDN_HV + head) + dt_bias[head]));

    float kv = 0.0f;
    for (uint i = 0; i < P; i++) {
      kr[i] *= kn;
      s[i] *= decay;
      kv += s[i] * kr[i];
    }
    kv = column_sum(kv);
    const float v = live ? row[2 * GDN_DK + j] : 0.0f;
    const float delta = (v - kv) * beta;
    float o = 0.0f;
    for (uint i = 0; i < P; i++) {
      s[i] += kr[i] * delta;
      o += s[i] * (q[i] * qn);
    }
    o = column_sum(o);

    const uint half_ = t & 1u;
    threadgroup float* ot = o_tg + half_ * GDN_DV;
    if (live && quarter == 0) {
      ot[j] = o;
    }
    const float oss = simd_sum(live && quarter == 0 ? o * o : 0.0f);
    if (lane == 0) {
      partial[half_][sg] = oss;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = 0.0f;
    for (uint i = 0; i < nsg; i++) {
      total += partial[half_][i];
    }
    const float r = rsqrt(total / float(GDN_DV) + GDN_EPS);
    for (uint jj = tid; jj < GDN_DV; jj += ntg) {
      const ulong at = (ulong(t) * GDN_HV + head) * GDN_DV + jj;
      const float zz = gdn_act(z, at);
      const float silu = zz * (1.0f / (1.0f + exp(-zz)));
      const float out = norm_w[jj] * (ot[jj] * r) * silu;
      if (GDN_OUT_BF16) {
        ((device bfloat*)y)[at] = bfloat(out);
      } else {
        y[at] = out;
      }
    }
  }

  if (live) {
    for (uint i = 0; i < P; i++) {
      st[i] = s[i];
    }
  }
}
