// conv.metal: the Gated DeltaNet causal depthwise conv for one decode token (engine/cpu gdn(),
// the conv part), over the qkv projection's channels (2*HK*DK + HV*DV, 8192 for the model):
//
//   acc   = taps[c][0]*win[0][c] + taps[c][1]*win[1][c] + taps[c][2]*win[2][c] + taps[c][3]*x[c]
//           (summed left to right from 0, as engine/cpu)
//   u[c]  = silu(acc)                       (the channels gdn_step reads: q, k, v)
//   win   = {win[1], win[2], x}             (shifted in place: oldest first)
//
// win is the float32 [3][C] window of the last three pre-conv inputs, oldest first (engine/cpu's
// conv state); taps are float32 [C][4]. The kernel size is fixed at 4 (the model's).
//
// Geometry: one thread per channel, dispatchThreads(C) in threadgroups of ConvThreads (256): 32
// threadgroups for the model. Each thread reads and writes only its own channel, so the in-place
// shift needs no synchronisation.
//
// Rows (the multi-row decode step, R sequences each with its own window): the grid's second
// dimension is the row r, a row of threadgroups per row; row r reads x[r] and writes u[r] ([R][C])
// and shifts its own window win[r] ([R][3][C]). A thread's operations do not depend on r or on
// the other rows, so each row is bit-identical to a one-row dispatch on it; R = 1 is today's
// dispatch.
//
// Groups (speculative decoding's verify step; kernels.ConvGroups, function constant 2, set; unset
// the kernel has neither extra buffer and is the rows form above): a sequence verifying K drafted
// tokens occupies K+1 consecutive rows, a group, and its rows are serial in the conv: row i sees
// the committed window followed by the group's rows 0..i-1. groups[r] is a group's row count n at
// its first row and 0 at its other rows. The thread (c, first row) runs the group's rows in turn
// with the window in registers, through the same conv_u as a one-row dispatch, so each row's u is
// that of n one-row dispatches bit for bit; threads of continuing rows return. Every row's x is
// copied to ring[r] ([R][C]), because the step's x buffer is overwritten by the next layer and
// conv1d_commit needs the accepted rows' inputs after the host has compared the drafts. A group of
// one row (a sequence without drafts) shifts its window in place as above, needing no commit; a
// longer group leaves the committed window as it was, only the first row's window being read.
#include <metal_stdlib>
using namespace metal;

constant uint CONV_C [[function_constant(0)]];  // channels (8192)
constant bool CONV_GROUPS_FC [[function_constant(2)]];
constant bool CONV_GROUPS = is_function_constant_defined(CONV_GROUPS_FC) && CONV_GROUPS_FC;

// conv_u is one token's conv and SiLU of channel c from its window (w0 oldest) and input xc:
// the one place the arithmetic is written, so the rows and groups forms cannot differ in it.
inline float conv_u(float4 t, float w0, float w1, float w2, float xc) {
  float acc = 0.0f;
  acc += t.x * w0;
  acc += t.y * w1;
  acc += t.z * w2;
  acc += t.w * xc;
  return acc * (1.0f / (1.0f + exp(-acc)));
}

kernel void conv1d_step(device const float* x [[buffer(0)]],       // [R][C] the qkv projections
                        device const float4* taps [[buffer(1)]],   // [C][4]
                        device float* win [[buffer(2)]],           // [R][3][C], updated in place
                        device float* u [[buffer(3)]],             // [R][C] silu(conv)
                        // CONV_GROUPS only: [R] a group's rows at its first row, else 0
                        device const uint* groups [[buffer(4), function_constant(CONV_GROUPS)]],
                        // CONV_GROUPS only: [R][C] each row's x, for conv1d_commit
                        device float* ring [[buffer(5), function_constant(CONV_GROUPS)]],
                        uint2 g [[thread_position_in_grid]]) {     // (channel, row)
  const uint c = g.x;
  if (c >= CONV_C) {
    return;
  }
  const uint n = CONV_GROUPS ? groups[g.y] : 1u;  // rows this thread runs, from row g.y
  if (n == 0) {
    return;  // a continuing row of a group: its first row's thread runs it
  }
  device float* w = win + ulong(g.y) * 3 * CONV_C;  // this row's window
  const float4 t = taps[c];
  float w0 = w[c], w1 = w[CONV_C + c], w2 = w[2 * CONV_C + c];
  for (uint i = 0; i < n; i++) {
    const ulong at = ulong(g.y + i) * CONV_C + c;
    const float xc = x[at];
    u[at] = conv_u(t, w0, w1, w2, xc);
    if (CONV_GROUPS) {
      ring[at] = xc;
    }
    w0 = w1;
    w1 = w2;
    w2 = xc;
  }
  if (n == 1) {
    w[c] = w0;
    w[CONV_C + c] = w1;
    w[2 * CONV_C + c] = w2;
  }
}

// conv1d_commit ends a verify step once the host knows how many of each group's rows it keeps:
// keep[r] at a group's first row (0..n; 0 at every other row, and at a group of one row, which
// the step already shifted), and the window of that row becomes the last 3 rows of
// window || ring[r .. r+keep-1], which is what keep one-row conv1d_step dispatches would have
// left (the shift only copies, so the window is theirs bit for bit). keep 0 leaves it unchanged.
// Geometry as conv1d_step's rows form; only the threads of a group's first row work. It must run
// after the step (a barrier): it reads the ring the step wrote.
kernel void conv1d_commit(device float* win [[buffer(0)]],          // [R][3][C], updated in place
                          device const float* ring [[buffer(1)]],   // [R][C] conv1d_step's copies
                          device const uint* keep [[buffer(2)]],    // [R] rows kept, at a group's first row
                          uint2 g [[thread_position_in_grid]]) {    // (channel, row)
  const uint c = g.x;
  const uint k = keep[g.y];
  if (c >= CONV_C || k == 0) {
    return;
  }
  device float* w = win + ulong(g.y) * 3 * CONV_C;
  float w0 = w[c], w1 = w[CONV_C + c], w2 = w[2 * CONV_C + c];
  for (uint i = 0; i < k; i++) {
    w0 = w1;
    w1 = w2;
    w2 = ring[ulong(g.y + i) * CONV_C + c];
  }
  w[c] = w0;
  w[CONV_C + c] = w1;
  w[2 * CONV_C + c] = w2;
}

// conv1d_chunk is a prefill chunk's conv window update: after gdn_chunk, which applies the conv
// itself from the window as it was before the chunk (and so must run first), the window becomes
// the last 3 rows of window ‖ x, x holding a row of C channels per token ([T][C]). Each thread
// shifts its channel in registers through the chunk, as conv1d_step would token by token.
// Geometry as conv1d_step. x is bfloat when kernels.ActInBF16 (function constant 20) is set, as
// the chunk mode stores it; the window is float32.
constant uint CONV_T_FC [[function_constant(1)]];  // conv1d_chunk: tokens in the chunk
constant uint CONV_T = is_function_constant_defined(CONV_T_FC) ? CONV_T_FC : 1u;
constant bool CONV_IN_BF16_FC [[function_constant(20)]];
constant bool CONV_IN_BF16 = is_function_constant_defined(CONV_IN_BF16_FC) && CONV_IN_BF16_FC;

kernel void conv1d_chunk(device const float* x [[buffer(0)]],  // [T][C] the qkv projections
                         device float* win [[buffer(1)]],      // [3][C], updated in place
                         uint c [[thread_position_in_grid]]) {
  if (c >= CONV_C) {
    return;
  }
  float w0 = win[c], w1 = win[CONV_C + c], w2 = win[2 * CONV_C + c];
  for (uint i = 0; i < CONV_T; i++) {
    const ulong at = ulong(i) * CONV_C + c;
    const float xc = CONV_IN_BF16 ? float(((device const bfloat*)x)[at]) : x[at];
    w0 = w1;
    w1 = w2;
    w2 = xc;
  }
  win[c] = w0;
  win[CONV_C + c] = w1;
  win[2 * CONV_C + c] = w2;
}
