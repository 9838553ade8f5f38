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
#include <metal_stdlib>
using namespace metal;

constant uint GDN_HK [[function_constant(0)]];    // key heads (16)
constant uint GDN_HV [[function_constant(1)]];    // value heads (32), a multiple of GDN_HK
constant uint GDN_DK [[function_constant(2)]];    // key head dim (128): 32, 64, 96 or 128
constant uint GDN_DV [[function_constant(3)]];    // value head dim (128)
constant float GDN_EPS [[function_constant(4)]];  // the gated norm's epsilon (1e-6)
constant uint GDN_T_FC [[function_constant(5)]];  // gdn_chunk: tokens in the chunk
constant uint GDN_T = is_function_constant_defined(GDN_T_FC) ? GDN_T_FC : 1u;

#define GDN_MAX_PER_LANE 4  // DK <= 128

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
                     threadgroup float* o_tg [[threadgroup(0)]],  // [DV]
                     uint2 tg [[threadgroup_position_in_grid]],  // (head, row)
                     uint tid [[thread_index_in_threadgroup]],
                     uint ntg [[threads_per_threadgroup]],
                     uint sg [[simdgroup_index_in_threadgroup]],
                     uint nsg [[simdgroups_per_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float partial[32];  // Σ o² per simdgroup

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
  device const float* q = qkv + kh * GDN_DK + lane * E;
  device const float* k = qkv + GDN_HK * GDN_DK + kh * GDN_DK + lane * E;
  device const float* v = qkv + 2 * GDN_HK * GDN_DK + head * GDN_DV;

  // q and k of this head's key head, L2-normalised (every simdgroup does it: no barrier).
  float qr[GDN_MAX_PER_LANE], kr[GDN_MAX_PER_LANE];
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

  const float beta = 1.0f / (1.0f + exp(-b[head]));
  const float decay = exp(-exp(a_log[head]) * softplus(a[head] + dt_bias[head]));

  float oss = 0.0f;
  for (uint j = sg; j < GDN_DV; j += nsg) {
    device float* st = state + (ulong(head) * GDN_DV + j) * GDN_DK + lane * E;
    float s[GDN_MAX_PER_LANE];
    float kv = 0.0f;
    for (uint i = 0; i < E; i++) {
      s[i] = st[i] * decay;  // decay
      kv += s[i] * kr[i];
    }
    kv = simd_sum(kv);  // read
    const float delta = (v[j] - kv) * beta;
    float o = 0.0f;
    for (uint i = 0; i < E; i++) {
      s[i] += kr[i] * delta;  // write
      o += s[i] * qr[i];
      st[i] = s[i];
    }
    o = simd_sum(o);  // output
    if (lane == 0) {
      o_tg[j] = o;
    }
    oss += o * o;
  }
  if (lane == 0) {
    partial[sg] = oss;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  float total = 0.0f;
  for (uint i = 0; i < nsg; i++) {
    total += partial[i];
  }
  const float r = rsqrt(total / float(GDN_DV) + GDN_EPS);
  for (uint j = tid; j < GDN_DV; j += ntg) {
    const float zz = z[head * GDN_DV + j];
    const float silu = zz * (1.0f / (1.0f + exp(-zz)));
    y[head * GDN_DV + j] = norm_w[j] * (o_tg[j] * r) * silu;
  }
}

// gdn_chunk: gdn_step for the GDN_T tokens of a prefill chunk in one dispatch, as a sequential
// scan: the recurrence itself is serial in the tokens, so each threadgroup (one value head) keeps
// its state in registers for the whole chunk and reads and writes it once, not once per token.
// Token t's inputs are row t of qkv [T][2*HK*DK + HV*DV], z [T][HV*DV], a and b [T][HV]; its
// output row t of y [T][HV*DV].
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

// column_sum adds v over the four lanes of a column, in the same pairs on each lane.
inline float column_sum(float v) {
  v += simd_shuffle_xor(v, 1);
  return v + simd_shuffle_xor(v, 2);
}

[[max_total_threads_per_threadgroup(1024)]]
kernel void gdn_chunk(device const float* qkv [[buffer(0)]],      // [T][2*HK*DK + HV*DV]
                      device const float* z [[buffer(1)]],        // [T][HV*DV]
                      device const float* a [[buffer(2)]],        // [T][HV]
                      device const float* b [[buffer(3)]],        // [T][HV]
                      device const float* a_log [[buffer(4)]],    // [HV]
                      device const float* dt_bias [[buffer(5)]],  // [HV]
                      device const float* norm_w [[buffer(6)]],   // [DV]
                      device float* state [[buffer(7)]],          // [HV][DV][DK]
                      device float* y [[buffer(8)]],              // [T][HV*DV]
                      threadgroup float* o_tg [[threadgroup(0)]],  // [2][DV]
                      uint head [[threadgroup_position_in_grid]],
                      uint tid [[thread_index_in_threadgroup]],
                      uint ntg [[threads_per_threadgroup]],
                      uint sg [[simdgroup_index_in_threadgroup]],
                      uint nsg [[simdgroups_per_threadgroup]],
                      uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float partial[2][32];  // Σ o² per simdgroup, by token parity

  const uint P = GDN_DK / 4;  // state values per lane
  const uint C = GDN_HK * 2 * GDN_DK + GDN_HV * GDN_DV;  // a token's qkv row
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
    device const float* row = qkv + ulong(t) * C;
    device const float* q = row + kh * GDN_DK + quarter * P;
    device const float* k = row + GDN_HK * GDN_DK + kh * GDN_DK + quarter * P;
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
    const float beta = 1.0f / (1.0f + exp(-b[t * GDN_HV + head]));
    const float decay = exp(-a_exp * softplus(a[t * GDN_HV + head] + dt_bias[head]));

    float kv = 0.0f;
    for (uint i = 0; i < P; i++) {
      kr[i] *= kn;
      s[i] *= decay;
      kv += s[i] * kr[i];
    }
    kv = column_sum(kv);
    const float v = live ? row[2 * GDN_HK * GDN_DK + head * GDN_DV + j] : 0.0f;
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
      const float zz = z[(ulong(t) * GDN_HV + head) * GDN_DV + jj];
      const float silu = zz * (1.0f / (1.0f + exp(-zz)));
      y[(ulong(t) * GDN_HV + head) * GDN_DV + jj] = norm_w[jj] * (ot[jj] * r) * silu;
    }
  }

  if (live) {
    for (uint i = 0; i < P; i++) {
      st[i] = s[i];
    }
  }
}
