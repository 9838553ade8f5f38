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
