// argmax.metal: greedy token selection on the GPU, engine/sample's argmax (sample.Sampler.Next
// with Temperature 0, after sample_penalties when penalties or a bias are on):
//
//   token = the id in [0, ARGMAX_N) with the largest logit; ties go to the lowest id; NaNs are
//           skipped (all NaN: id 0); ids >= ARGMAX_N (padding rows of the LM head) never win.
//
// Each logit becomes a 64-bit key (the float as an ordered integer, then ~id), so "largest key"
// is exactly that rule, -0 is made +0 first (Go compares them equal) and NaN maps to 0. Only
// integer compares are used, so fast math cannot change the result.
//
// argmax_partial: ArgmaxGroups (128) threadgroups of ArgmaxThreads (256); threadgroup g takes the
//   contiguous chunk [g·c, (g+1)·c) of ids, c = ceil(N / groups), and writes its best key.
// argmax_final: one threadgroup of ArgmaxThreads reduces the ARGMAX_GROUPS keys, writes
//   step = {pos + 1, token} and, as sample_final does, records the token for the penalties
//   (params word 5: SAMPLE_COUNT adds 1 to state[token], SAMPLE_SEEN sets its bit 31).
//
// Rows (the multi-row decode step: R sequences, each its own logits and sampler): the grid's
// second dimension of argmax_partial and argmax_final's first is the row r. Row r reads logits[r]
// ([R][N]: rows N apart) and writes partial[r] ([R][GROUPS]); argmax_final's threadgroup r writes
// step[r] ([R]{pos, token}) and reads and updates row r's sampler buffers: params[r] ([R][16]
// words, SampleParams) and state[r] ([R][N]). A threadgroup's operations do not depend on r or on
// the other rows, so each row is bit-identical to a one-row dispatch on it; R = 1 is today's
// dispatch.
#include <metal_stdlib>
using namespace metal;

constant uint ARGMAX_N [[function_constant(0)]];       // ids that may be chosen (vocab limit)
constant uint ARGMAX_GROUPS [[function_constant(1)]];  // argmax_partial's threadgroups

#define ARGMAX_PARAM_WORDS 16  // SampleParams' words (sample.metal): a row's params
#define ARGMAX_PARAM_FLAGS 5  // word of SampleParams (sample.metal) holding the flags
#define ARGMAX_COUNT 2u       // SAMPLE_COUNT
#define ARGMAX_SEEN 4u        // SAMPLE_SEEN

inline ulong argmax_key(float v, uint id) {
  uint b = as_type<uint>(v);
  if (b == 0x80000000u) {
    b = 0;
  }
  uint k;
  if ((b & 0x7fffffffu) > 0x7f800000u) {
    k = 0;  // NaN
  } else {
    k = (b >> 31) != 0 ? ~b : (b | 0x80000000u);
  }
  return (ulong(k) << 32) | ulong(0xffffffffu - id);
}

inline ulong max_key(ulong a, ulong b) { return a > b ? a : b; }

// The largest key of the simdgroup's active lanes, in every lane: the largest high word, then
// the largest low word among the lanes holding it (32-bit reductions; partial simdgroups work).
inline ulong simd_max_key(ulong k) {
  const uint hi = simd_max(uint(k >> 32));
  const uint lo = simd_max(uint(k >> 32) == hi ? uint(k) : 0u);
  return (ulong(hi) << 32) | lo;
}

// The largest of every thread's k, returned to all threads.
inline ulong threadgroup_max_key(ulong k, threadgroup ulong* best, uint lane, uint sg, uint nsg) {
  k = simd_max_key(k);
  if (lane == 0) {
    best[sg] = k;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  k = lane < nsg ? best[lane] : 0ul;
  return simd_max_key(k);
}

kernel void argmax_partial(device const float* logits_rows [[buffer(0)]],  // [R][N] ([>= N] for one)
                           device ulong* partial_rows [[buffer(1)]],        // [R][GROUPS] keys
                           uint2 tg [[threadgroup_position_in_grid]],       // (group, row)
                           uint tid [[thread_index_in_threadgroup]],
                           uint ntg [[threads_per_threadgroup]],
                           uint lane [[thread_index_in_simdgroup]],
                           uint sg [[simdgroup_index_in_threadgroup]],
                           uint nsg [[simdgroups_per_threadgroup]]) {
  threadgroup ulong best[32];
  const uint g = tg.x;
  device const float* logits = logits_rows + ulong(tg.y) * ARGMAX_N;
  device ulong* partial = partial_rows + ulong(tg.y) * ARGMAX_GROUPS;
  const uint chunk = (ARGMAX_N + ARGMAX_GROUPS - 1) / ARGMAX_GROUPS;
  const uint begin = g * chunk, end = min(ARGMAX_N, begin + chunk);
  ulong k = 0;  // below every real key (an empty chunk reports 0)
  for (uint i = begin + tid; i < end; i += ntg) {
    k = max_key(k, argmax_key(logits[i], i));
  }
  k = threadgroup_max_key(k, best, lane, sg, nsg);
  if (tid == 0) {
    partial[g] = k;
  }
}

kernel void argmax_final(device const ulong* partial_rows [[buffer(0)]],  // [R][GROUPS]
                         device uint* steps [[buffer(1)]],  // [R]{pos, token} -> {pos+1, argmax}
                         constant uint* params_rows [[buffer(2)]],  // [R] SampleParams (flags)
                         device uint* states [[buffer(3)]],  // [R][N] count | seen<<31, if flagged
                         uint row [[threadgroup_position_in_grid]],
                         uint tid [[thread_index_in_threadgroup]],
                         uint ntg [[threads_per_threadgroup]],
                         uint lane [[thread_index_in_simdgroup]],
                         uint sg [[simdgroup_index_in_threadgroup]],
                         uint nsg [[simdgroups_per_threadgroup]]) {
  threadgroup ulong best[32];
  // This row's sequence: everything below is the one-row kernel on these.
  device const ulong* partial = partial_rows + ulong(row) * ARGMAX_GROUPS;
  device uint* step = steps + 2 * row;
  constant uint* params = params_rows + ARGMAX_PARAM_WORDS * row;
  device uint* state = states + ulong(row) * ARGMAX_N;
  ulong k = 0;
  for (uint i = tid; i < ARGMAX_GROUPS; i += ntg) {
    k = max_key(k, partial[i]);
  }
  k = threadgroup_max_key(k, best, lane, sg, nsg);
  if (tid != 0) {
    return;
  }
  const uint id = 0xffffffffu - uint(k);
  step[0] = step[0] + 1;
  step[1] = id;
  const uint flags = params[ARGMAX_PARAM_FLAGS];
  if (id < ARGMAX_N) {
    if ((flags & ARGMAX_COUNT) != 0) {
      state[id] += 1;
    }
    if ((flags & ARGMAX_SEEN) != 0) {
      state[id] |= 0x80000000u;
    }
  }
}

// step_copy copies the step buffer's {pos, token} — what the step's selection (argmax_final or
// sample_final) wrote — into a slot of the readback buffer. The decode loop reads that slot after
// waiting for the step: by then the next step, committed before the wait, may have overwritten
// the step buffer itself. One thread.
kernel void step_copy(device const uint* step [[buffer(0)]],  // {pos, token}
                      device uint* slot [[buffer(1)]],        // {pos, token}
                      uint i [[thread_position_in_grid]]) {
  if (i == 0) {
    slot[0] = step[0];
    slot[1] = step[1];
  }
}
