// msl_emu_abi.h: the narrow interface between kernel translation units (which are full of MSL
// keyword macros) and the runtime (plain C++). Nothing here may use an MSL keyword.
#ifndef MSL_EMU_ABI_H
#define MSL_EMU_ABI_H

#include <cstddef>
#include <cstdint>

#define MSL_EMU_HIDDEN __attribute__((visibility("hidden")))

namespace msl_emu_rt {

constexpr int kSimdWidth = 32;
constexpr int kMaxBuffers = 31;          // [[buffer(0..30)]]
constexpr int kMaxThreadgroupParams = 31; // [[threadgroup(0..30)]]
constexpr int kMaxSimdValue = 64;        // bytes per lane a SIMD-group function can exchange

struct Dim3 {
  uint32_t x, y, z;
};

// ThreadInfo holds every built-in input of one GPU thread.
struct ThreadInfo {
  Dim3 tpig;   // thread_position_in_grid
  Dim3 tpitg;  // thread_position_in_threadgroup
  Dim3 tgpig;  // threadgroup_position_in_grid
  Dim3 tptg;   // threads_per_threadgroup (the actual size of this group, smaller at non-uniform edges)
  Dim3 dtptg;  // dispatch_threads_per_threadgroup
  Dim3 tgpg;   // threadgroups_per_grid
  Dim3 tpg;    // threads_per_grid
  uint32_t tiitg;  // thread_index_in_threadgroup
  uint32_t tiisg;  // thread_index_in_simdgroup
  uint32_t sgitg;  // simdgroup_index_in_threadgroup
  uint32_t sgptg;  // simdgroups_per_threadgroup
  uint32_t dsgptg; // dispatch_simdgroups_per_threadgroup
  uint32_t qgitg;  // quadgroup_index_in_threadgroup
  uint32_t tiiqg;  // thread_index_in_quadgroup
  uint32_t qgptg;  // quadgroups_per_threadgroup
};

// LaunchArgs is what a generated kernel entry binds its parameters from.
struct LaunchArgs {
  void* const* buffers;       // [kMaxBuffers]; a binding is the buffer's base plus its offset
  void* const* tg_params;     // [kMaxThreadgroupParams], fresh (poisoned) memory per threadgroup
  const uint64_t* fc_values;  // function constant values by index, raw bits, little-endian
  const uint8_t* fc_defined;  // 1 where fc_values[i] was set
  uint32_t fc_count;
};

// Parameter kinds, as reported by kernel_info.
enum ParamKind : int32_t { kParamBuffer = 1, kParamThreadgroup = 2, kParamBuiltin = 3 };

struct ParamDesc {
  int32_t kind;
  int32_t index;   // buffer or threadgroup index; -1 for built-ins
  uint32_t size;   // sizeof the pointee (buffer/threadgroup parameters)
  int32_t is_ref;  // 1 for a reference (the binding must hold a whole object)
};

typedef void (*EntryFn)(const LaunchArgs&);

struct KernelDesc {
  const char* name;
  EntryFn entry;    // runs one GPU thread
  EntryFn prepare;  // loads the file's function constants into this OS thread
  const ParamDesc* params;
  int32_t nparams;
  uint32_t max_threads;  // [[max_total_threads_per_threadgroup(n)]], 0 if none
};

// Implemented by the runtime.
MSL_EMU_HIDDEN void register_kernel(const KernelDesc* k);
MSL_EMU_HIDDEN const ThreadInfo* current_thread();
// simd_exchange publishes size bytes from val for this lane, waits for the other active lanes of
// the simdgroup at the same call, then copies every lane's bytes into all (32*size bytes; lanes
// that are not active are filled with 0xFF) and returns the mask of active lanes.
MSL_EMU_HIDDEN uint32_t simd_exchange(const void* val, uint32_t size, void* all, const char* file,
                                      int line, const char* what);
// simd_share is simd_exchange without the copy: it points *data at the lanes' bytes (lane i's at
// i*size, valid until this lane's next SIMD-group call) and *memo at kMaxSimdValue bytes shared
// by the lanes of this call, *memo_set false until a lane sets it, so a reduction that every lane
// would compute alike is computed once per simdgroup.
MSL_EMU_HIDDEN uint32_t simd_share(const void* val, uint32_t size, const unsigned char** data,
                                   unsigned char** memo, bool** memo_set, const char* file,
                                   int line, const char* what);
MSL_EMU_HIDDEN void threadgroup_barrier(const char* file, int line);
// group_exchange is a threadgroup barrier (reported as what, at file:line) that also publishes
// size (<= kMaxSimdValue) bytes from val: once every thread of the group has arrived, *all
// points at their values, thread i's at i times the returned stride, valid until this thread's
// next group_exchange.
MSL_EMU_HIDDEN uint32_t group_exchange(const void* val, uint32_t size, const unsigned char** all,
                                       const char* file, int line, const char* what);
// coop_layout returns the running dispatch's cooperative-tensor layout for an op identified by
// key whose destination has `elements` elements spread over `threads` threads: slot i of thread
// t holds element table[t * *cap + i] (row-major) or -1 (no element). It depends only on the
// dispatch's layout seed and the arguments.
MSL_EMU_HIDDEN const int32_t* coop_layout(uint64_t key, uint32_t elements, uint32_t threads,
                                          uint32_t* cap);
// tg_alloc returns the threadgroup variable identified by key for the current threadgroup,
// allocating it (filled with 0xFF) the first time a thread of the group asks.
MSL_EMU_HIDDEN void* tg_alloc(const void* key, uint32_t size, uint32_t align, const char* file,
                              int line);
// fail stops the dispatch with a message (used for misuse the header detects).
[[noreturn]] MSL_EMU_HIDDEN void fail(const char* file, int line, const char* msg);

}  // namespace msl_emu_rt

#endif
