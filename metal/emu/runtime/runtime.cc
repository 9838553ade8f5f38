// runtime.cc: runs the threadgroups of a dispatch on the calling OS thread. Each GPU thread is a
// fiber with its own stack; a fiber runs until it reaches a threadgroup barrier, a SIMD-group
// function or its end, then the scheduler decides who may continue. Threadgroup memory is fresh
// and filled with 0xFF for every group. The order fibers run in (forward, reverse, shuffled, or
// one simdgroup ahead of the others) is chosen per dispatch, so code that needs a barrier it does
// not have shows up in some order.
//
// The C API at the bottom is what Go calls (through purego, or through runner.cc in a child
// process for AddressSanitizer builds).

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "msl_emu_abi.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MSL_EMU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define MSL_EMU_ASAN 1
#endif
#ifdef MSL_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__) && !defined(MSL_EMU_UCONTEXT)
#define MSL_EMU_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace msl_emu_rt {

// ---- registry -------------------------------------------------------------------------------

static std::vector<const KernelDesc*>& registry() {
  static std::vector<const KernelDesc*> r;
  return r;
}
void register_kernel(const KernelDesc* k) { registry().push_back(k); }

// ---- launch description (mirrored by metal/emu/dispatch.go) ---------------------------------

enum Order : uint32_t { kForward = 0, kReverse = 1, kShuffle = 2, kAhead = 3 };

struct Launch {
  uint64_t kernel;                     // index into the registry
  void* buffers[kMaxBuffers];          // base + offset of each binding, or null
  uint64_t buffer_len[kMaxBuffers];    // bytes from the binding to the end of its buffer
  const uint64_t* fc_values;           // function constants by index
  const uint8_t* fc_defined;
  uint64_t seed;                       // for kShuffle
  uint64_t layout_seed;                // cooperative tensor layouts (coop_layout)
  uint32_t tg_len[kMaxThreadgroupParams];  // [[threadgroup(i)]] lengths in bytes
  uint32_t groups[3];                  // threadgroups per grid
  uint32_t tg[3];                      // threads per threadgroup (as dispatched)
  uint32_t grid[3];                    // threads per grid; 0 = groups*tg (dispatchThreadgroups)
  uint32_t group_begin, group_end;     // the linear threadgroup range this call runs
  uint32_t order;
  uint32_t fc_count;
  uint32_t stack_kib;                  // fiber stack size; 0 = default
  uint32_t flags;                      // reserved
};
static_assert(sizeof(Launch) == 720, "Launch layout changed: update emu.go");
static_assert(offsetof(Launch, tg_len) == 536, "Launch layout changed: update emu.go");
static_assert(offsetof(Launch, groups) == 660, "Launch layout changed: update emu.go");

constexpr uint32_t kMaxThreadgroupMemory = 32 * 1024;
constexpr uint32_t kMaxThreadsPerGroup = 1024;

// ---- fibers ---------------------------------------------------------------------------------

#ifdef MSL_EMU_ASM_SWITCH
// void msl_emu_switch(void** save_sp, void* new_sp): saves the callee-saved registers, MXCSR
// and the x87 control word on the current stack, stores the stack pointer in *save_sp, loads
// new_sp and restores the same from there.
extern "C" void msl_emu_switch(void** save_sp, void* new_sp);
asm(R"(
  .text
  .p2align 4
  .globl msl_emu_switch
  .hidden msl_emu_switch
  .type msl_emu_switch,@function
msl_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size msl_emu_switch, .-msl_emu_switch
)");
#endif

enum State : int { kRunnable, kAtSimd, kAtBarrier, kDone };

struct Fiber {
  char* stack_lo = nullptr;
  size_t stack_size = 0;
#ifdef MSL_EMU_ASM_SWITCH
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
  int state = kRunnable;
  const char* file = nullptr;  // where it waits
  int line = 0;
  const char* what = nullptr;  // which SIMD-group function
  uint32_t xsize = 0;          // bytes it exchanges
  uint32_t simd_seq = 0;       // SIMD-group functions entered so far
  uint32_t group_seq = 0;      // group_exchange calls entered so far
  ThreadInfo ti;
  void* asan_fake = nullptr;
};

struct SimdSlots {
  // Lane i's value sits at i * size (every lane of one call exchanges the same size, checked
  // when the group is released), so a full group's values are read with one copy.
  unsigned char data[2][kSimdWidth * kMaxSimdValue];
  uint32_t mask[2];
  unsigned char memo[2][kMaxSimdValue];  // a result the lanes of one call share (simd_share)
  bool memo_set[2];
};

struct Block {
  const void* key;
  void* p;
  uint32_t size;
  const char* file;  // declaration site of a threadgroup variable
  int line;
};

// Without ASan, threadgroup memory is followed by canary bytes, checked when the group ends.
#ifdef MSL_EMU_ASAN
constexpr uint32_t kCanary = 0;
#else
constexpr uint32_t kCanary = 64;
#endif
static unsigned char canary_byte(uint32_t i) { return (unsigned char)(i * 151 + 0x5b); }

static void* tg_block(uint32_t size, uint32_t align) {
  uint32_t total = size + kCanary;
  void* p = align <= 16 ? malloc(total ? total : 1) : aligned_alloc(align, (total + align - 1) / align * align);
  memset(p, 0xFF, size);
  for (uint32_t i = 0; i < kCanary; i++) ((unsigned char*)p)[size + i] = canary_byte(i);
  return p;
}

static bool canary_ok(const void* p, uint32_t size) {
  for (uint32_t i = 0; i < kCanary; i++)
    if (((const unsigned char*)p)[size + i] != canary_byte(i)) return false;
  return true;
}

struct Worker {
  const Launch* L = nullptr;
  const KernelDesc* k = nullptr;
  LaunchArgs args{};
  void* tg_param_ptrs[kMaxThreadgroupParams] = {};

  std::vector<Fiber> fibers;
  char* stacks = nullptr;  // one mapping for all fiber stacks
  size_t stacks_bytes = 0;
  size_t stack_size = 0;

#ifdef MSL_EMU_ASM_SWITCH
  void* sched_sp = nullptr;
#else
  ucontext_t sched_uc;
#endif
  Fiber* cur = nullptr;
  void* sched_fake = nullptr;
  const void* sched_bottom = nullptr;
  size_t sched_size = 0;

  uint32_t n = 0;    // threads in the current group
  uint32_t nsg = 0;  // simdgroups in the current group
  Dim3 gid{};
  std::vector<SimdSlots> sgs;
  std::vector<Block> blocks;
  uint32_t tg_bytes = 0;
  // group_exchange values, kMaxSimdValue bytes per thread, by call parity: a thread can be one
  // call ahead of another (reading the last call's values) but never two.
  std::vector<unsigned char> group_vals[2];
  // coop_layout tables of the running dispatch, by shape key.
  std::unordered_map<uint64_t, std::vector<int32_t>> layouts;

  bool failed = false;
  std::string err;
};

static thread_local Worker* tw = nullptr;

static void asan_start(void** fake, const void* bottom, size_t size) {
#ifdef MSL_EMU_ASAN
  __sanitizer_start_switch_fiber(fake, bottom, size);
#else
  (void)fake, (void)bottom, (void)size;
#endif
}
static void asan_finish(void* fake, const void** bottom, size_t* size) {
#ifdef MSL_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, bottom, size);
#else
  (void)fake, (void)bottom, (void)size;
#endif
}

static void fiber_main();

#ifndef MSL_EMU_ASM_SWITCH
static void fiber_main_uc() { fiber_main(); }
#endif

static void fiber_init(Worker* w, Fiber* f) {
#ifdef MSL_EMU_ASAN
  __asan_unpoison_memory_region(f->stack_lo, f->stack_size);
#endif
#ifdef MSL_EMU_ASM_SWITCH
  // Initial frame, from high to low addresses: a zero fake return address for fiber_main (at
  // an address = 8 mod 16, as after a call), fiber_main's address for msl_emu_switch's ret, six
  // zeroed callee-saved registers, then MXCSR (0x1F80: round to nearest, no FTZ) and the x87
  // control word (0x037F).
  uintptr_t top = (uintptr_t)(f->stack_lo + f->stack_size) & ~uintptr_t(15);
  uint64_t* p = (uint64_t*)(top - 8);
  *p = 0;
  *--p = (uint64_t)(uintptr_t)&fiber_main;
  for (int i = 0; i < 6; i++) *--p = 0;
  --p;
  uint32_t* ctl = (uint32_t*)p;
  ctl[0] = 0x1F80;
  ctl[1] = 0x037F;
  f->sp = p;
#else
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = f->stack_lo;
  f->uc.uc_stack.ss_size = f->stack_size;
  f->uc.uc_link = nullptr;
  makecontext(&f->uc, fiber_main_uc, 0);
#endif
  (void)w;
}

// resume runs f until it blocks or ends.
static void resume(Worker* w, Fiber* f) {
  w->cur = f;
  asan_start(&w->sched_fake, f->stack_lo, f->stack_size);
#ifdef MSL_EMU_ASM_SWITCH
  msl_emu_switch(&w->sched_sp, f->sp);
#else
  swapcontext(&w->sched_uc, &f->uc);
#endif
  asan_finish(w->sched_fake, nullptr, nullptr);
  w->cur = nullptr;
}

// yield returns from a fiber to the scheduler; it comes back when the scheduler resumes it.
static void yield(Worker* w, Fiber* f) {
  asan_start(&f->asan_fake, w->sched_bottom, w->sched_size);
#ifdef MSL_EMU_ASM_SWITCH
  msl_emu_switch(&f->sp, w->sched_sp);
#else
  swapcontext(&f->uc, &w->sched_uc);
#endif
  asan_finish(f->asan_fake, &w->sched_bottom, &w->sched_size);
}

static void fiber_main() {
  Worker* w = tw;
  Fiber* f = w->cur;
  asan_finish(nullptr, &w->sched_bottom, &w->sched_size);
  w->k->entry(w->args);
  f->state = kDone;
  asan_start(nullptr, w->sched_bottom, w->sched_size);  // this fiber's frames are gone
#ifdef MSL_EMU_ASM_SWITCH
  msl_emu_switch(&f->sp, w->sched_sp);
#else
  swapcontext(&f->uc, &w->sched_uc);
#endif
  __builtin_trap();  // never resumed
}

// ---- errors ---------------------------------------------------------------------------------

static std::string strf(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// lanes formats a set of thread indices as {0..15, 17}.
static std::string lanes(const std::vector<uint32_t>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) j++;
    if (i) s += ", ";
    s += j > i ? strf("%u..%u", v[i], v[j]) : strf("%u", v[i]);
    i = j + 1;
  }
  return s + "}";
}

// threads_of lists the threads of a simdgroup starting at thread lo whose lanes are set in mask.
static std::vector<uint32_t> threads_of(uint32_t lo, uint32_t mask) {
  std::vector<uint32_t> v;
  for (uint32_t l = 0; l < kSimdWidth; l++)
    if ((mask >> l) & 1) v.push_back(lo + l);
  return v;
}

static std::string group_name(const Worker* w) {
  return strf("threadgroup (%u,%u,%u)", w->gid.x, w->gid.y, w->gid.z);
}

static void set_error(Worker* w, const std::string& msg) {
  if (!w->failed) {
    w->failed = true;
    w->err = msg;
  }
}

[[noreturn]] void fail(const char* file, int line, const char* msg) {
  Worker* w = tw;
  std::string where = w->cur ? strf(", thread %u", w->cur->ti.tiitg) : "";
  set_error(w, strf("%s:%d: %s (%s%s)", file, line, msg, group_name(w).c_str(), where.c_str()));
  if (w->cur) {
    Fiber* f = w->cur;
    for (;;) yield(w, f);  // the scheduler sees failed and never resumes it
  }
  abort();
}

// ---- the kernel-side primitives -------------------------------------------------------------

const ThreadInfo* current_thread() { return &tw->cur->ti; }

// publish stores this lane's value for the simdgroup's current call and waits until every active
// lane has arrived; it returns the call's slot parity.
static uint32_t publish(Worker* w, Fiber* f, const void* val, uint32_t size, const char* file,
                        int line, const char* what) {
  if (size > (uint32_t)kMaxSimdValue) fail(file, line, "SIMD-group function on a value larger than 64 bytes");
  SimdSlots& s = w->sgs[f->ti.sgitg];
  uint32_t par = f->simd_seq & 1;
  memcpy(s.data[par] + f->ti.tiisg * size, val, size);
  f->state = kAtSimd;
  f->file = file;
  f->line = line;
  f->what = what;
  f->xsize = size;
  yield(w, f);
  f->simd_seq++;
  return par;
}

uint32_t simd_exchange(const void* val, uint32_t size, void* all, const char* file, int line,
                       const char* what) {
  Worker* w = tw;
  Fiber* f = w->cur;
  uint32_t par = publish(w, f, val, size, file, line, what);
  SimdSlots& s = w->sgs[f->ti.sgitg];
  uint32_t mask = s.mask[par];
  unsigned char* out = (unsigned char*)all;
  if (mask == 0xFFFFFFFFu) {
    memcpy(out, s.data[par], kSimdWidth * size);
  } else {
    for (int lane = 0; lane < kSimdWidth; lane++) {
      if ((mask >> lane) & 1) memcpy(out + lane * size, s.data[par] + lane * size, size);
      else memset(out + lane * size, 0xFF, size);
    }
  }
  return mask;
}

uint32_t simd_share(const void* val, uint32_t size, const unsigned char** data, unsigned char** memo,
                    bool** memo_set, const char* file, int line, const char* what) {
  Worker* w = tw;
  Fiber* f = w->cur;
  uint32_t par = publish(w, f, val, size, file, line, what);
  SimdSlots& s = w->sgs[f->ti.sgitg];
  *data = s.data[par];
  *memo = s.memo[par];
  *memo_set = &s.memo_set[par];
  return s.mask[par];
}

uint32_t group_exchange(const void* val, uint32_t size, const unsigned char** all, const char* file,
                        int line, const char* what) {
  Worker* w = tw;
  Fiber* f = w->cur;
  if (size > (uint32_t)kMaxSimdValue) fail(file, line, "group exchange of a value larger than 64 bytes");
  std::vector<unsigned char>& vals = w->group_vals[f->group_seq & 1];
  memcpy(vals.data() + size_t(f->ti.tiitg) * kMaxSimdValue, val, size);
  f->state = kAtBarrier;
  f->file = file;
  f->line = line;
  f->what = what;
  yield(w, f);
  f->group_seq++;
  *all = vals.data();
  return kMaxSimdValue;
}

void threadgroup_barrier(const char* file, int line) {
  Worker* w = tw;
  Fiber* f = w->cur;
  f->state = kAtBarrier;
  f->file = file;
  f->line = line;
  f->what = "threadgroup_barrier";
  yield(w, f);
}

void* tg_alloc(const void* key, uint32_t size, uint32_t align, const char* file, int line) {
  Worker* w = tw;
  for (const Block& b : w->blocks)
    if (b.key == key) return b.p;
  w->tg_bytes += size;
  if (w->tg_bytes > kMaxThreadgroupMemory)
    fail(file, line, strf("threadgroup memory of the group exceeds 32 KiB (%u bytes)", w->tg_bytes).c_str());
  void* p = tg_block(size, align);
  w->blocks.push_back(Block{key, p, size, file, line});
  return p;
}

// ---- scheduling -----------------------------------------------------------------------------

static uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// coop_layout draws the layout for key: capacity base+1 or base+2 slots per thread, and the
// elements spread over a seeded permutation of all threads' slots, so slots at random places
// hold no element.
const int32_t* coop_layout(uint64_t key, uint32_t elements, uint32_t threads, uint32_t* cap) {
  Worker* w = tw;
  uint64_t s = w->L->layout_seed * 0x9E3779B97F4A7C15ull ^ key;
  std::vector<int32_t>& t = w->layouts[key];
  uint32_t c = (elements + threads - 1) / threads + 1 + uint32_t(splitmix(s) & 1);
  *cap = c;
  if (!t.empty()) return t.data();
  std::vector<uint32_t> slots(size_t(c) * threads);
  for (uint32_t i = 0; i < slots.size(); i++) slots[i] = i;
  for (uint32_t i = (uint32_t)slots.size(); i > 1; i--) std::swap(slots[i - 1], slots[splitmix(s) % i]);
  t.assign(slots.size(), -1);
  for (uint32_t e = 0; e < elements; e++) t[slots[e]] = int32_t(e);
  return t.data();
}

static bool same_site(const Fiber& a, const Fiber& b) {
  return a.line == b.line && (a.what == b.what || strcmp(a.what, b.what) == 0) &&
         (a.file == b.file || strcmp(a.file, b.file) == 0);
}

static std::string site(const Fiber& f) { return strf("%s at %s:%d", f.what, f.file, f.line); }

// release_simd lets every simdgroup whose live lanes all wait in the same SIMD-group function
// continue. It reports divergence (lanes at different calls, or some lanes at a threadgroup
// barrier) as an error.
static bool release_simd(Worker* w, bool* released) {
  for (uint32_t sg = 0; sg < w->nsg; sg++) {
    uint32_t lo = sg * kSimdWidth, hi = std::min(w->n, lo + kSimdWidth);
    const Fiber* first = nullptr;
    const Fiber* bar = nullptr;
    uint32_t mask = 0, barmask = 0;  // lanes waiting in a SIMD-group function, at a barrier
    for (uint32_t i = lo; i < hi; i++) {
      const Fiber& f = w->fibers[i];
      if (f.state == kAtSimd) {
        if (!first) first = &f;
        mask |= 1u << (i - lo);
      } else if (f.state == kAtBarrier) {
        barmask |= 1u << (i - lo);
        bar = &f;
      }
    }
    if (!first) continue;
    if (barmask) {
      set_error(w, strf("%s, simdgroup %u: threads %s wait in %s while threads %s wait at %s "
                        "(divergent SIMD-group function and barrier)",
                        group_name(w).c_str(), sg, lanes(threads_of(lo, mask)).c_str(),
                        site(*first).c_str(), lanes(threads_of(lo, barmask)).c_str(),
                        site(*bar).c_str()));
      return false;
    }
    for (uint32_t i = lo; i < hi; i++) {
      const Fiber& f = w->fibers[i];
      if (!((mask >> (i - lo)) & 1)) continue;
      if (!same_site(f, *first) || f.simd_seq != first->simd_seq || f.xsize != first->xsize) {
        set_error(w, strf("%s, simdgroup %u: thread %u waits in %s while thread %u waits in %s "
                          "(SIMD-group functions in divergent control flow are not supported)",
                          group_name(w).c_str(), sg, first->ti.tiitg, site(*first).c_str(),
                          f.ti.tiitg, site(f).c_str()));
        return false;
      }
    }
    w->sgs[sg].mask[first->simd_seq & 1] = mask;
    w->sgs[sg].memo_set[first->simd_seq & 1] = false;
    for (uint32_t i = lo; i < hi; i++)
      if ((mask >> (i - lo)) & 1) w->fibers[i].state = kRunnable;
    *released = true;
  }
  return true;
}

// release_barrier lets the group pass a threadgroup barrier once every thread waits at it.
// It returns false with done set when every thread has ended.
static bool release_barrier(Worker* w, bool* done) {
  const Fiber* first = nullptr;
  std::vector<uint32_t> ended;
  for (uint32_t i = 0; i < w->n; i++) {
    const Fiber& f = w->fibers[i];
    if (f.state == kDone) {
      ended.push_back(i);
      continue;
    }
    if (!first) first = &f;
    if (!same_site(f, *first)) {
      set_error(w, strf("%s: threads wait at different barriers: thread %u at %s, thread %u at %s",
                        group_name(w).c_str(), first->ti.tiitg, site(*first).c_str(), f.ti.tiitg,
                        site(f).c_str()));
      return false;
    }
  }
  if (!first) {
    *done = true;
    return true;
  }
  if (!ended.empty()) {
    set_error(w, strf("%s: %s reached by %u of %u threads; threads %s already returned "
                      "(undefined behaviour on the GPU)",
                      group_name(w).c_str(), site(*first).c_str(), w->n - (uint32_t)ended.size(),
                      w->n, lanes(ended).c_str()));
    return false;
  }
  for (uint32_t i = 0; i < w->n; i++) w->fibers[i].state = kRunnable;
  return true;
}

static bool alloc_stacks(Worker* w, uint32_t n, size_t stack_size) {
  if (n <= w->fibers.size() && stack_size == w->stack_size) return true;
  if (w->stacks) munmap(w->stacks, w->stacks_bytes);
  w->stacks = nullptr;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t per = stack_size + page;  // a guard page below every stack
  size_t bytes = per * n;
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return false;
  w->stacks = (char*)m;
  w->stacks_bytes = bytes;
  w->stack_size = stack_size;
  w->fibers.assign(n, Fiber{});
  for (uint32_t i = 0; i < n; i++) {
    char* base = w->stacks + i * per;
    mprotect(base, page, PROT_NONE);
    w->fibers[i].stack_lo = base + page;
    w->fibers[i].stack_size = stack_size;
  }
  return true;
}

static void free_group_memory(Worker* w) {
  for (Block& b : w->blocks) {
    if (!canary_ok(b.p, b.size))
      set_error(w, strf("%s: a kernel wrote past the end of the threadgroup variable declared at %s:%d (%u bytes)",
                        group_name(w).c_str(), b.file, b.line, b.size));
    free(b.p);
  }
  w->blocks.clear();
  for (int i = 0; i < kMaxThreadgroupParams; i++) {
    void*& p = w->tg_param_ptrs[i];
    if (p && !canary_ok(p, w->L->tg_len[i]))
      set_error(w, strf("%s: a kernel wrote past the end of [[threadgroup(%d)]] (%u bytes)", group_name(w).c_str(), i,
                        w->L->tg_len[i]));
    free(p);
    p = nullptr;
  }
  w->tg_bytes = 0;
}

// run_ahead is one round of kAhead: the simdgroup *ahead runs its runnable lanes; once it has
// none (it waits at a barrier or has ended), a simdgroup with runnable lanes is drawn at random
// to run next (-1: none is left). So between two barriers one simdgroup goes through all its
// SIMD-group calls before another starts, as a GPU may schedule them: code that relies on other
// simdgroups having read threadgroup memory by the time a SIMD-group call returns fails here.
static void run_ahead(Worker* w, int* ahead, uint64_t* rng) {
  auto lanes_of = [&](int sg, uint32_t* lo, uint32_t* hi) {
    *lo = uint32_t(sg) * kSimdWidth;
    *hi = std::min(w->n, *lo + kSimdWidth);
  };
  auto runnable = [&](int sg) {
    uint32_t lo, hi;
    lanes_of(sg, &lo, &hi);
    for (uint32_t i = lo; i < hi; i++)
      if (w->fibers[i].state == kRunnable) return true;
    return false;
  };
  if (*ahead < 0 || !runnable(*ahead)) {
    std::vector<int> ready;
    for (uint32_t sg = 0; sg < w->nsg; sg++)
      if (runnable(int(sg))) ready.push_back(int(sg));
    *ahead = ready.empty() ? -1 : ready[splitmix(*rng) % ready.size()];
  }
  if (*ahead < 0) return;
  uint32_t lo, hi;
  lanes_of(*ahead, &lo, &hi);
  for (uint32_t i = lo; i < hi; i++) {
    Fiber& f = w->fibers[i];
    if (f.state != kRunnable) continue;
    resume(w, &f);
    if (w->failed) return;
  }
}

static bool run_group(Worker* w, uint32_t linear) {
  const Launch* L = w->L;
  Dim3 gid{linear % L->groups[0], (linear / L->groups[0]) % L->groups[1],
           linear / (L->groups[0] * L->groups[1])};
  w->gid = gid;
  const uint32_t g3[3] = {gid.x, gid.y, gid.z};
  uint32_t t3[3];
  for (int d = 0; d < 3; d++) {
    t3[d] = L->tg[d];
    if (L->grid[0]) t3[d] = std::min(L->tg[d], L->grid[d] - g3[d] * L->tg[d]);
  }
  uint32_t n = t3[0] * t3[1] * t3[2];
  w->n = n;
  w->nsg = (n + kSimdWidth - 1) / kSimdWidth;
  if (w->sgs.size() < w->nsg) w->sgs.resize(w->nsg);
  for (auto& v : w->group_vals)
    if (v.size() < size_t(n) * kMaxSimdValue) v.resize(size_t(n) * kMaxSimdValue);

  Dim3 tpg = L->grid[0] ? Dim3{L->grid[0], L->grid[1], L->grid[2]}
                        : Dim3{L->groups[0] * L->tg[0], L->groups[1] * L->tg[1], L->groups[2] * L->tg[2]};
  uint32_t dispatch_n = L->tg[0] * L->tg[1] * L->tg[2];
  for (uint32_t i = 0; i < n; i++) {
    Fiber& f = w->fibers[i];
    ThreadInfo& t = f.ti;
    t.tpitg = Dim3{i % t3[0], (i / t3[0]) % t3[1], i / (t3[0] * t3[1])};
    t.tgpig = gid;
    t.tpig = Dim3{gid.x * L->tg[0] + t.tpitg.x, gid.y * L->tg[1] + t.tpitg.y, gid.z * L->tg[2] + t.tpitg.z};
    t.tptg = Dim3{t3[0], t3[1], t3[2]};
    t.dtptg = Dim3{L->tg[0], L->tg[1], L->tg[2]};
    t.tgpg = Dim3{L->groups[0], L->groups[1], L->groups[2]};
    t.tpg = tpg;
    t.tiitg = i;
    t.tiisg = i % kSimdWidth;
    t.sgitg = i / kSimdWidth;
    t.sgptg = w->nsg;
    t.dsgptg = (dispatch_n + kSimdWidth - 1) / kSimdWidth;
    t.qgitg = i / 4;
    t.tiiqg = i % 4;
    t.qgptg = (n + 3) / 4;
    f.state = kRunnable;
    f.simd_seq = 0;
    f.group_seq = 0;
    f.file = nullptr;
    f.what = nullptr;
    f.line = 0;
    f.asan_fake = nullptr;
    fiber_init(w, &f);
  }

  // [[threadgroup(i)]] parameters: fresh and poisoned for every group.
  for (int i = 0; i < kMaxThreadgroupParams; i++) {
    uint32_t len = L->tg_len[i];
    if (!len) continue;
    w->tg_bytes += len;
    w->tg_param_ptrs[i] = tg_block(len, 16);
  }
  w->args.tg_params = w->tg_param_ptrs;
  if (w->tg_bytes > kMaxThreadgroupMemory) {
    set_error(w, strf("threadgroup parameters take %u bytes, more than 32 KiB", w->tg_bytes));
    free_group_memory(w);
    return false;
  }

  std::vector<uint32_t> order(n);
  uint64_t rng = L->seed * 0x2545F4914F6CDD1Dull ^ (uint64_t(linear) << 32) ^ 0x5851F42D4C957F2Dull;
  int ahead = -1;  // kAhead: the simdgroup running ahead of the others
  for (;;) {
    if (L->order == kAhead) {
      run_ahead(w, &ahead, &rng);
    } else {
      for (uint32_t i = 0; i < n; i++) order[i] = L->order == kReverse ? n - 1 - i : i;
      if (L->order == kShuffle)
        for (uint32_t i = n; i > 1; i--) std::swap(order[i - 1], order[splitmix(rng) % i]);
      for (uint32_t i : order) {
        Fiber& f = w->fibers[i];
        if (f.state != kRunnable) continue;
        resume(w, &f);
        if (w->failed) break;
      }
    }
    if (w->failed) break;
    bool released = false;
    if (!release_simd(w, &released)) break;
    if (released) continue;
    if (L->order == kAhead && ahead >= 0) continue;  // another simdgroup still has to run
    bool done = false;
    if (!release_barrier(w, &done) || done) break;
  }
  free_group_memory(w);
  return !w->failed;
}

static Worker* worker() {
  if (!tw) tw = new Worker();
  return tw;
}

}  // namespace msl_emu_rt

// ---- C API ----------------------------------------------------------------------------------

using namespace msl_emu_rt;

EXPORT int msl_emu_abi_version() { return 1; }
EXPORT int msl_emu_launch_size() { return (int)sizeof(Launch); }
EXPORT int msl_emu_kernel_count() { return (int)registry().size(); }

EXPORT int msl_emu_kernel_name(int i, char* buf, int cap) {
  if (i < 0 || i >= (int)registry().size()) return -1;
  int n = (int)strlen(registry()[i]->name);
  if (n < cap) memcpy(buf, registry()[i]->name, n + 1);
  return n;
}

// msl_emu_kernel_params copies up to cap parameter descriptions, returns the count, and stores
// the kernel's [[max_total_threads_per_threadgroup]] (0 if none) in *max_threads.
EXPORT int msl_emu_kernel_params(int i, ParamDesc* out, int cap, uint32_t* max_threads) {
  if (i < 0 || i >= (int)registry().size()) return -1;
  const KernelDesc* k = registry()[i];
  for (int j = 0; j < k->nparams && j < cap; j++) out[j] = k->params[j];
  *max_threads = k->max_threads;
  return k->nparams;
}

// msl_emu_run runs threadgroups [group_begin, group_end) of a dispatch. It returns 0, or 1 with
// a message in err.
EXPORT int msl_emu_run(const Launch* L, char* err, int errcap) {
  Worker* w = worker();
  auto out = [&](const std::string& msg) {
    snprintf(err, errcap, "%s", msg.c_str());
    return 1;
  };
  if (L->kernel >= registry().size()) return out("no such kernel");
  w->L = L;
  w->k = registry()[L->kernel];
  w->failed = false;
  w->err.clear();
  uint32_t n = L->tg[0] * L->tg[1] * L->tg[2];
  if (n == 0 || n > kMaxThreadsPerGroup) return out(strf("%u threads per threadgroup (1..1024)", n));
  size_t stack = size_t(L->stack_kib ? L->stack_kib : 64) * 1024;
  if (!alloc_stacks(w, n, stack)) return out("cannot map fiber stacks");
  w->args.buffers = L->buffers;
  w->args.tg_params = w->tg_param_ptrs;
  w->args.fc_values = L->fc_values;
  w->args.fc_defined = L->fc_defined;
  w->args.fc_count = L->fc_count;
  w->k->prepare(w->args);
  w->layouts.clear();  // tables belong to one dispatch (its layout seed)
  for (uint32_t g = L->group_begin; g < L->group_end; g++) {
    if (!run_group(w, g)) return out(w->err);
  }
  return 0;
}
