// matrix.metal: simdgroup matrices, for metal/emu's tests.
#include <metal_stdlib>
using namespace metal;

constant bool TRANS_A [[function_constant(0)]];
constant bool TRANS_B [[function_constant(1)]];
constant bool TRANS_D [[function_constant(2)]];

// Each lane writes its two elements of a matrix loaded from labels (element (r, c) = r·8 + c) and
// of the diagonal and filled constructors.
kernel void mat_layout(device const float* labels [[buffer(0)]],
                       device float* out [[buffer(1)]],
                       uint lane [[thread_index_in_simdgroup]]) {
  simdgroup_float8x8 m;
  simdgroup_load(m, labels);
  const simdgroup_half8x8 diag(half(3));
  const simdgroup_float8x8 filled = make_filled_simdgroup_matrix<float, 8, 8>(2.0f);
  out[lane * 6 + 0] = m.thread_elements()[0];
  out[lane * 6 + 1] = m.thread_elements()[1];
  out[lane * 6 + 2] = diag.thread_elements()[0];
  out[lane * 6 + 3] = diag.thread_elements()[1];
  out[lane * 6 + 4] = filled.thread_elements()[0];
  out[lane * 6 + 5] = filled.thread_elements()[1];
}

// d = a·b + c for the 8×8 blocks at (row 8·y, column 8·x) of A (16×16, half), B (16×16, half,
// read from threadgroup memory) and C (8×8 float), d written as float and as half into 16-wide
// outputs at the same origin; one simdgroup per (x, y) of a 2×2 grid of threadgroups.
kernel void mat_mma(device const half* a [[buffer(0)]],
                    device const half* b [[buffer(1)]],
                    device const float* c [[buffer(2)]],
                    device float* d [[buffer(3)]],
                    device half* dh [[buffer(4)]],
                    uint2 tg [[threadgroup_position_in_grid]],
                    uint lane [[thread_index_in_simdgroup]]) {
  threadgroup half bt[256];
  for (uint i = lane; i < 256; i += 32) {
    bt[i] = b[i];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const ulong2 origin = ulong2(tg.x * 8, tg.y * 8);
  simdgroup_half8x8 ma, mb;
  simdgroup_float8x8 mc, md;
  simdgroup_load(ma, a, 16, origin, TRANS_A);
  simdgroup_load(mb, (threadgroup const half*)bt, 16, origin, TRANS_B);
  simdgroup_load(mc, c);
  simdgroup_multiply_accumulate(md, ma, mb, mc);
  simdgroup_store(md, d, 16, origin, TRANS_D);
  simdgroup_half8x8 mh;
  simdgroup_multiply(mh, ma, mb);
  simdgroup_store(mh, dh, 16, origin, TRANS_D);
}

// bfloat operands, float accumulator, accumulating in place (d aliases c).
kernel void mat_bf16(device const bfloat* a [[buffer(0)]],
                     device const bfloat* b [[buffer(1)]],
                     device float* d [[buffer(2)]]) {
  simdgroup_bfloat8x8 ma, mb;
  simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(1.0f);
  simdgroup_load(ma, a);
  simdgroup_load(mb, b);
  simdgroup_multiply_accumulate(acc, ma, mb, acc);
  simdgroup_multiply_accumulate(acc, ma, mb, acc);
  simdgroup_store(acc, d);
}

// Half of the lanes return first: the load must fail.
kernel void mat_partial(device const float* a [[buffer(0)]],
                        device float* d [[buffer(1)]],
                        uint lane [[thread_index_in_simdgroup]]) {
  if (lane >= 16) {
    return;
  }
  simdgroup_float8x8 m;
  simdgroup_load(m, a);
  simdgroup_store(m, d);
}

// A matrix no call wrote is poison (NaN), as uninitialised registers would be.
kernel void mat_unwritten(device float* d [[buffer(0)]]) {
  simdgroup_float8x8 m;
  simdgroup_store(m, d);
}
