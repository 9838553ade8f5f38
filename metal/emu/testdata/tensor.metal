// tensor.metal: Metal 4 tensor ops (matmul2d on cooperative tensors), for metal/emu's tests.
#include <metal_stdlib>
#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>
using namespace metal;
using namespace mpp::tensor_ops;

constant uint GM [[function_constant(0)]];  // rows of A and C
constant uint GN [[function_constant(1)]];  // columns of B and C
constant uint GK [[function_constant(2)]];  // columns of A, rows of B
constant int MISUSE [[function_constant(3)]];  // tensor_misuse: which mistake to make

#define BM 32
#define BN 32
#define BK 16
#define BKN 512  // BK · BN (a threadgroup array's size must be one token here)

typedef tensor<threadgroup bfloat, dextents<int32_t, 2>, tensor_inline> tile_t;

template <bool ACC>
using gemm_op = matmul2d<matmul2d_descriptor(BM, BN, BK, false, false, false,
                                             ACC ? matmul2d_descriptor::mode::multiply_accumulate
                                                 : matmul2d_descriptor::mode::multiply),
                         execution_simdgroups<4>>;

// stage_b writes B's rows k0 .. k0+BK-1, columns n0 .. n0+BN-1 into bt as bfloat (0 outside B).
inline void stage_b(device const float* b, threadgroup bfloat* bt, uint k0, uint n0, uint tid) {
  for (uint i = tid; i < BK * BN; i += 128) {
    const uint k = k0 + i / BN, n = n0 + i % BN;
    bt[i] = bfloat(k < GK && n < GN ? b[k * GN + n] : 0.0f);
  }
}

// C (GM × GN, float) = A (GM × GK, half, read from device through a slice) · B (GK × GN, float,
// staged per K-step into threadgroup memory as bfloat): a BM × BN tile per threadgroup of 4
// simdgroups, edge tiles in M, N and K. With ACC false the op overwrites (mode multiply), so only
// the last K-step survives; its epilogue walks the elements with an iterator instead of slots and
// get_multidimensional_index. With ASSUME the epilogue puts slot i of thread t at element t·8 + i
// of the tile instead (a layout assumption).
template <bool ACC, bool ASSUME>
kernel void gemm(device const half* a [[buffer(0)]],
                 device const float* b [[buffer(1)]],
                 device float* c [[buffer(2)]],
                 uint2 tg [[threadgroup_position_in_grid]],
                 uint tid [[thread_index_in_threadgroup]]) {
  threadgroup bfloat bt[BKN];
  const uint m0 = tg.y * BM, n0 = tg.x * BN;
  tile_t tb(bt, dextents<int32_t, 2>(BN, BK));
  auto ta = tensor(a, dextents<int32_t, 2>(GK, GM));
  gemm_op<ACC> op;
  auto acc = op.template get_destination_cooperative_tensor<decltype(ta), tile_t, float>();
  for (uint16_t i = 0; i < acc.get_capacity(); i++) {
    if (acc.is_valid_element(i)) {
      acc[i] = 0.0f;
    }
  }
  for (uint k0 = 0; k0 < GK; k0 += BK) {
    stage_b(b, bt, k0, n0, tid);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    op.run(ta.slice(k0, m0), tb, acc);
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (ASSUME) {
    for (uint16_t i = 0; i < 8; i++) {
      const uint e = tid * 8 + i, r = m0 + e / BN, col = n0 + e % BN;
      if (r < GM && col < GN) {
        c[r * GN + col] = acc[i];
      }
    }
  } else if (ACC) {
    for (uint16_t i = 0; i < acc.get_capacity(); i++) {
      if (acc.is_valid_element(i)) {
        const auto ix = acc.get_multidimensional_index(i);  // ix[0]: column, ix[1]: row
        const uint r = m0 + ix[1], col = n0 + ix[0];
        if (r < GM && col < GN) {
          c[r * GN + col] = acc[i];
        }
      }
    }
  } else {
    for (auto it = acc.begin(); it != acc.end(); ++it) {
      const auto ix = it.get_multidimensional_index();
      const uint r = m0 + ix[1], col = n0 + ix[0];
      if (r < GM && col < GN) {
        c[r * GN + col] = *it;
      }
    }
  }
}

template [[host_name("tensor_gemm")]] [[kernel]] decltype(gemm<true, false>) gemm<true, false>;
template [[host_name("tensor_gemm_multiply")]] [[kernel]] decltype(gemm<false, false>) gemm<false, false>;
template [[host_name("tensor_gemm_assume")]] [[kernel]] decltype(gemm<true, true>) gemm<true, true>;

// C (GM × GN) = bias + A (GM × GK, bfloat) · Wᵀ (W: GN × GK, half, transposed on the right), one
// 16 × 16 tile per simdgroup (execution_simdgroup), two simdgroups a threadgroup side by side in
// N: the bias tile is loaded into the cooperative tensor, the product accumulated onto it and
// the tile stored through a slice, all from and to device memory (edges read 0, writes dropped).
// With MISUSE 8 the upper half of each simdgroup returns first.
kernel void tensor_simd(device const bfloat* a [[buffer(0)]],
                        device const half* w [[buffer(1)]],
                        device const float* bias [[buffer(2)]],
                        device float* c [[buffer(3)]],
                        uint2 tg [[threadgroup_position_in_grid]],
                        uint sg [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
  if (MISUSE == 8 && lane >= 16) {
    return;
  }
  constexpr auto desc = matmul2d_descriptor(16, 16, static_cast<int>(dynamic_extent), false, true, false,
                                            matmul2d_descriptor::mode::multiply_accumulate);
  matmul2d<desc, execution_simdgroup> op;
  const uint m0 = tg.y * 16, n0 = (tg.x * 2 + sg) * 16;
  auto ta = tensor(a, dextents<int32_t, 2>(GK, GM));
  auto tw = tensor(w, dextents<int32_t, 2>(GK, GN));
  auto tbias = tensor(bias, dextents<int32_t, 2>(GN, GM));
  auto tc = tensor(c, dextents<int32_t, 2>(GN, GM), array<int, 2>{1, int(GN)});
  auto mw = tw.slice(0, n0);
  auto ct = op.get_destination_cooperative_tensor<decltype(ta), decltype(mw), float>();
  ct.load(tbias.slice(n0, m0));
  op.run(ta.slice<dynamic_extent, 16>(0, m0), mw, ct);
  ct.store(tc.slice(n0, m0));
}

// tensor_misuse makes the mistake MISUSE names in an otherwise correct single-tile product
// (GM = GN = 32, GK = 16; 128 threads): 1 simdgroup 2 skips run; 2 each simdgroup stores the
// result into another tensor; 3 k = dynamic_extent with inputs of different k; 4 simdgroup 1 passes another
// slice; 5 no barrier between staging B and run; 6 get_multidimensional_index of every slot;
// 7 element access outside the tensor.
kernel void tensor_misuse(device const half* a [[buffer(0)]],
                          device const float* b [[buffer(1)]],
                          device float* c [[buffer(2)]],
                          uint tid [[thread_index_in_threadgroup]],
                          uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup bfloat bt[BKN];
  tile_t tb(bt, dextents<int32_t, 2>(BN, BK));
  auto ta = tensor(a, dextents<int32_t, 2>(GK, GM));
  gemm_op<true> op;
  auto acc = op.get_destination_cooperative_tensor<decltype(ta), tile_t, float>();
  for (uint16_t i = 0; i < acc.get_capacity(); i++) {
    acc[i] = 0.0f;
  }
  stage_b(b, bt, 0, 0, tid);
  if (MISUSE != 5) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (MISUSE == 1) {
    if (sg != 2) {
      op.run(ta, tb, acc);
    }
  } else if (MISUSE == 3) {
    matmul2d<matmul2d_descriptor(BM, BN), execution_simdgroups<4>> dyn;
    dyn.run(ta, tile_t(bt, dextents<int32_t, 2>(BN, BK / 2)), acc);
  } else if (MISUSE == 4) {
    op.run(ta.slice(0, sg == 1 ? 1 : 0), tb, acc);
  } else {
    op.run(ta, tb, acc);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (MISUSE == 2) {
    acc.store(tensor(c, dextents<int32_t, 2>(GN, GM - sg)));
  }
  for (uint16_t i = 0; i < acc.get_capacity(); i++) {
    if (MISUSE == 6 || acc.is_valid_element(i)) {
      const auto ix = acc.get_multidimensional_index(i);
      c[ix[1] * GN + ix[0]] = acc[i];
    }
  }
  if (MISUSE == 7) {
    c[0] = ta[int(GK), 0];
  }
}

// C (GM × GN) = A (GM × GK) · B (GK × GN), all float in device memory, each thread alone
// (execution_thread) writing rows 4t .. 4t+3 of C straight into a slice (rows past GM dropped).
// RELAXED sets relaxed_precision.
template <bool RELAXED>
kernel void thread_gemm(device const float* a [[buffer(0)]],
                        device const float* b [[buffer(1)]],
                        device float* c [[buffer(2)]],
                        uint t [[thread_position_in_grid]]) {
  matmul2d<matmul2d_descriptor(4, 8, static_cast<int>(dynamic_extent), false, false, RELAXED), execution_thread> op;
  auto ta = tensor(a, dextents<int32_t, 2>(GK, GM));
  auto tb = tensor(b, dextents<int32_t, 2>(GN, GK));
  auto tc = tensor(c, dextents<int32_t, 2>(GN, GM));
  op.run(ta.slice(0, t * 4), tb, tc.slice(0, t * 4));
}

template [[host_name("tensor_thread")]] [[kernel]] decltype(thread_gemm<false>) thread_gemm<false>;
template [[host_name("tensor_thread_relaxed")]] [[kernel]] decltype(thread_gemm<true>) thread_gemm<true>;
