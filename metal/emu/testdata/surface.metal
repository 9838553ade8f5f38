// surface.metal: exercises the MSL surface the emulator provides (SIMD-group functions over
// partial and partly exited simdgroups, vector constructors, half/bfloat rounding, atomics,
// function constants, templates, threadgroup parameters, built-ins). emu_test.go checks each
// result against Go.
#include <metal_stdlib>
using namespace metal;

constant bool FLAG [[function_constant(0)]];
constant half HSCALE [[function_constant(1)]];
constant int IOFF [[function_constant(2)]];
constant uint OPTIONAL_N [[function_constant(3)]];
constant bool HAS_N = is_function_constant_defined(OPTIONAL_N);
constant uint N_OR_7 = HAS_N ? OPTIONAL_N : 7u;

// simd_ops: threads whose input is below -100 return at once (inactive lanes); the others
// write 8 floats and 2 uints each.
kernel void simd_ops(device const float* in [[buffer(0)]],
                     device float* out [[buffer(1)]],
                     device uint* outu [[buffer(2)]],
                     uint gid [[thread_position_in_grid]]) {
  const float v = in[gid];
  if (v < -100.0f) {
    return;
  }
  out[gid * 8 + 0] = simd_sum(v);
  out[gid * 8 + 1] = simd_max(v);
  out[gid * 8 + 2] = simd_min(v);
  out[gid * 8 + 3] = simd_prefix_exclusive_sum(v);
  out[gid * 8 + 4] = simd_shuffle_xor(v, 1);
  out[gid * 8 + 5] = simd_shuffle_down(v, 3);
  out[gid * 8 + 6] = simd_broadcast(v, 2);
  out[gid * 8 + 7] = simd_broadcast_first(v);
  outu[gid * 2 + 0] = uint(ulong(simd_ballot(v > 0.0f)));
  outu[gid * 2 + 1] = simd_is_first() ? 1u : 0u;
}

// types: conversions and arithmetic whose results Go knows exactly.
kernel void types(device const uint4* u [[buffer(0)]],
                  device float4* f [[buffer(1)]],
                  device half* h [[buffer(2)]],
                  device bfloat* b [[buffer(3)]],
                  device uint* bits [[buffer(4)]],
                  uint i [[thread_position_in_grid]]) {
  if (i != 0) {
    return;
  }
  f[0] = float4(u[0]);                        // converts: 1,2,3,4 (not a bit cast)
  f[1] = float4(f[0].xy, 5.0f, float(u[0].w)); // concatenation: 1,2,5,4
  f[2] = float4(2.5f);                        // splat
  half one = 1.0h;
  half tiny = half(1.0f / 2048.0f);
  h[0] = (one + tiny) - one;                  // 0: every half operation rounds to half
  h[1] = HSCALE * 3.0h;
  bfloat bo = bfloat(1.0f);
  b[0] = (bo + bfloat(1.0f / 256.0f)) - bo;   // 0 for the same reason
  b[1] = bfloat(0.1f);                        // round to nearest even: 0x3dcd
  bits[0] = as_type<uint>(1.0f);
  bits[1] = FLAG ? 1u : 0u;
  bits[2] = uint(IOFF + 5);
  bits[3] = N_OR_7;
  bits[4] = popcount(0xF0F0u) + clz(1u) * 100u;  // 8 + 31*100
  bits[5] = extract_bits(0xABCDu, 4u, 8u);       // 0xBC
}

// counts: device and threadgroup atomics; every thread adds 1, the first thread of each group
// adds the group's total to total[1].
kernel void counts(device atomic_uint* total [[buffer(0)]],
                   uint tid [[thread_index_in_threadgroup]],
                   uint n [[threads_per_threadgroup]]) {
  threadgroup atomic_uint group_count;
  if (tid == 0) {
    atomic_store_explicit(&group_count, 0u, memory_order_relaxed);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  atomic_fetch_add_explicit(&total[0], 1u, memory_order_relaxed);
  atomic_fetch_add_explicit(&group_count, 1u, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid == 0) {
    atomic_fetch_add_explicit(&total[1], atomic_load_explicit(&group_count, memory_order_relaxed), memory_order_relaxed);
  }
}

// positions: writes every built-in of a 3-D non-uniform dispatch, 12 uints per thread, at its
// linear grid index.
kernel void positions(device uint* out [[buffer(0)]],
                      uint3 tpig [[thread_position_in_grid]],
                      uint3 tpitg [[thread_position_in_threadgroup]],
                      uint3 tgpig [[threadgroup_position_in_grid]],
                      ushort3 tptg [[threads_per_threadgroup]],
                      uint3 grid [[threads_per_grid]],
                      uint tiitg [[thread_index_in_threadgroup]]) {
  const uint at = ((tpig.z * grid.y + tpig.y) * grid.x + tpig.x) * 12;
  out[at + 0] = tpig.x;
  out[at + 1] = tpig.y;
  out[at + 2] = tpig.z;
  out[at + 3] = tpitg.x;
  out[at + 4] = tpitg.y;
  out[at + 5] = tpitg.z;
  out[at + 6] = tgpig.x;
  out[at + 7] = tgpig.y;
  out[at + 8] = tgpig.z;
  out[at + 9] = tptg.x * tptg.y * tptg.z;
  out[at + 10] = tiitg;
  out[at + 11] = 1;
}

// scaled<T>: a template kernel instantiated twice; reverses each group's slice of in through a
// [[threadgroup(0)]] array.
template <typename T>
[[kernel]] void scaled(device const T* in [[buffer(0)]],
                       device float* out [[buffer(1)]],
                       threadgroup T* tmp [[threadgroup(0)]],
                       uint gid [[thread_position_in_grid]],
                       uint tid [[thread_index_in_threadgroup]],
                       uint n [[threads_per_threadgroup]]) {
  tmp[tid] = in[gid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[gid] = float(tmp[n - 1 - tid]) * 2.0f;
}
template [[host_name("scaled_float")]] [[kernel]] decltype(scaled<float>) scaled<float>;
template [[host_name("scaled_half")]] [[kernel]] decltype(scaled<half>) scaled<half>;

// convert rounds floats to half and bfloat (the Go side's function-constant conversions must
// round the same way).
kernel void convert(device const float* in [[buffer(0)]],
                    device half* h [[buffer(1)]],
                    device bfloat* b [[buffer(2)]],
                    uint i [[thread_position_in_grid]]) {
  h[i] = half(in[i]);
  b[i] = bfloat(in[i]);
}

// math_ops: a sample of metal:: functions on scalars and vectors, with exact results.
kernel void math_ops(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  if (i != 0) {
    return;
  }
  const float4 v = float4(1.0f, -2.0f, 3.0f, -4.0f);
  const half4 hv = half4(v);
  out[0] = dot(v, v);
  out[1] = float(dot(hv, hv));
  out[2] = length(float2(3.0f, 4.0f));
  const float4 c = clamp(v, -1.0f, 2.0f);
  out[3] = c.x + c.y * 10.0f + c.z * 100.0f + c.w * 1000.0f;
  out[4] = float(max(3, 7)) + min(2.5f, 1.0f);
  out[5] = fma(2.0f, 3.0f, 1.0f);
  out[6] = mix(0.0f, 10.0f, 0.25f);
  const float4 s = select(float4(0.0f), float4(1.0f), v > 0.0f);
  out[7] = s.x + s.y * 2.0f + s.z * 4.0f + s.w * 8.0f;
  out[8] = all(abs(v) > 0.5f) ? 1.0f : 0.0f;
  out[9] = any(v > 3.5f) ? 1.0f : 0.0f;
  out[10] = exp(0.0f) + log(1.0f) + sqrt(16.0f) + rsqrt(4.0f);
  out[11] = float(precise::sqrt(hv.z * hv.z));
  out[12] = fast::exp2(3.0f);
  out[13] = float(clz(uint(1)) + ctz(8u));
  const uint4 u = uint4(v.zzzz);
  out[14] = float(u.x + u.w);
  out[15] = isnan(as_type<float>(0xFFFFFFFFu)) ? 1.0f : 0.0f;
  const float2 t = v.yx;
  out[16] = t.x * 10.0f + t.y;
  out[17] = saturate(1.5f) + fract(2.25f) + floor(-1.5f) + ceil(1.2f) + round(2.5f) + trunc(-2.7f);
  out[18] = float(numeric_limits<half>::max());
  out[19] = powr(2.0f, 10.0f);
}
