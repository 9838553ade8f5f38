// buggy.metal: kernels with planted bugs (and their fixed twins) that the emulator must catch.
#include <metal_stdlib>
using namespace metal;

// neighbour_sum: out[i] = in[i] + in[i-1] through threadgroup memory. The buggy version has no
// barrier between the write and the read. Forward order happens to run thread i-1 before
// thread i, so it passes; reverse and shuffled orders read memory nobody wrote yet (0xFF poison,
// a NaN).
kernel void neighbour_sum_no_barrier(device const float* in [[buffer(0)]],
                                     device float* out [[buffer(1)]],
                                     uint gid [[thread_position_in_grid]],
                                     uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float tile[256];
  tile[tid] = in[gid];
  out[gid] = tile[tid] + (tid > 0 ? tile[tid - 1] : 0.0f);  // BUG: tile[tid - 1] may not be written yet
}

kernel void neighbour_sum(device const float* in [[buffer(0)]],
                          device float* out [[buffer(1)]],
                          uint gid [[thread_position_in_grid]],
                          uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float tile[256];
  tile[tid] = in[gid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[gid] = tile[tid] + (tid > 0 ? tile[tid - 1] : 0.0f);
}

// group_sum: sum of each threadgroup's inputs. The buggy version reads partial[lane] for all 32
// lanes, but only the first nsg entries were written: the rest is poison.
kernel void group_sum_unguarded(device const float* in [[buffer(0)]],
                                device float* out [[buffer(1)]],
                                uint gid [[thread_position_in_grid]],
                                uint group [[threadgroup_position_in_grid]],
                                uint lane [[thread_index_in_simdgroup]],
                                uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float partial[32];
  const float s = simd_sum(in[gid]);
  if (lane == 0) {
    partial[sg] = s;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (sg == 0) {
    const float t = simd_sum(partial[lane]);  // BUG: should be lane < nsg ? partial[lane] : 0
    if (lane == 0) {
      out[group] = t;
    }
  }
}

kernel void group_sum(device const float* in [[buffer(0)]],
                      device float* out [[buffer(1)]],
                      uint gid [[thread_position_in_grid]],
                      uint group [[threadgroup_position_in_grid]],
                      uint lane [[thread_index_in_simdgroup]],
                      uint sg [[simdgroup_index_in_threadgroup]],
                      uint nsg [[simdgroups_per_threadgroup]]) {
  threadgroup float partial[32];
  const float s = simd_sum(in[gid]);
  if (lane == 0) {
    partial[sg] = s;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (sg == 0) {
    const float t = simd_sum(lane < nsg ? partial[lane] : 0.0f);
    if (lane == 0) {
      out[group] = t;
    }
  }
}

// copy_off_by_one writes one element past the end of out (n = the element count).
kernel void copy_off_by_one(device const float* in [[buffer(0)]],
                            device float* out [[buffer(1)]],
                            constant uint& n [[buffer(2)]],
                            uint gid [[thread_position_in_grid]]) {
  if (gid > n) {  // BUG: should be gid >= n
    return;
  }
  out[gid] = gid < n ? in[gid] * 2.0f : 0.0f;
}

// read_past_end reads one element past the end of in; only AddressSanitizer sees it.
kernel void read_past_end(device const float* in [[buffer(0)]],
                          device float* out [[buffer(1)]],
                          uint gid [[thread_position_in_grid]]) {
  out[gid] = in[gid] + in[gid + 1];  // BUG: in[gid + 1] for the last thread
}

// early_return leaves before a barrier the other threads wait at.
kernel void early_return(device float* out [[buffer(0)]],
                         constant uint& n [[buffer(1)]],
                         uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float x[64];
  if (tid >= n) {
    return;  // BUG: the barrier below is then reached by some threads only
  }
  x[tid] = float(tid);
  threadgroup_barrier(mem_flags::mem_threadgroup);  // the early returners never get here
  out[tid] = x[n - 1 - tid];
}

// divergent_simd calls simd_sum in a branch some lanes of the simdgroup skip.
kernel void divergent_simd(device float* out [[buffer(0)]],
                           uint lane [[thread_index_in_simdgroup]]) {
  float v = float(lane);
  if (lane < 16) {
    v = simd_sum(v);  // not supported: lanes 16..31 go on to the barrier
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[lane] = v;
}

// too_much_threadgroup_memory declares 40 KiB of threadgroup memory (the limit is 32 KiB).
kernel void too_much_threadgroup_memory(device float* out [[buffer(0)]],
                                        uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float big[10240];
  big[tid] = 1.0f;
  out[tid] = big[tid];
}

// tile_overflow writes one element past a threadgroup array.
kernel void tile_overflow(device float* out [[buffer(0)]],
                          uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float tile[64];
  tile[tid + 1] = 1.0f;  // BUG: tile[64] for the last thread
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = tile[tid];
}

// wild_write writes a gigabyte past its buffer: a crash, which only a helper process survives.
kernel void wild_write(device float* out [[buffer(0)]],
                       uint gid [[thread_position_in_grid]]) {
  out[gid + 0x10000000u] = 1.0f;
}

// exchange_single passes a value to the other simdgroup each round through one threadgroup
// array, with one barrier a round. BUG: a simdgroup that runs ahead writes round r+1's value
// (after a SIMD-group call) before the other simdgroup has read round r's.
kernel void exchange_single(device float* out [[buffer(0)]],
                            uint tid [[thread_index_in_threadgroup]],
                            uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float slot[64];
  float acc = 0.0f;
  for (uint r = 0; r < 4; r++) {
    const float v = simd_sum(float(tid * 4 + r));
    slot[tid] = v + float(lane);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    acc = acc * 2.0f + slot[(tid + 32) % 64];
  }
  out[tid] = acc;
}

// exchange_double is exchange_single with a half of the array per round parity: one barrier a
// round suffices, since a simdgroup writes a half again only after the next barrier.
kernel void exchange_double(device float* out [[buffer(0)]],
                            uint tid [[thread_index_in_threadgroup]],
                            uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float slot[128];
  float acc = 0.0f;
  for (uint r = 0; r < 4; r++) {
    const float v = simd_sum(float(tid * 4 + r));
    slot[(r & 1) * 64 + tid] = v + float(lane);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    acc = acc * 2.0f + slot[(r & 1) * 64 + (tid + 32) % 64];
  }
  out[tid] = acc;
}
