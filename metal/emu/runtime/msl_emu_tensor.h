// msl_emu_tensor.h: Metal 4 tensors (<metal_tensor>) and Metal Performance Primitives' matmul2d
// on cooperative tensors, for files the generator marked MSL_EMU_METAL4. msl_emu.h includes it
// after the MSL keyword macros, so `device` and `threadgroup` below are the address spaces.
//
// What the emulator chooses where Apple leaves it to the implementation (metal/README.md, "Tensor
// ops"): a cooperative tensor's element-to-thread layout is drawn per dispatch from
// Dispatch.LayoutSeed, the op's m, n and scope (rt::coop_layout), with one or two slots per
// thread more than needed, so kernels that assume a layout or skip is_valid_element fail; the
// layout's shape is part of the cooperative tensor's type; run, load and store are collective
// over the op's scope and fail when a thread of the scope is missing or passes other arguments;
// products are float fused multiply-adds, k ascending.
#ifndef MSL_EMU_TENSOR_H
#define MSL_EMU_TENSOR_H

#define MSL_EMU_SITE const char *file = __builtin_FILE(), int line = __builtin_LINE()

namespace metal {

constexpr size_t dynamic_extent = size_t(-1);

// extents<I, E...>: one extent per dimension, dim 0 the innermost (contiguous) one; E is a
// static extent or dynamic_extent. Every extent is stored, the static ones for the defaults.
template <class I, size_t... E> struct extents {
  static constexpr size_t R = sizeof...(E);
  I v[R];
  constexpr extents() : v{I(E == dynamic_extent ? 0 : E)...} {}
  template <class... J, std::enable_if_t<sizeof...(J) == R && R != 0, int> = 0>
  constexpr extents(J... j) : v{I(j)...} {}
  static constexpr size_t rank() { return R; }
  constexpr I extent(size_t i) const { return v[i]; }
};

namespace tensor_detail {
template <class I, class S> struct dext;
template <class I, size_t... Is> struct dext<I, std::index_sequence<Is...>> {
  using type = extents<I, ((void)Is, dynamic_extent)...>;
};
inline uint64_t mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h * 0xBF58476D1CE4E5B9ull;
}
[[noreturn]] inline void failf(const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
inline void failf(const char* file, int line, const char* fmt, ...) {
  char buf[512];
  __builtin_va_list ap;
  __builtin_va_start(ap, fmt);
  __builtin_vsnprintf(buf, sizeof buf, fmt, ap);
  __builtin_va_end(ap);
  emu::rt::fail(file, line, buf);
}
}  // namespace tensor_detail

template <class I, size_t R> using dextents = typename tensor_detail::dext<I, std::make_index_sequence<R>>::type;

// Tensor kinds: the emulator builds every kind from a pointer, extents and strides.
struct tensor_inline {};
struct tensor_handle {};
struct tensor_offset {};

// tensor<ElementType, Extents, Kind>: a view of memory. ElementType carries the address space
// (`device half` or `device half*`). Element (x0, x1, ...) is at p[x0·stride0 + x1·stride1 ...];
// strides default to packed (stride0 = 1). bound_ is the part of the view that lies inside the
// tensor it was sliced from: tensor ops read 0 outside it and drop writes there.
template <class ElementType, class Extents, class Kind = tensor_handle> struct tensor {
  using element_type = std::remove_pointer_t<ElementType>;
  using extents_type = Extents;
  using index_type = std::remove_cvref_t<decltype(Extents{}.v[0])>;
  static constexpr int R = int(Extents::rank());

  element_type* p_ = nullptr;
  Extents ext_{};
  int stride_[R] = {};
  int bound_[R] = {};

  tensor() = default;
  tensor(element_type* p, Extents e) : p_(p), ext_(e) {
    int s = 1;
    for (int i = 0; i < R; i++) {
      stride_[i] = s;
      s *= int(e.v[i]);
      bound_[i] = int(e.v[i]);
    }
  }
  template <class S> tensor(element_type* p, Extents e, const S& strides) : p_(p), ext_(e) {
    for (int i = 0; i < R; i++) {
      stride_[i] = int(strides[i]);
      bound_[i] = int(e.v[i]);
    }
  }

  index_type get_extent(int i) const { return ext_.v[i]; }
  Extents extents() const { return ext_; }
  index_type get_stride(int i) const { return index_type(stride_[i]); }
  element_type* data() const { return p_; }

  // t[x] / t[x, y]: an element inside the extents (outside, the dispatch fails: the emulator's
  // choice; the tensor ops themselves read 0 there).
  element_type& operator[](int x, MSL_EMU_SITE) const requires(R == 1) { return element_at(&x, file, line); }
  element_type& operator[](int x, int y, MSL_EMU_SITE) const requires(R == 2) {
    const int ix[2] = {x, y};
    return element_at(ix, file, line);
  }
  element_type& element_at(const int* ix, const char* file, int line) const {
    long off = 0;
    for (int i = 0; i < R; i++) {
      if (ix[i] < 0 || ix[i] >= int(ext_.v[i]) || ix[i] >= bound_[i])
        tensor_detail::failf(file, line, "tensor element access: index %d of dimension %d is outside the tensor (extent %d)",
                             ix[i], i, min(int(ext_.v[i]), bound_[i]));
      off += long(ix[i]) * stride_[i];
    }
    return p_[off];
  }

  // slice(x0, x1, ...) views the tensor from that origin on: its extents are what remains, or
  // the static extents given as template arguments (slice<BN, BM>(x, y)).
  template <size_t... S, class... J> auto slice(J... off) const {
    static_assert(sizeof...(J) == size_t(R), "slice needs one offset per dimension");
    static_assert(sizeof...(S) == 0 || sizeof...(S) == size_t(R), "slice<...>: one extent per dimension");
    using E2 = std::conditional_t<sizeof...(S) == 0, dextents<index_type, size_t(R)>, metal::extents<index_type, S...>>;
    constexpr size_t want[R > 0 ? R : 1] = {S...};
    const int o[R] = {int(off)...};
    tensor<ElementType, E2, tensor_inline> t;
    long at = 0;
    for (int i = 0; i < R; i++) {
      at += long(o[i]) * stride_[i];
      const int rest = max(0, int(ext_.v[i]) - o[i]);
      t.ext_.v[i] = index_type(sizeof...(S) == 0 || want[i] == dynamic_extent ? rest : int(want[i]));
      t.stride_[i] = stride_[i];
      t.bound_[i] = max(0, min(bound_[i] - o[i], int(t.ext_.v[i])));
    }
    t.p_ = p_ + at;
    return t;
  }

  // get/put are the tensor ops' element access: 0 and dropped outside the bounds.
  float get(int x, int y) const {
    if (x < 0 || y < 0 || x >= bound_[0] || y >= bound_[1]) return 0.0f;
    return float(p_[long(x) * stride_[0] + long(y) * stride_[1]]);
  }
  void put(int x, int y, float v) const {
    if (x < 0 || y < 0 || x >= bound_[0] || y >= bound_[1]) return;
    p_[long(x) * stride_[0] + long(y) * stride_[1]] = v;
  }
  uint64_t fingerprint() const {
    uint64_t h = tensor_detail::mix(0x7E45, (uint64_t)(__UINTPTR_TYPE__)p_);
    for (int i = 0; i < R; i++)
      h = tensor_detail::mix(tensor_detail::mix(tensor_detail::mix(h, uint64_t(ext_.v[i])), uint64_t(stride_[i])), uint64_t(bound_[i]));
    return h;
  }
};

template <class P, class I, size_t... X>
tensor(P*, extents<I, X...>) -> tensor<P, extents<I, X...>, tensor_inline>;
template <class P, class I, size_t... X, class S>
tensor(P*, extents<I, X...>, S) -> tensor<P, extents<I, X...>, tensor_inline>;

// Execution scopes of tensor ops. execution_simdgroup is the calling simdgroup (any number of
// simdgroups per threadgroup); execution_simdgroups<N> (N > 1) is the whole threadgroup, which
// must hold exactly N full simdgroups; execution_thread is the calling thread alone.
template <int N> struct execution_simdgroups {
  static constexpr int simdgroups = N;
};
using execution_simdgroup = execution_simdgroups<1>;
template <int N> struct execution_threads {
  static_assert(N == 1, "the emulator knows execution_thread only");
};
using execution_thread = execution_threads<1>;

namespace tensor_detail {
enum scope_kind : int { kThread, kSimd, kGroup };
template <class S> struct scope_of;
template <int N> struct scope_of<execution_simdgroups<N>> {
  static constexpr scope_kind kind = N == 1 ? kSimd : kGroup;
  static constexpr int threads = 32 * N;
};
template <> struct scope_of<execution_threads<1>> {
  static constexpr scope_kind kind = kThread;
  static constexpr int threads = 1;
};

// coop_state is what a cooperative tensor knows of its op: its layout table (from the runtime)
// and where the calling thread sits in the scope.
struct coop_state {
  const int32_t* table = nullptr;
  uint64_t key = 0;
  uint32_t cap = 0, tix = 0, threads = 0;
  int kind = kThread, m = 0, n = 0;
  int element(int i) const { return i >= 0 && uint32_t(i) < cap ? table[tix * cap + uint32_t(i)] : -1; }
};

// collective makes the threads of the scope meet at file:line, as the GPU's cooperative op
// would; it fails if one is missing or passes other arguments (h) than the first.
inline void collective(const coop_state& s, uint64_t h, const char* file, int line, const char* what) {
  if (s.kind == kThread) return;
  if (s.kind == kSimd) {
    auto g = simd_detail::gather(h, file, line, what);
    if (g.mask != 0xFFFFFFFFu)
      failf(file, line, "%s (execution_simdgroup): lanes with mask 0x%08x called it; every lane of the simdgroup must", what, g.mask);
    for (uint32_t l = 1; l < 32; l++)
      if (g.v[l] != g.v[0])
        failf(file, line, "%s (execution_simdgroup): lane %u passes other tensors or shape than lane 0", what, l);
    return;
  }
  const unsigned char* all;
  uint32_t stride = emu::rt::group_exchange(&h, sizeof h, &all, file, line, what);
  uint64_t first;
  __builtin_memcpy(&first, all, sizeof first);
  for (uint32_t t = 1; t < s.threads; t++) {
    uint64_t v;
    __builtin_memcpy(&v, all + t * stride, sizeof v);
    if (v != first) failf(file, line, "%s (execution_simdgroups): thread %u passes other tensors or shape than thread 0", what, t);
  }
}

// coop_layout<M, N, S> is the destination layout of the ops with an M × N tile in scope S
// (scope_of): the cooperative tensor's type, so a default-constructed destination has it too.
// k, the mode, transposes, precision and element types do not change it.
template <int M, int N, class S> struct coop_layout {
  static constexpr int threads = S::threads;
  // Two spare slots per thread: the runtime's layouts hold one or two slots without an element.
  static constexpr int max_capacity = (M * N + threads - 1) / threads + 2;

  // state checks the scope against the threadgroup and fetches this dispatch's table.
  static coop_state state(const char* file, int line) {
    const ::msl_emu::rt::ThreadInfo* ti = ::msl_emu::rt::current_thread();
    coop_state s;
    s.kind = S::kind;
    s.threads = threads;
    s.m = M;
    s.n = N;
    if (S::kind == kGroup) {
      const uint32_t n = ti->tptg.x * ti->tptg.y * ti->tptg.z;
      if (n != uint32_t(threads))
        failf(file, line, "execution_simdgroups<%d> needs a threadgroup of %d simdgroups (%d threads); this one has %u threads in %u simdgroups",
              threads / 32, threads / 32, threads, n, ti->sgptg);
      s.tix = ti->tiitg;
    } else if (S::kind == kSimd) {
      s.tix = ti->tiisg;
    }
    s.key = mix(mix(mix(0x3A7, uint64_t(M)), uint64_t(N)), uint64_t(S::kind) * 4096 + threads);
    s.table = ::msl_emu::rt::coop_layout(s.key, uint32_t(M * N), uint32_t(threads), &s.cap);
    return s;
  }
};

inline float tf32(float x) {
  uint32_t b = __builtin_bit_cast(uint32_t, x);
  if ((b & 0x7F800000u) == 0x7F800000u) return x;
  b += 0xFFFu + ((b >> 13) & 1u);
  return __builtin_bit_cast(float, b & ~0x1FFFu);
}
}  // namespace tensor_detail

// cooperative_tensor<ElementType, Extents, Layout>: an op's destination spread over the threads
// of its scope. Layout fixes the storage (max_capacity slots); the runtime's table says which slots of
// this thread hold which elements in this dispatch.
template <class ElementType, class Extents, class Layout> struct cooperative_tensor {
  using element_type = ElementType;
  using layout = Layout;
  ElementType v[Layout::max_capacity];
  tensor_detail::coop_state st;

  // A new cooperative tensor holds poison, as uninitialised registers would.
  cooperative_tensor(MSL_EMU_SITE) : st(Layout::state(file, line)) {
    for (auto& x : v) x = simd_detail::poison<ElementType>();
  }

  uint16_t get_capacity() const { return uint16_t(st.cap); }
  bool is_valid_element(int i) const { return st.element(i) >= 0; }
  // get_multidimensional_index(i): {column, row} of slot i; a slot without an element fails.
  array<int, 2> get_multidimensional_index(int i, MSL_EMU_SITE) const {
    const int e = st.element(i);
    if (e < 0)
      tensor_detail::failf(file, line, "cooperative tensor: get_multidimensional_index(%d) of a slot that holds no element (capacity %u; check is_valid_element)", i, st.cap);
    return array<int, 2>{{e % st.n, e / st.n}};
  }
  ElementType& operator[](int i, MSL_EMU_SITE) {
    if (i < 0 || uint32_t(i) >= st.cap)
      tensor_detail::failf(file, line, "cooperative tensor: slot %d outside its capacity %u", i, st.cap);
    return v[i];
  }
  const ElementType& operator[](int i, MSL_EMU_SITE) const {
    if (i < 0 || uint32_t(i) >= st.cap)
      tensor_detail::failf(file, line, "cooperative tensor: slot %d outside its capacity %u", i, st.cap);
    return v[i];
  }
  // Iterators visit the slots that hold an element, in slot order.
  struct iterator {
    cooperative_tensor* ct;
    int i;
    void skip() {
      while (uint32_t(i) < ct->st.cap && ct->st.element(i) < 0) i++;
    }
    ElementType& operator*() const { return ct->v[i]; }
    iterator& operator++() {
      i++;
      skip();
      return *this;
    }
    bool operator==(const iterator& o) const { return i == o.i; }
    bool operator!=(const iterator& o) const { return i != o.i; }
    array<int, 2> get_multidimensional_index() const { return ct->get_multidimensional_index(i); }
  };
  iterator begin() {
    iterator it{this, 0};
    it.skip();
    return it;
  }
  iterator end() { return iterator{this, int(st.cap)}; }

  // load/store move the whole tile; every thread of the scope calls them. Outside the tensor's
  // bounds a load reads 0 and a store writes nothing.
  template <class T> void load(const T& t, MSL_EMU_SITE) {
    tensor_detail::collective(st, tensor_detail::mix(t.fingerprint(), st.key), file, line, "cooperative_tensor::load");
    for (uint32_t i = 0; i < st.cap; i++) {
      const int e = st.element(int(i));
      v[i] = e < 0 ? simd_detail::poison<ElementType>() : ElementType(t.get(e % st.n, e / st.n));
    }
  }
  template <class T> void store(const T& t, MSL_EMU_SITE) const {
    tensor_detail::collective(st, tensor_detail::mix(t.fingerprint(), st.key), file, line, "cooperative_tensor::store");
    for (uint32_t i = 0; i < st.cap; i++) {
      const int e = st.element(int(i));
      if (e >= 0) t.put(e % st.n, e / st.n, float(v[i]));
    }
  }
};

}  // namespace metal

namespace mpp {
namespace tensor_ops {

// matmul2d_descriptor(m, n, k, transpose_left, transpose_right, relaxed_precision, mode): the
// op's tile, C (m×n) = A (m×k) · B (k×n), or += with multiply_accumulate. k = dynamic_extent
// takes k from the input tensors.
struct matmul2d_descriptor {
  enum class mode { multiply, multiply_accumulate };
  int m, n, k;
  bool transpose_left, transpose_right, relaxed_precision;
  mode matmul_mode;
  constexpr matmul2d_descriptor(int m_, int n_, int k_ = int(metal::dynamic_extent), bool transpose_left_ = false,
                                bool transpose_right_ = false, bool relaxed_precision_ = false,
                                mode mode_ = mode::multiply)
      : m(m_), n(n_), k(k_), transpose_left(transpose_left_), transpose_right(transpose_right_),
        relaxed_precision(relaxed_precision_), matmul_mode(mode_) {}
};

namespace detail {
template <class T> struct is_coop : std::false_type {};
template <class E, class X, class L> struct is_coop<metal::cooperative_tensor<E, X, L>> : std::true_type {};
}  // namespace detail

template <matmul2d_descriptor D, class Scope> struct matmul2d {
  static_assert(D.m > 0 && D.n > 0, "matmul2d_descriptor: m and n must be positive");
  using scope = metal::tensor_detail::scope_of<Scope>;
  using layout = metal::tensor_detail::coop_layout<D.m, D.n, scope>;
  template <class E> using destination = metal::cooperative_tensor<E, metal::dextents<int, 2>, layout>;
  // The type get_destination_cooperative_tensor<A, B, E> returns, for declarations.
  template <class A, class B, class E, class... Rest> using cooperative_tensor_destination_t = destination<E>;

  template <class A, class B, class E> destination<E> get_destination_cooperative_tensor(MSL_EMU_SITE) const {
    return destination<E>(file, line);
  }

  // run computes C = A·B (multiply) or C += A·B (multiply_accumulate) into a cooperative tensor
  // from get_destination_cooperative_tensor or into a tensor. Each thread computes the elements
  // its layout slots hold: when it arrives and again once the whole scope has, and the two must
  // agree, so inputs written or overwritten without a barrier around run show.
  template <class TA, class TB, class C> void run(const TA& a, const TB& b, C&& c, MSL_EMU_SITE) const {
    static_assert(TA::R == 2 && TB::R == 2, "matmul2d: the inputs must be rank-2 tensors");
    const metal::tensor_detail::coop_state s = layout::state(file, line);
    const int K = inner(a, b, file, line);
    const uint64_t h = metal::tensor_detail::mix(metal::tensor_detail::mix(a.fingerprint(), b.fingerprint()),
                                                 metal::tensor_detail::mix(destination_id(c, s), uint64_t(K)));
    float before[layout::max_capacity], after[layout::max_capacity];
    const bool alone = s.kind == metal::tensor_detail::kThread;
    if (!alone) compute(a, b, c, s, K, before);
    metal::tensor_detail::collective(s, h, file, line, "matmul2d::run");
    compute(a, b, c, s, K, after);
    if (!alone && __builtin_memcmp(before, after, s.cap * sizeof(float)) != 0)
      metal::tensor_detail::failf(file, line, "matmul2d::run: its inputs changed between this thread's arrival and the last one's (a threadgroup_barrier missing before run, or a thread of the scope writing them before all read?)");
    write(c, s, after);
  }

 private:
  // destination_id identifies the destination among the threads of the scope: the layout of a
  // cooperative tensor (which must be this op's), a tensor's view.
  template <class C> static uint64_t destination_id(const C& c, const metal::tensor_detail::coop_state& s) {
    if constexpr (detail::is_coop<C>::value) {
      static_assert(std::is_same_v<typename C::layout, layout>,
                    "matmul2d::run: the destination cooperative tensor has another op's layout (another m, n or scope)");
      return s.key;
    } else {
      static_assert(C::R == 2, "matmul2d: the destination must be a rank-2 tensor or a cooperative tensor");
      return c.fingerprint();
    }
  }

  // write stores this thread's results: a cooperative tensor's slots (poison where no element),
  // or a tensor's elements (dropped outside its bounds).
  template <class C> static void write(C& c, const metal::tensor_detail::coop_state& s, const float* out) {
    for (uint32_t i = 0; i < s.cap; i++) {
      const int e = s.element(int(i));
      if constexpr (detail::is_coop<C>::value) {
        using E = typename C::element_type;
        c.v[i] = e < 0 ? metal::simd_detail::poison<E>() : E(out[i]);
      } else if (e >= 0) {
        c.put(e % D.n, e / D.n, out[i]);
      }
    }
  }

  // inner is k: the descriptor's, or with dynamic_extent the inputs' common inner extent.
  template <class TA, class TB> static int inner(const TA& a, const TB& b, const char* file, int line) {
    if (D.k >= 0) return D.k;
    const int ka = int(D.transpose_left ? a.get_extent(1) : a.get_extent(0));
    const int kb = int(D.transpose_right ? b.get_extent(0) : b.get_extent(1));
    if (ka != kb)
      metal::tensor_detail::failf(file, line, "matmul2d::run with k = dynamic_extent: the left input's k extent is %d, the right's %d", ka, kb);
    return ka;
  }

  template <class T> static float input(const T& t, int x, int y) {
    const float v = t.get(x, y);
    using E = std::remove_cvref_t<decltype(t.p_[0])>;
    if constexpr (D.relaxed_precision && sizeof(E) == 4) return metal::tensor_detail::tf32(v);
    return v;
  }

  template <class TA, class TB, class C>
  static void compute(const TA& a, const TB& b, const C& c, const metal::tensor_detail::coop_state& s, int K, float* out) {
    for (uint32_t i = 0; i < s.cap; i++) {
      const int e = s.element(int(i));
      out[i] = 0.0f;
      if (e < 0) continue;
      const int r = e / D.n, col = e % D.n;
      float acc = 0.0f;
      if (D.matmul_mode == matmul2d_descriptor::mode::multiply_accumulate) {
        if constexpr (detail::is_coop<std::remove_cvref_t<C>>::value) acc = float(c.v[i]);
        else acc = c.get(col, r);
      }
      for (int kk = 0; kk < K; kk++) {
        const float x = D.transpose_left ? input(a, r, kk) : input(a, kk, r);
        const float y = D.transpose_right ? input(b, kk, col) : input(b, col, kk);
        acc = __builtin_fmaf(x, y, acc);
      }
      out[i] = acc;
    }
  }
};

}  // namespace tensor_ops
}  // namespace mpp

#undef MSL_EMU_SITE

#endif  // MSL_EMU_TENSOR_H
