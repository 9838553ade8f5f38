// gdn_conv.metal: conv1d_step fused into gdn_step — one decode step of a Gated DeltaNet layer
// from the raw qkv projection (before the causal conv) to the gated RMSNorm, one dispatch.
//
// Per value head h (key head kh = h / (HV/HK)), over the 2*DK + DV channels the head needs
// (its key head's q and k channels, its own v channels):
//
//   acc   = taps[c][0]*win_in[0][c] + taps[c][1]*win_in[1][c] + taps[c][2]*win_in[2][c]
//           + taps[c][3]*x[c]           (summed left to right from 0, exactly as conv1d_step)
//   u[c]  = silu(acc)
//   win_out = {win_in[1], win_in[2], x}  (for the channels this head owns, see below)
//
// then gdn_step's recurrence on u (see gdn.metal): l2norm q/k, decay, read, delta, write, output,
// gated RMSNorm with silu(z). State fp32 [HV][DV][DK], updated in place (each head its own).
//
// WINDOW CONTRACT (double buffering). Both value heads of a pair (all HV/HK heads of a group)
// read the same q/k window entries, and threadgroups run concurrently in any order, so the
// window cannot be shifted in place. The kernel reads the window only from win_in (buffer 10)
// and writes the shifted window only to win_out (buffer 11); the two must be distinct buffers.
// The plan keeps two [3][C] float32 windows per GDN layer, A and B, and swaps them every token:
// step t reads A and writes B, step t+1 reads B and writes A, and so on (the current window is
// the one written last; initialise A with the prefill's conv state, or zeros). Every channel of
// win_out is written exactly once per step: q/k channels of key head kh by the first value head
// of its group (h % (HV/HK) == 0), v channels by their own head. Nothing reads win_out during
// the step, so no threadgroup order or interleaving can change the result.
//
// Layouts: x [C] = q [HK*DK] | k [HK*DK] | v [HV*DV] (C = 2*HK*DK + HV*DV, 8192 for the model);
// taps float32 [C][4]; windows float32 [3][C], oldest first (conv1d_step's layout).
//
// Geometry: one threadgroup per value head (HV groups), NSG simdgroups of 32 (NSG <= 32; 32 for
// production). All threads first convolve the head's 2*DK + DV channels cooperatively into
// threadgroup memory ([[threadgroup(1)]], 2*DK + DV floats) and write their window entries; one
// barrier; then gdn_step's column loop (a simdgroup owns columns sg, sg + NSG, ...; DK/32 key
// rows per lane in registers) and the gated norm ([[threadgroup(0)]], DV floats; one barrier).
//
// Function constant 5 (GDNC_HEAD0, optional, left unset in production) offsets the head index,
// so tests can dispatch heads one at a time in any order.
#include <metal_stdlib>
using namespace metal;

constant uint GDNC_HK [[function_constant(0)]];    // key heads (16)
constant uint GDNC_HV [[function_constant(1)]];    // value heads (32), a multiple of GDNC_HK
constant uint GDNC_DK [[function_constant(2)]];    // key head dim (128): 32, 64, 96 or 128
constant uint GDNC_DV [[function_constant(3)]];    // value head dim (128)
constant float GDNC_EPS [[function_constant(4)]];  // the gated norm's epsilon (1e-6)
constant uint GDNC_HEAD0_FC [[function_constant(5)]];  // optional: first value head
constant bool GDNC_HAS_HEAD0 = is_function_constant_defined(GDNC_HEAD0_FC);
constant uint GDNC_HEAD0 = GDNC_HAS_HEAD0 ? GDNC_HEAD0_FC : 0u;

#define GDNC_MAX_PER_LANE 4  // DK <= 128

inline float gdnc_softplus(float x) {
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
kernel void gdn_conv_step(device const float* x [[buffer(0)]],         // [C] raw qkv (pre-conv)
                          device const float* z [[buffer(1)]],         // [HV*DV]
                          device const float* a [[buffer(2)]],         // [HV]
                          device const float* b [[buffer(3)]],         // [HV]
                          device const float* a_log [[buffer(4)]],     // [HV]
                          device const float* dt_bias [[buffer(5)]],   // [HV]
                          device const float* norm_w [[buffer(6)]],    // [DV]
                          device float* state [[buffer(7)]],           // [HV][DV][DK]
                          device float* y [[buffer(8)]],               // [HV*DV]
                          device const float4* taps [[buffer(9)]],     // [C][4]
                          device const float* win_in [[buffer(10)]],   // [3][C] read only
                          device float* win_out [[buffer(11)]],        // [3][C] written only
                          threadgroup float* o_tg [[threadgroup(0)]],  // [DV]
                          threadgroup float* u_tg [[threadgroup(1)]],  // [2*DK + DV]
                          uint tg_pos [[threadgroup_position_in_grid]],
                          uint tid [[thread_index_in_threadgroup]],
                          uint ntg [[threads_per_threadgroup]],
                          uint sg [[simdgroup_index_in_threadgroup]],
                          uint nsg [[simdgroups_per_threadgroup]],
                          uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float partial[32];  // Σ o² per simdgroup

  const uint C = 2 * GDNC_HK * GDNC_DK + GDNC_HV * GDNC_DV;
  const uint head = GDNC_HEAD0 + tg_pos;
  const uint group = GDNC_HV / GDNC_HK;
  const uint kh = head / group;
  const bool owner = (head % group) == 0;  // writes its key head's q/k window entries
  const uint E = GDNC_DK / 32;            // key rows per lane

  // The causal conv + SiLU of this head's channels: u_tg = q (DK) | k (DK) | v (DV).
  const uint nu = 2 * GDNC_DK + GDNC_DV;
  for (uint i = tid; i < nu; i += ntg) {
    uint c;
    bool write;
    if (i < GDNC_DK) {
      c = kh * GDNC_DK + i;
      write = owner;
    } else if (i < 2 * GDNC_DK) {
      c = GDNC_HK * GDNC_DK + kh * GDNC_DK + (i - GDNC_DK);
      write = owner;
    } else {
      c = 2 * GDNC_HK * GDNC_DK + head * GDNC_DV + (i - 2 * GDNC_DK);
      write = true;
    }
    const float4 t = taps[c];
    const float w0 = win_in[c], w1 = win_in[C + c], w2 = win_in[2 * C + c];
    const float xc = x[c];
    float acc = 0.0f;
    acc += t.x * w0;
    acc += t.y * w1;
    acc += t.z * w2;
    acc += t.w * xc;
    u_tg[i] = acc * (1.0f / (1.0f + exp(-acc)));
    if (write) {
      win_out[c] = w1;
      win_out[C + c] = w2;
      win_out[2 * C + c] = xc;
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  threadgroup const float* q = u_tg + lane * E;
  threadgroup const float* k = u_tg + GDNC_DK + lane * E;
  threadgroup const float* v = u_tg + 2 * GDNC_DK;

  // q and k of this head's key head, L2-normalised (every simdgroup does it: no barrier).
  float qr[GDNC_MAX_PER_LANE], kr[GDNC_MAX_PER_LANE];
  float qss = 0.0f, kss = 0.0f;
  for (uint i = 0; i < E; i++) {
    qr[i] = q[i];
    kr[i] = k[i];
    qss += qr[i] * qr[i];
    kss += kr[i] * kr[i];
  }
  qss = simd_sum(qss);
  kss = simd_sum(kss);
  const float qn = rsqrt(qss + 1e-6f) * rsqrt(float(GDNC_DK));
  const float kn = rsqrt(kss + 1e-6f);
  for (uint i = 0; i < E; i++) {
    qr[i] *= qn;
    kr[i] *= kn;
  }

  const float beta = 1.0f / (1.0f + exp(-b[head]));
  const float decay = exp(-exp(a_log[head]) * gdnc_softplus(a[head] + dt_bias[head]));

  float oss = 0.0f;
  for (uint j = sg; j < GDNC_DV; j += nsg) {
    device float* st = state + (ulong(head) * GDNC_DV + j) * GDNC_DK + lane * E;
    float s[GDNC_MAX_PER_LANE];
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
  const float r = rsqrt(total / float(GDNC_DV) + GDNC_EPS);
  for (uint j = tid; j < GDNC_DV; j += ntg) {
    const float zz = z[head * GDNC_DV + j];
    const float silu = zz * (1.0f / (1.0f + exp(-zz)));
    y[head * GDNC_DV + j] = norm_w[j] * (o_tg[j] * r) * silu;
  }
}
