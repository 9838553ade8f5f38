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
#include <metal_stdlib>
using namespace metal;

constant uint CONV_C [[function_constant(0)]];  // channels (8192)

kernel void conv1d_step(device const float* x [[buffer(0)]],       // [R][C] the qkv projections
                        device const float4* taps [[buffer(1)]],   // [C][4]
                        device float* win [[buffer(2)]],           // [R][3][C], updated in place
                        device float* u [[buffer(3)]],             // [R][C] silu(conv)
                        uint2 g [[thread_position_in_grid]]) {     // (channel, row)
  const uint c = g.x;
  if (c >= CONV_C) {
    return;
  }
  device float* w = win + ulong(g.y) * 3 * CONV_C;  // this row's window
  const float4 t = taps[c];
  const float w0 = w[c], w1 = w[CONV_C + c], w2 = w[2 * CONV_C + c];
  const float xc = x[ulong(g.y) * CONV_C + c];
  float acc = 0.0f;
  acc += t.x * w0;
  acc += t.y * w1;
  acc += t.z * w2;
  acc += t.w * xc;
  u[ulong(g.y) * CONV_C + c] = acc * (1.0f / (1.0f + exp(-acc)));
  w[c] = w1;
  w[CONV_C + c] = w2;
  w[2 * CONV_C + c] = xc;
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
