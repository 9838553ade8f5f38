// runner.cc: main() of the helper process used for AddressSanitizer (and isolated) builds. Go
// cannot host ASan in its own process (ASan's shadow memory overlaps the Go heap), so it sends
// each dispatch here over stdin and reads the buffers back from stdout. Every buffer is copied
// into a malloc block of exactly its length, so ASan sees accesses past its end. A memory error
// ends the process with ASan's report on stderr, which Go turns into the dispatch's error.
//
// Protocol (little-endian): request u32 op (1 describe, 2 run, 3 quit).
//   describe -> u32 count, per kernel {u32 len, name, u32 max_threads, u32 nparams, ParamDesc[]}
//   run: u32 kernel, u32 groups[3], tg[3], grid[3], order, u64 seed, u64 layout_seed, u32 stack_kib,
//        u32 fc_count, u64 values[fc_count], u8 defined[fc_count], u32 tg_len[31],
//        u32 nbuf, {u64 len, bytes}[nbuf], {i32 buf, u64 offset}[31]
//     -> u32 status, u32 errlen, err, then every buffer's bytes.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "msl_emu_abi.h"

using msl_emu_rt::ParamDesc;

extern "C" int msl_emu_kernel_count();
extern "C" int msl_emu_kernel_name(int i, char* buf, int cap);
extern "C" int msl_emu_kernel_params(int i, ParamDesc* out, int cap, uint32_t* max_threads);
extern "C" int msl_emu_run(const void* launch, char* err, int errcap);
extern "C" int msl_emu_launch_size();

namespace {

void rd(void* p, size_t n) {
  if (n && fread(p, 1, n, stdin) != n) exit(0);  // Go closed the pipe
}
template <class T> T rd() {
  T v;
  rd(&v, sizeof v);
  return v;
}
void wr(const void* p, size_t n) {
  if (n && fwrite(p, 1, n, stdout) != n) exit(1);
}
template <class T> void wr(T v) { wr(&v, sizeof v); }

// Mirrors msl_emu_rt::Launch in runtime.cc.
struct Launch {
  uint64_t kernel;
  void* buffers[31];
  uint64_t buffer_len[31];
  const uint64_t* fc_values;
  const uint8_t* fc_defined;
  uint64_t seed;
  uint64_t layout_seed;
  uint32_t tg_len[31];
  uint32_t groups[3], tg[3], grid[3];
  uint32_t group_begin, group_end, order, fc_count, stack_kib, flags;
};

void describe() {
  int n = msl_emu_kernel_count();
  wr<uint32_t>(n);
  for (int i = 0; i < n; i++) {
    char name[512];
    int len = msl_emu_kernel_name(i, name, sizeof name);
    wr<uint32_t>(len);
    wr(name, len);
    ParamDesc params[64];
    uint32_t maxt = 0;
    int np = msl_emu_kernel_params(i, params, 64, &maxt);
    wr<uint32_t>(maxt);
    wr<uint32_t>(np);
    wr(params, sizeof(ParamDesc) * np);
  }
}

void run() {
  Launch L;
  memset(&L, 0, sizeof L);
  L.kernel = rd<uint32_t>();
  for (auto& v : L.groups) v = rd<uint32_t>();
  for (auto& v : L.tg) v = rd<uint32_t>();
  for (auto& v : L.grid) v = rd<uint32_t>();
  L.order = rd<uint32_t>();
  L.seed = rd<uint64_t>();
  L.layout_seed = rd<uint64_t>();
  L.stack_kib = rd<uint32_t>();
  L.fc_count = rd<uint32_t>();
  std::vector<uint64_t> fcv(L.fc_count + 1);
  std::vector<uint8_t> fcd(L.fc_count + 1);
  rd(fcv.data(), 8 * L.fc_count);
  rd(fcd.data(), L.fc_count);
  L.fc_values = fcv.data();
  L.fc_defined = fcd.data();
  for (auto& v : L.tg_len) v = rd<uint32_t>();
  uint32_t nbuf = rd<uint32_t>();
  std::vector<unsigned char*> bufs(nbuf);
  std::vector<uint64_t> lens(nbuf);
  for (uint32_t i = 0; i < nbuf; i++) {
    lens[i] = rd<uint64_t>();
    bufs[i] = (unsigned char*)malloc(lens[i] ? lens[i] : 1);  // exactly the buffer's length
    rd(bufs[i], lens[i]);
  }
  for (int i = 0; i < 31; i++) {
    int32_t b = rd<int32_t>();
    uint64_t off = rd<uint64_t>();
    if (b >= 0 && (uint32_t)b < nbuf) {
      L.buffers[i] = bufs[b] + off;
      L.buffer_len[i] = lens[b] - off;
    }
  }
  uint32_t total = L.groups[0] * L.groups[1] * L.groups[2];
  L.group_begin = 0;
  L.group_end = total;
  char err[4096] = {0};
  int status = msl_emu_run(&L, err, sizeof err);
  uint32_t elen = status ? (uint32_t)strlen(err) : 0;
  wr<uint32_t>(status);
  wr<uint32_t>(elen);
  wr(err, elen);
  for (uint32_t i = 0; i < nbuf; i++) {
    wr(bufs[i], lens[i]);
    free(bufs[i]);
  }
}

}  // namespace

int main() {
  if (msl_emu_launch_size() != (int)sizeof(Launch)) {
    fprintf(stderr, "runner: Launch layout mismatch\n");
    return 2;
  }
  for (;;) {
    uint32_t op = rd<uint32_t>();
    if (op == 1) describe();
    else if (op == 2) run();
    else return 0;
    fflush(stdout);
  }
}
