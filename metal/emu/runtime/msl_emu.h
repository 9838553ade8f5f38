// msl_emu.h: the Metal Shading Language surface our kernels use, mapped onto clang C++
// (-std=c++2b: descriptors as template arguments and t[x, y] for tensor ops; clang >= 17 for
// _Float16/__bf16 arithmetic on x86-64). The generator includes it before a translated .metal
// file; the include/metal_* shims make `#include <metal_stdlib>` a no-op. A file that includes
// <metal_tensor> or Metal Performance Primitives gets MSL_EMU_METAL4 defined by the generator:
// it then sees __METAL_VERSION__ 400 and __HAVE_TENSOR__, and msl_emu_tensor.h (tensor ops).
//
// Address spaces are real clang address spaces (device 1, constant 2, threadgroup 3), so mixing
// them is a compile error as in Metal. Sanitizer builds define MSL_EMU_FLAT_ADDRESS_SPACES,
// because ASan ignores accesses through non-zero address spaces.
#ifndef MSL_EMU_H
#define MSL_EMU_H

// Standard headers first: the keyword macros below would break them.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "msl_emu_abi.h"

#pragma clang diagnostic ignored "-Wunknown-attributes"
#pragma clang diagnostic ignored "-Wignored-attributes"
#pragma clang diagnostic ignored "-Wuser-defined-literals"
#pragma clang diagnostic ignored "-Wduplicate-decl-specifier"
#pragma clang diagnostic ignored "-Wunused-function"
#pragma clang diagnostic ignored "-Wunused-variable"
#pragma clang diagnostic ignored "-Wunused-parameter"
#pragma clang diagnostic ignored "-Wunused-but-set-variable"

#ifdef MSL_EMU_METAL4
#define __METAL_VERSION__ 400
#define __HAVE_TENSOR__ 1
#else
#define __METAL_VERSION__ 310
#endif
#define MSL_EMU 1

// ---- keywords -------------------------------------------------------------------------------
#ifdef MSL_EMU_FLAT_ADDRESS_SPACES
#define device
#define constant const
#define threadgroup
#else
#define device __attribute__((address_space(1)))
#define constant const __attribute__((address_space(2)))
#define threadgroup __attribute__((address_space(3)))
#endif
#define thread
#define kernel
#define threadgroup_imageblock threadgroup
#define ray_data

// ---- scalar and vector types ----------------------------------------------------------------
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;  // 64-bit, as in MSL
typedef _Float16 half;
typedef __bf16 bfloat;

#define MSL_EMU_VECS(T)                                   \
  typedef T T##2 __attribute__((ext_vector_type(2)));     \
  typedef T T##3 __attribute__((ext_vector_type(3)));     \
  typedef T T##4 __attribute__((ext_vector_type(4)));
MSL_EMU_VECS(float)
MSL_EMU_VECS(half)
MSL_EMU_VECS(bfloat)
MSL_EMU_VECS(int)
MSL_EMU_VECS(uint)
MSL_EMU_VECS(short)
MSL_EMU_VECS(ushort)
MSL_EMU_VECS(char)
MSL_EMU_VECS(uchar)
MSL_EMU_VECS(long)
MSL_EMU_VECS(ulong)
MSL_EMU_VECS(bool)
#undef MSL_EMU_VECS

// packed_* vectors: the same elements with scalar alignment (3-element ones are not provided).
#define MSL_EMU_PACKED(T)                                                         \
  typedef T packed_##T##2 __attribute__((ext_vector_type(2), aligned(sizeof(T)))); \
  typedef T packed_##T##4 __attribute__((ext_vector_type(4), aligned(sizeof(T))));
MSL_EMU_PACKED(float)
MSL_EMU_PACKED(half)
MSL_EMU_PACKED(bfloat)
MSL_EMU_PACKED(int)
MSL_EMU_PACKED(uint)
MSL_EMU_PACKED(short)
MSL_EMU_PACKED(ushort)
MSL_EMU_PACKED(char)
MSL_EMU_PACKED(uchar)
#undef MSL_EMU_PACKED

constexpr half operator""h(long double v) { return (half)v; }
constexpr half operator""h(unsigned long long v) { return (half)v; }

#ifndef INFINITY
#define INFINITY (__builtin_inff())
#endif
#ifndef NAN
#define NAN (__builtin_nanf(""))
#endif
#ifndef HUGE_VALF
#define HUGE_VALF (__builtin_huge_valf())
#endif
#define MAXFLOAT 0x1.fffffep+127f
#ifndef FLT_MAX
#define FLT_MAX 0x1.fffffep+127f
#endif
#ifndef FLT_MIN
#define FLT_MIN 0x1p-126f
#endif
#ifndef FLT_EPSILON
#define FLT_EPSILON 0x1p-23f
#endif
#define HALF_MAX ((half)65504.0f)
#define HALF_MIN ((half)0x1p-14f)
#define HALF_EPSILON ((half)0x1p-10f)
#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LOG10E_F 0.434294481903251827651f
#define M_LN2_F 0.693147180559945309417f
#define M_LN10_F 2.30258509299404568402f
#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_PI_4_F 0.785398163397448309616f
#define M_1_PI_F 0.318309886183790671538f
#define M_2_PI_F 0.636619772367581343076f
#define M_2_SQRTPI_F 1.12837916709551257390f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.707106781186547524401f

// ---- helpers (namespace msl_emu) ------------------------------------------------------------
namespace msl_emu {
namespace rt = ::msl_emu_rt;

template <class T> struct vtraits {
  static constexpr int n = 0;
  using elem = T;
};
template <class E, int N> struct vtraits<E __attribute__((ext_vector_type(N)))> {
  static constexpr int n = N;
  using elem = E;
};
template <class T> constexpr bool is_vec = vtraits<T>::n > 0;
template <class T> using elem_t = typename vtraits<T>::elem;
template <class T> constexpr int lanes_of = vtraits<T>::n == 0 ? 1 : vtraits<T>::n;

template <class E> constexpr bool is_floatish =
    std::is_same_v<E, float> || std::is_same_v<E, half> || std::is_same_v<E, bfloat>;
template <class T> constexpr bool is_float_type = is_floatish<elem_t<T>>;
template <class T> constexpr bool is_int_type = std::is_integral_v<elem_t<T>>;

template <class T, class F> inline T map1(T x, F f) {
  if constexpr (is_vec<T>) {
    T r;
    for (int i = 0; i < vtraits<T>::n; i++) r[i] = f(elem_t<T>(x[i]));
    return r;
  } else {
    return f(x);
  }
}
template <class T, class F> inline T map2(T x, T y, F f) {
  if constexpr (is_vec<T>) {
    T r;
    for (int i = 0; i < vtraits<T>::n; i++) r[i] = f(elem_t<T>(x[i]), elem_t<T>(y[i]));
    return r;
  } else {
    return f(x, y);
  }
}
template <class T, class F> inline T map3(T x, T y, T z, F f) {
  if constexpr (is_vec<T>) {
    T r;
    for (int i = 0; i < vtraits<T>::n; i++)
      r[i] = f(elem_t<T>(x[i]), elem_t<T>(y[i]), elem_t<T>(z[i]));
    return r;
  } else {
    return f(x, y, z);
  }
}

// The type Metal gives a call with arguments of types A and B: a vector wins (the scalar is
// broadcast), a double literal takes the other side's type (MSL has no double), an integer
// meets a float as the float.
template <class A, class B> struct result_of2 {
  using type = std::conditional_t<
      is_vec<A>, A,
      std::conditional_t<
          is_vec<B>, B,
          std::conditional_t<
              std::is_same_v<A, B>, A,
              std::conditional_t<
                  std::is_same_v<B, double> || std::is_same_v<B, long double>, A,
                  std::conditional_t<
                      std::is_same_v<A, double> || std::is_same_v<A, long double>, B,
                      std::conditional_t<is_floatish<A> && std::is_integral_v<B>, A,
                                         std::conditional_t<is_floatish<B> &&
                                                                std::is_integral_v<A>,
                                                            B, std::common_type_t<A, B>>>>>>>>;
};
template <class A, class B> using result2_t = typename result_of2<A, B>::type;
template <class A, class B, class C> using result3_t = result2_t<result2_t<A, B>, C>;

// to<R>(x): converts a scalar or a same-length vector to R, broadcasting a scalar.
template <class R, class X> inline R to(X x) {
  if constexpr (is_vec<R> && !is_vec<X>) {
    R r;
    for (int i = 0; i < vtraits<R>::n; i++) r[i] = (elem_t<R>)x;
    return r;
  } else if constexpr (is_vec<R> && is_vec<X>) {
    static_assert(vtraits<R>::n == vtraits<X>::n, "vector lengths differ");
    if constexpr (std::is_same_v<R, X>) return x;
    else return __builtin_convertvector(x, R);
  } else {
    return (R)x;
  }
}

// make_vec implements MSL vector constructors: floatN(), floatN(scalar) (splat), floatN(vecN)
// (element-wise conversion, never a bit cast) and concatenation floatN(a, b.xy, c).
template <class V, int I = 0> inline void vec_fill(V&) {}
template <class V, int I = 0, class A, class... Rest> inline void vec_fill(V& r, A a, Rest... rest) {
  using E = elem_t<V>;
  if constexpr (is_vec<A>) {
    for (int j = 0; j < vtraits<A>::n; j++) r[I + j] = (E)a[j];
    vec_fill<V, I + vtraits<A>::n>(r, rest...);
  } else {
    r[I] = (E)a;
    vec_fill<V, I + 1>(r, rest...);
  }
}
template <class V, class... A> inline V make_vec(A... a) {
  using E = elem_t<V>;
  constexpr int N = vtraits<V>::n;
  if constexpr (sizeof...(A) == 0) {
    return to<V>(E(0));
  } else if constexpr (sizeof...(A) == 1) {
    return to<V>(a...);
  } else {
    static_assert((lanes_of<A> + ...) == N, "vector constructor: wrong number of components");
    V r;
    vec_fill<V>(r, a...);
    return r;
  }
}

}  // namespace msl_emu

// ---- the metal namespace --------------------------------------------------------------------
namespace metal {
namespace emu = ::msl_emu;

template <class T> using enable_float = std::enable_if_t<emu::is_float_type<T>, int>;

#define MSL_EMU_UNARY_F(name, expr)                                              \
  template <class T, enable_float<T> = 0> inline T name(T x) {                 \
    return emu::map1(x, [](auto e) {                                          \
      using E = decltype(e);                                                  \
      float v = (float)e;                                                     \
      (void)v;                                                                \
      return (E)(expr);                                                       \
    });                                                                       \
  }                                                                           \
  inline float name(double x) { return name((float)x); }

MSL_EMU_UNARY_F(sqrt, __builtin_sqrtf(v))
MSL_EMU_UNARY_F(rsqrt, 1.0f / __builtin_sqrtf(v))
MSL_EMU_UNARY_F(exp, __builtin_expf(v))
MSL_EMU_UNARY_F(exp2, __builtin_exp2f(v))
MSL_EMU_UNARY_F(exp10, __builtin_powf(10.0f, v))
MSL_EMU_UNARY_F(log, __builtin_logf(v))
MSL_EMU_UNARY_F(log2, __builtin_log2f(v))
MSL_EMU_UNARY_F(log10, __builtin_log10f(v))
MSL_EMU_UNARY_F(sin, __builtin_sinf(v))
MSL_EMU_UNARY_F(cos, __builtin_cosf(v))
MSL_EMU_UNARY_F(tan, __builtin_tanf(v))
MSL_EMU_UNARY_F(asin, __builtin_asinf(v))
MSL_EMU_UNARY_F(acos, __builtin_acosf(v))
MSL_EMU_UNARY_F(atan, __builtin_atanf(v))
MSL_EMU_UNARY_F(sinh, __builtin_sinhf(v))
MSL_EMU_UNARY_F(cosh, __builtin_coshf(v))
MSL_EMU_UNARY_F(tanh, __builtin_tanhf(v))
MSL_EMU_UNARY_F(asinh, __builtin_asinhf(v))
MSL_EMU_UNARY_F(acosh, __builtin_acoshf(v))
MSL_EMU_UNARY_F(atanh, __builtin_atanhf(v))
MSL_EMU_UNARY_F(floor, __builtin_floorf(v))
MSL_EMU_UNARY_F(ceil, __builtin_ceilf(v))
MSL_EMU_UNARY_F(round, __builtin_roundf(v))
MSL_EMU_UNARY_F(rint, __builtin_rintf(v))
MSL_EMU_UNARY_F(trunc, __builtin_truncf(v))
MSL_EMU_UNARY_F(fabs, __builtin_fabsf(v))
MSL_EMU_UNARY_F(fract, __builtin_fminf(v - __builtin_floorf(v), 0x1.fffffep-1f))
MSL_EMU_UNARY_F(saturate, __builtin_fminf(__builtin_fmaxf(v, 0.0f), 1.0f))
MSL_EMU_UNARY_F(sign, v > 0 ? 1.0f : (v < 0 ? -1.0f : (v != v ? 0.0f : v)))
#undef MSL_EMU_UNARY_F

#define MSL_EMU_BINARY_F(name, expr)                                             \
  template <class A, class B, class R = emu::result2_t<A, B>, enable_float<R> = 0> \
  inline R name(A a, B b) {                                                   \
    return emu::map2(emu::to<R>(a), emu::to<R>(b), [](auto x, auto y) {       \
      using E = decltype(x);                                                  \
      float u = (float)x, v = (float)y;                                       \
      return (E)(expr);                                                       \
    });                                                                       \
  }
MSL_EMU_BINARY_F(pow, __builtin_powf(u, v))
MSL_EMU_BINARY_F(powr, __builtin_powf(u, v))
MSL_EMU_BINARY_F(atan2, __builtin_atan2f(u, v))
MSL_EMU_BINARY_F(fmod, __builtin_fmodf(u, v))
MSL_EMU_BINARY_F(copysign, __builtin_copysignf(u, v))
MSL_EMU_BINARY_F(fmin, __builtin_fminf(u, v))
MSL_EMU_BINARY_F(fmax, __builtin_fmaxf(u, v))
MSL_EMU_BINARY_F(fdim, u > v ? u - v : 0.0f)
MSL_EMU_BINARY_F(step, v < u ? 0.0f : 1.0f)
MSL_EMU_BINARY_F(divide, u / v)
#undef MSL_EMU_BINARY_F

// abs/min/max/clamp work on integers and floats.
template <class T> inline T abs(T x) {
  return emu::map1(x, [](auto e) {
    using E = decltype(e);
    if constexpr (emu::is_floatish<E>) return (E)__builtin_fabsf((float)e);
    else return (E)(e < 0 ? -e : e);
  });
}
template <class A, class B, class R = emu::result2_t<A, B>> inline R min(A a, B b) {
  return emu::map2(emu::to<R>(a), emu::to<R>(b), [](auto x, auto y) {
    using E = decltype(x);
    if constexpr (emu::is_floatish<E>) return (E)__builtin_fminf((float)x, (float)y);
    else return y < x ? y : x;
  });
}
template <class A, class B, class R = emu::result2_t<A, B>> inline R max(A a, B b) {
  return emu::map2(emu::to<R>(a), emu::to<R>(b), [](auto x, auto y) {
    using E = decltype(x);
    if constexpr (emu::is_floatish<E>) return (E)__builtin_fmaxf((float)x, (float)y);
    else return x < y ? y : x;
  });
}
template <class A, class B, class C, class R = emu::result3_t<A, B, C>>
inline R clamp(A x, B lo, C hi) {
  return min(max(emu::to<R>(x), emu::to<R>(lo)), emu::to<R>(hi));
}
template <class A, class B, class C, class R = emu::result3_t<A, B, C>, enable_float<R> = 0>
inline R mix(A x, B y, C a) {
  R xr = emu::to<R>(x);
  return xr + (emu::to<R>(y) - xr) * emu::to<R>(a);
}
template <class A, class B, class C, class R = emu::result3_t<A, B, C>, enable_float<R> = 0>
inline R fma(A a, B b, C c) {
  return emu::map3(emu::to<R>(a), emu::to<R>(b), emu::to<R>(c), [](auto x, auto y, auto z) {
    using E = decltype(x);
    return (E)__builtin_fmaf((float)x, (float)y, (float)z);
  });
}
template <class A, class B, class C> inline auto mad(A a, B b, C c) { return fma(a, b, c); }
template <class A, class B, class C, class R = emu::result3_t<A, B, C>, enable_float<R> = 0>
inline R smoothstep(A e0, B e1, C x) {
  R t = clamp((emu::to<R>(x) - emu::to<R>(e0)) / (emu::to<R>(e1) - emu::to<R>(e0)), 0.0f, 1.0f);
  return t * t * (emu::to<R>(3.0f) - emu::to<R>(2.0f) * t);
}
template <class T, enable_float<T> = 0> inline T ldexp(T x, int e) {
  return emu::map1(x, [e](auto v) { return (decltype(v))__builtin_ldexpf((float)v, e); });
}
template <class T, enable_float<T> = 0> inline T sincos(T x, thread T& c) {
  c = cos(x);
  return sin(x);
}

// ---- relational -----------------------------------------------------------------------------
template <class T> inline bool all(T x) {
  if constexpr (emu::is_vec<T>) {
    for (int i = 0; i < emu::vtraits<T>::n; i++)
      if (!x[i]) return false;
    return true;
  } else {
    return bool(x);
  }
}
template <class T> inline bool any(T x) {
  if constexpr (emu::is_vec<T>) {
    for (int i = 0; i < emu::vtraits<T>::n; i++)
      if (x[i]) return true;
    return false;
  } else {
    return bool(x);
  }
}
template <class T, class C> inline T select(T a, T b, C c) {
  if constexpr (emu::is_vec<T> && emu::is_vec<C>) {
    T r;
    for (int i = 0; i < emu::vtraits<T>::n; i++) r[i] = c[i] ? b[i] : a[i];
    return r;
  } else {
    return c ? b : a;
  }
}
#define MSL_EMU_PRED(name, expr)                                    \
  template <class T, enable_float<T> = 0> inline auto name(T x) {  \
    if constexpr (emu::is_vec<T>) {                                \
      typedef bool B __attribute__((ext_vector_type(emu::vtraits<T>::n))); \
      B out;                                                       \
      for (int i = 0; i < emu::vtraits<T>::n; i++) {               \
        float v = (float)x[i];                                     \
        out[i] = (expr);                                           \
      }                                                            \
      return out;                                                  \
    } else {                                                       \
      float v = (float)x;                                          \
      return bool(expr);                                           \
    }                                                              \
  }
MSL_EMU_PRED(isnan, v != v)
MSL_EMU_PRED(isinf, __builtin_isinf(v))
MSL_EMU_PRED(isfinite, __builtin_isfinite(v))
MSL_EMU_PRED(signbit, __builtin_signbit(v))
MSL_EMU_PRED(isnormal, __builtin_isnormal(v))
#undef MSL_EMU_PRED

// ---- geometric ------------------------------------------------------------------------------
template <class T, enable_float<T> = 0> inline emu::elem_t<T> dot(T a, T b) {
  using E = emu::elem_t<T>;
  if constexpr (emu::is_vec<T>) {
    E s = a[0] * b[0];
    for (int i = 1; i < emu::vtraits<T>::n; i++) s += a[i] * b[i];
    return s;
  } else {
    return a * b;
  }
}
template <class T, enable_float<T> = 0> inline emu::elem_t<T> length_squared(T a) { return dot(a, a); }
template <class T, enable_float<T> = 0> inline emu::elem_t<T> length(T a) { return sqrt(dot(a, a)); }
template <class T, enable_float<T> = 0> inline emu::elem_t<T> distance(T a, T b) { return length(a - b); }
template <class T, enable_float<T> = 0> inline T normalize(T a) { return a * rsqrt(dot(a, a)); }
template <class T, enable_float<T> = 0> inline T cross(T a, T b) {
  static_assert(emu::vtraits<T>::n == 3, "cross takes 3-vectors");
  T r;
  r[0] = a[1] * b[2] - a[2] * b[1];
  r[1] = a[2] * b[0] - a[0] * b[2];
  r[2] = a[0] * b[1] - a[1] * b[0];
  return r;
}

// ---- integer --------------------------------------------------------------------------------
template <class E> inline unsigned long long emu_u64(E x) {
  return (unsigned long long)(std::make_unsigned_t<E>)x;
}
template <class T, class = std::enable_if_t<emu::is_int_type<T>>> inline T popcount(T x) {
  return emu::map1(x, [](auto e) { return (decltype(e))__builtin_popcountll(emu_u64(e)); });
}
template <class T, class = std::enable_if_t<emu::is_int_type<T>>> inline T clz(T x) {
  return emu::map1(x, [](auto e) {
    using E = decltype(e);
    constexpr int bits = sizeof(E) * 8;
    unsigned long long u = emu_u64(e);
    return (E)(u == 0 ? bits : __builtin_clzll(u) - (64 - bits));
  });
}
template <class T, class = std::enable_if_t<emu::is_int_type<T>>> inline T ctz(T x) {
  return emu::map1(x, [](auto e) {
    using E = decltype(e);
    unsigned long long u = emu_u64(e);
    return (E)(u == 0 ? sizeof(E) * 8 : __builtin_ctzll(u));
  });
}
template <class T, class = std::enable_if_t<emu::is_int_type<T>>>
inline T extract_bits(T x, uint offset, uint bits) {
  return emu::map1(x, [=](auto e) {
    using E = decltype(e);
    if (bits == 0) return E(0);
    unsigned long long u = emu_u64(e) >> offset;
    unsigned long long m = bits >= 64 ? ~0ull : ((1ull << bits) - 1);
    u &= m;
    if constexpr (std::is_signed_v<E>) {
      if (bits < 64 && (u >> (bits - 1)) & 1) u |= ~m;  // sign-extend
    }
    return (E)u;
  });
}
template <class T, class = std::enable_if_t<emu::is_int_type<T>>>
inline T insert_bits(T base, T ins, uint offset, uint bits) {
  return emu::map2(base, ins, [=](auto b, auto i) {
    using E = decltype(b);
    unsigned long long m = (bits >= 64 ? ~0ull : ((1ull << bits) - 1)) << offset;
    return (E)((emu_u64(b) & ~m) | ((emu_u64(i) << offset) & m));
  });
}
template <class T, class = std::enable_if_t<emu::is_int_type<T>>> inline T mulhi(T a, T b) {
  return emu::map2(a, b, [](auto x, auto y) {
    using E = decltype(x);
    constexpr int bits = sizeof(E) * 8;
    if constexpr (bits == 64) return (E)(((__int128)x * (__int128)y) >> 64);
    else return (E)(((long long)x * (long long)y) >> bits);
  });
}
template <class T, class = std::enable_if_t<emu::is_int_type<T>>> inline T reverse_bits(T x) {
  return emu::map1(x, [](auto e) {
    using E = decltype(e);
    constexpr int bits = sizeof(E) * 8;
    unsigned long long u = emu_u64(e), r = 0;
    for (int i = 0; i < bits; i++) r |= ((u >> i) & 1ull) << (bits - 1 - i);
    return (E)r;
  });
}
template <class T, class = std::enable_if_t<emu::is_int_type<T>>> inline T rotate(T v, T n) {
  return emu::map2(v, n, [](auto x, auto s) {
    using E = decltype(x);
    constexpr int bits = sizeof(E) * 8;
    unsigned long long u = emu_u64(x), m = bits == 64 ? ~0ull : ((1ull << bits) - 1);
    int k = int(emu_u64(s) % bits);
    return (E)(k == 0 ? u : (((u << k) | (u >> (bits - k))) & m));
  });
}

// ---- numeric_limits, as_type, array ---------------------------------------------------------
template <class T> struct numeric_limits : std::numeric_limits<T> {};
template <> struct numeric_limits<half> {
  static constexpr bool is_specialized = true;
  static constexpr half min() { return (half)0x1p-14f; }
  static constexpr half max() { return (half)65504.0f; }
  static constexpr half lowest() { return (half)-65504.0f; }
  static constexpr half epsilon() { return (half)0x1p-10f; }
  static constexpr half infinity() { return (half)__builtin_inff(); }
  static constexpr half quiet_NaN() { return (half)__builtin_nanf(""); }
  static constexpr half denorm_min() { return (half)0x1p-24f; }
};
template <> struct numeric_limits<bfloat> {
  static constexpr bool is_specialized = true;
  static constexpr bfloat min() { return __builtin_bit_cast(bfloat, (unsigned short)0x0080); }
  static constexpr bfloat max() { return __builtin_bit_cast(bfloat, (unsigned short)0x7f7f); }
  static constexpr bfloat lowest() { return __builtin_bit_cast(bfloat, (unsigned short)0xff7f); }
  static constexpr bfloat epsilon() { return __builtin_bit_cast(bfloat, (unsigned short)0x3c00); }
  static constexpr bfloat infinity() { return __builtin_bit_cast(bfloat, (unsigned short)0x7f80); }
  static constexpr bfloat quiet_NaN() { return __builtin_bit_cast(bfloat, (unsigned short)0x7fc0); }
};

template <class T, class U> inline T as_type(U u) {
  static_assert(sizeof(T) == sizeof(U), "as_type: sizes differ");
  return __builtin_bit_cast(T, u);
}

template <class T, size_t N> struct array {
  T elems[N];
  constexpr size_t size() const { return N; }
  T& operator[](size_t i) { return elems[i]; }
  const T& operator[](size_t i) const { return elems[i]; }
};

template <class T, class U> using is_same = std::is_same<T, U>;
template <class T, class U> constexpr bool is_same_v = std::is_same_v<T, U>;
template <bool B, class T = void> using enable_if_t = std::enable_if_t<B, T>;
template <class T> using remove_cv_t = std::remove_cv_t<T>;

// ---- barriers -------------------------------------------------------------------------------
enum class mem_flags : unsigned {
  mem_none = 0,
  mem_device = 1,
  mem_threadgroup = 2,
  mem_texture = 4,
  mem_threadgroup_imageblock = 8,
  mem_object_data = 16,
};
constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) | unsigned(b)); }

inline void threadgroup_barrier(mem_flags, const char* file = __builtin_FILE(),
                                int line = __builtin_LINE()) {
  emu::rt::threadgroup_barrier(file, line);
}
inline void simdgroup_barrier(mem_flags, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  char c = 0, all[32];
  emu::rt::simd_exchange(&c, 1, all, file, line, "simdgroup_barrier");
}

// ---- SIMD-group functions -------------------------------------------------------------------
// Every one goes through simd_exchange: lanes publish a value and read all active lanes' values.
// Reductions use one fixed pairwise tree over the active lanes, so every lane gets the same bits.
namespace simd_detail {
template <class T> struct Gathered {
  T v[32];
  uint32_t mask;
};
template <class T> inline Gathered<T> gather(T x, const char* file, int line, const char* what) {
  static_assert(sizeof(T) <= emu::rt::kMaxSimdValue, "SIMD value too large");
  Gathered<T> g;
  g.mask = emu::rt::simd_exchange(&x, sizeof(T), g.v, file, line, what);
  return g;
}
// tree combines the present lanes' values with op over one fixed pairwise tree, so every lane
// gets the same bits.
template <class T, class Op> inline T tree(T* buf, uint32_t present, Op op) {
  for (int s = 1; s < 32; s <<= 1) {
    for (int i = 0; i < 32; i += 2 * s) {
      bool a = (present >> i) & 1, b = (present >> (i + s)) & 1;
      if (a && b) buf[i] = op(buf[i], buf[i + s]);
      else if (b) buf[i] = buf[i + s];
      if (b) present |= 1u << i;
    }
  }
  return buf[0];
}
template <class T, class Op> inline T reduce(const Gathered<T>& g, Op op) {
  T buf[32];
  for (int i = 0; i < 32; i++) buf[i] = g.v[i];
  return tree(buf, g.mask, op);
}
// reduce_shared reduces the active lanes' x; the first lane to get there shares the result with
// the others, which would compute the same bits.
template <class T, class Op>
inline T reduce_shared(T x, Op op, const char* file, int line, const char* what) {
  static_assert(sizeof(T) <= emu::rt::kMaxSimdValue, "SIMD value too large");
  const unsigned char* data;
  unsigned char* memo;
  bool* memo_set;
  uint32_t present = emu::rt::simd_share(&x, sizeof(T), &data, &memo, &memo_set, file, line, what);
  T r;
  if (!*memo_set) {
    T buf[32];
    __builtin_memcpy(buf, data, sizeof buf);
    r = tree(buf, present, op);
    __builtin_memcpy(memo, &r, sizeof(T));
    *memo_set = true;
    return r;
  }
  __builtin_memcpy(&r, memo, sizeof(T));
  return r;
}
inline uint32_t lane() { return emu::rt::current_thread()->tiisg; }
template <class T> inline T poison() {
  unsigned char b[sizeof(T)];
  for (auto& c : b) c = 0xFF;
  return __builtin_bit_cast(T, b);
}
template <class T> inline T from(const Gathered<T>& g, uint32_t src) {
  if (src >= 32 || !((g.mask >> src) & 1)) return poison<T>();  // undefined on the GPU
  return g.v[src];
}
}  // namespace simd_detail

#define MSL_EMU_SITE const char *file = __builtin_FILE(), int line = __builtin_LINE()
#define MSL_EMU_REDUCE(name, op)                                                  \
  template <class T> inline T name(T x, MSL_EMU_SITE) {                          \
    return simd_detail::reduce_shared(x, [](T a, T b) { return op; }, file, line, #name); \
  }
MSL_EMU_REDUCE(simd_sum, a + b)
MSL_EMU_REDUCE(simd_product, a * b)
MSL_EMU_REDUCE(simd_max, max(a, b))
MSL_EMU_REDUCE(simd_min, min(a, b))
MSL_EMU_REDUCE(simd_and, a & b)
MSL_EMU_REDUCE(simd_or, a | b)
MSL_EMU_REDUCE(simd_xor, a ^ b)
#undef MSL_EMU_REDUCE

#define MSL_EMU_PREFIX(name, op, inclusive, ident)                                \
  template <class T> inline T name(T x, MSL_EMU_SITE) {                          \
    auto g = simd_detail::gather(x, file, line, #name);                          \
    uint32_t me = simd_detail::lane();                                           \
    T acc = emu::to<T>(ident);                                                   \
    for (uint32_t i = 0; i < me + (inclusive ? 1u : 0u); i++)                    \
      if ((g.mask >> i) & 1) acc = acc op g.v[i];                                \
    return acc;                                                                  \
  }
MSL_EMU_PREFIX(simd_prefix_inclusive_sum, +, true, 0)
MSL_EMU_PREFIX(simd_prefix_exclusive_sum, +, false, 0)
MSL_EMU_PREFIX(simd_prefix_inclusive_product, *, true, 1)
MSL_EMU_PREFIX(simd_prefix_exclusive_product, *, false, 1)
#undef MSL_EMU_PREFIX

template <class T> inline T simd_shuffle(T x, ushort src, MSL_EMU_SITE) {
  auto g = simd_detail::gather(x, file, line, "simd_shuffle");
  return simd_detail::from(g, src);
}
template <class T> inline T simd_broadcast(T x, ushort src, MSL_EMU_SITE) {
  auto g = simd_detail::gather(x, file, line, "simd_broadcast");
  return simd_detail::from(g, src);
}
template <class T> inline T simd_shuffle_xor(T x, ushort mask, MSL_EMU_SITE) {
  auto g = simd_detail::gather(x, file, line, "simd_shuffle_xor");
  return simd_detail::from(g, (simd_detail::lane() ^ mask) & 31);
}
// simd_shuffle_up/down leave the lanes with no source unchanged, as Metal documents.
template <class T> inline T simd_shuffle_up(T x, ushort delta, MSL_EMU_SITE) {
  auto g = simd_detail::gather(x, file, line, "simd_shuffle_up");
  uint32_t me = simd_detail::lane();
  return me < delta ? x : simd_detail::from(g, me - delta);
}
template <class T> inline T simd_shuffle_down(T x, ushort delta, MSL_EMU_SITE) {
  auto g = simd_detail::gather(x, file, line, "simd_shuffle_down");
  uint32_t me = simd_detail::lane();
  return me + delta >= 32 ? x : simd_detail::from(g, me + delta);
}
template <class T> inline T simd_shuffle_rotate_up(T x, ushort delta, MSL_EMU_SITE) {
  auto g = simd_detail::gather(x, file, line, "simd_shuffle_rotate_up");
  return simd_detail::from(g, (simd_detail::lane() + 32 - delta % 32) & 31);
}
template <class T> inline T simd_shuffle_rotate_down(T x, ushort delta, MSL_EMU_SITE) {
  auto g = simd_detail::gather(x, file, line, "simd_shuffle_rotate_down");
  return simd_detail::from(g, (simd_detail::lane() + delta) & 31);
}
template <class T> inline T simd_broadcast_first(T x, MSL_EMU_SITE) {
  auto g = simd_detail::gather(x, file, line, "simd_broadcast_first");
  return simd_detail::from(g, __builtin_ctz(g.mask));
}

struct simd_vote {
  using vote_t = unsigned long;
  vote_t v;
  explicit constexpr operator vote_t() const { return v; }
  bool all() const { return v == 0xFFFFFFFFul; }
  bool any() const { return v != 0; }
};
inline simd_vote simd_ballot(bool b, MSL_EMU_SITE) {
  auto g = simd_detail::gather(b, file, line, "simd_ballot");
  unsigned long v = 0;
  for (int i = 0; i < 32; i++)
    if (((g.mask >> i) & 1) && g.v[i]) v |= 1ul << i;
  return simd_vote{v};
}
inline simd_vote simd_active_threads_mask(MSL_EMU_SITE) {
  auto g = simd_detail::gather(true, file, line, "simd_active_threads_mask");
  return simd_vote{g.mask};
}
inline bool simd_all(bool b, MSL_EMU_SITE) {
  auto g = simd_detail::gather(b, file, line, "simd_all");
  for (int i = 0; i < 32; i++)
    if (((g.mask >> i) & 1) && !g.v[i]) return false;
  return true;
}
inline bool simd_any(bool b, MSL_EMU_SITE) {
  auto g = simd_detail::gather(b, file, line, "simd_any");
  for (int i = 0; i < 32; i++)
    if (((g.mask >> i) & 1) && g.v[i]) return true;
  return false;
}
inline bool simd_is_first(MSL_EMU_SITE) {
  auto g = simd_detail::gather(true, file, line, "simd_is_first");
  return simd_detail::lane() == uint32_t(__builtin_ctz(g.mask));
}

// quad_* functions act on groups of 4 lanes (here they synchronise the whole simdgroup).
template <class T> inline T quad_sum(T x, MSL_EMU_SITE) {
  auto g = simd_detail::gather(x, file, line, "quad_sum");
  uint32_t base = simd_detail::lane() & ~3u;
  simd_detail::Gathered<T> q;
  q.mask = (g.mask >> base) & 0xF;
  for (int i = 0; i < 4; i++) q.v[i] = g.v[base + i];
  for (int i = 4; i < 32; i++) q.v[i] = g.v[base];
  return simd_detail::reduce(q, [](T a, T b) { return a + b; });
}
template <class T> inline T quad_shuffle(T x, ushort src, MSL_EMU_SITE) {
  auto g = simd_detail::gather(x, file, line, "quad_shuffle");
  return simd_detail::from(g, (simd_detail::lane() & ~3u) + (src & 3u));
}
template <class T> inline T quad_broadcast(T x, ushort src, MSL_EMU_SITE) {
  auto g = simd_detail::gather(x, file, line, "quad_broadcast");
  return simd_detail::from(g, (simd_detail::lane() & ~3u) + (src & 3u));
}
template <class T> inline T quad_shuffle_xor(T x, ushort mask, MSL_EMU_SITE) {
  auto g = simd_detail::gather(x, file, line, "quad_shuffle_xor");
  return simd_detail::from(g, simd_detail::lane() ^ (mask & 3u));
}
template <class T> inline T quad_shuffle_down(T x, ushort delta, MSL_EMU_SITE) {
  auto g = simd_detail::gather(x, file, line, "quad_shuffle_down");
  uint32_t me = simd_detail::lane();
  return (me & 3u) + delta >= 4 ? x : simd_detail::from(g, me + delta);
}
template <class T> inline T quad_shuffle_up(T x, ushort delta, MSL_EMU_SITE) {
  auto g = simd_detail::gather(x, file, line, "quad_shuffle_up");
  uint32_t me = simd_detail::lane();
  return (me & 3u) < delta ? x : simd_detail::from(g, me - delta);
}

// ---- atomics --------------------------------------------------------------------------------
enum memory_order { memory_order_relaxed, memory_order_acquire, memory_order_release, memory_order_acq_rel, memory_order_seq_cst };
enum class thread_scope { thread_scope_thread, thread_scope_simdgroup, thread_scope_threadgroup, thread_scope_device };

template <class T> struct _atomic {
  using value_type = T;
  T v;
};
template <class T> using atomic = _atomic<T>;
typedef _atomic<int> atomic_int;
typedef _atomic<uint> atomic_uint;
typedef _atomic<bool> atomic_bool;
typedef _atomic<float> atomic_float;
typedef _atomic<ulong> atomic_ulong;

// The object is reached through a generic pointer (a C-style cast may drop the address space);
// the __atomic builtins want both of their pointers in one address space.
#define MSL_EMU_AT(A) typename std::remove_cv_t<A>::value_type
#define MSL_EMU_AP(o) ((MSL_EMU_AT(A)*)&(o)->v)
template <class A, class V> inline void atomic_store_explicit(A* o, V v, memory_order) {
  MSL_EMU_AT(A) x = (MSL_EMU_AT(A))v;
  __atomic_store(MSL_EMU_AP(o), &x, __ATOMIC_RELAXED);
}
template <class A> inline MSL_EMU_AT(A) atomic_load_explicit(A* o, memory_order) {
  MSL_EMU_AT(A) x;
  __atomic_load(MSL_EMU_AP(o), &x, __ATOMIC_RELAXED);
  return x;
}
template <class A, class V> inline MSL_EMU_AT(A) atomic_exchange_explicit(A* o, V v, memory_order) {
  MSL_EMU_AT(A) x = (MSL_EMU_AT(A))v, old;
  __atomic_exchange(MSL_EMU_AP(o), &x, &old, __ATOMIC_RELAXED);
  return old;
}
template <class A, class E, class V>
inline bool atomic_compare_exchange_weak_explicit(A* o, E* expected, V desired, memory_order, memory_order) {
  MSL_EMU_AT(A) d = (MSL_EMU_AT(A))desired;
  MSL_EMU_AT(A) e = *expected;
  bool ok = __atomic_compare_exchange(MSL_EMU_AP(o), &e, &d, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  *expected = e;
  return ok;
}
#define MSL_EMU_RMW(name, expr)                                                    \
  template <class A, class V> inline MSL_EMU_AT(A) name(A* o, V v, memory_order) { \
    using T = MSL_EMU_AT(A);                                                       \
    T arg = (T)v, old, nw;                                                         \
    __atomic_load(MSL_EMU_AP(o), &old, __ATOMIC_RELAXED);                          \
    do {                                                                           \
      nw = (expr);                                                                 \
    } while (!__atomic_compare_exchange(MSL_EMU_AP(o), &old, &nw, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)); \
    return old;                                                                    \
  }
MSL_EMU_RMW(atomic_fetch_add_explicit, T(old + arg))
MSL_EMU_RMW(atomic_fetch_sub_explicit, T(old - arg))
MSL_EMU_RMW(atomic_fetch_and_explicit, T(old & arg))
MSL_EMU_RMW(atomic_fetch_or_explicit, T(old | arg))
MSL_EMU_RMW(atomic_fetch_xor_explicit, T(old ^ arg))
MSL_EMU_RMW(atomic_fetch_min_explicit, T(arg < old ? arg : old))
MSL_EMU_RMW(atomic_fetch_max_explicit, T(old < arg ? arg : old))
#undef MSL_EMU_RMW
#undef MSL_EMU_AP
#undef MSL_EMU_AT

namespace fast {
using namespace ::metal;
}
namespace precise {
using namespace ::metal;
}


// ---- simdgroup matrices -----------------------------------------------------------------------
// simdgroup_matrix<T, 8, 8> (simdgroup_float8x8, _half8x8, _bfloat8x8): each lane holds two
// elements, lane l's element i at row mat_row(l), column mat_col(l) + i, the layout Apple GPUs use
// (lanes 0..3 hold rows 0..1 columns 0..3, and so on; see metal/README.md). Loads, stores and
// multiplies are SIMD-group calls that all 32 lanes must make together (an error otherwise); a
// matrix no call has written holds poison, as uninitialised registers would.
namespace simd_detail {
inline int mat_row(uint32_t l) { return int(((l / 4) & 4) + ((l / 2) % 4)); }
inline int mat_col(uint32_t l) { return int(((l / 4) & 2) * 2 + (l % 2) * 2); }
inline void all_lanes(const char* file, int line, const char* what) {
  char c = 0, all[32];
  if (emu::rt::simd_exchange(&c, 1, all, file, line, what) != 0xFFFFFFFFu)
    emu::rt::fail(file, line, "a simdgroup matrix function needs all 32 lanes of the simdgroup");
}
}  // namespace simd_detail

template <class T, int Cols, int Rows> struct simdgroup_matrix {
  static_assert(Cols == 8 && Rows == 8, "simdgroup matrices are 8x8");
  typedef T elements __attribute__((ext_vector_type(2)));
  elements e;
  simdgroup_matrix() : e{simd_detail::poison<T>(), simd_detail::poison<T>()} {}
  // simdgroup_matrix(v) is v times the identity.
  explicit simdgroup_matrix(T v) {
    const uint32_t l = simd_detail::lane();
    const int r = simd_detail::mat_row(l), c = simd_detail::mat_col(l);
    e[0] = r == c ? v : T(0);
    e[1] = r == c + 1 ? v : T(0);
  }
  elements& thread_elements() { return e; }
  const elements& thread_elements() const { return e; }
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int Cols, int Rows> inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T v) {
  simdgroup_matrix<T, Cols, Rows> m;
  m.e[0] = v;
  m.e[1] = v;
  return m;
}

// Element (r, c) of the logical matrix at origin (x = column, y = row) of a row-major source with
// epr elements per row: src[(y + r)·epr + x + c], or src[(x + c)·epr + y + r] transposed.
namespace simd_detail {
inline ulong mat_index(int r, int c, ulong epr, ulong2 origin, bool transpose) {
  return transpose ? (origin.x + c) * epr + origin.y + r : (origin.y + r) * epr + origin.x + c;
}
}  // namespace simd_detail

template <class T, int C, int R, class P>
inline void simdgroup_load(thread simdgroup_matrix<T, C, R>& d, P src, ulong elements_per_row = C,
                           ulong2 matrix_origin = {}, bool transpose_matrix = false, MSL_EMU_SITE) {
  simd_detail::all_lanes(file, line, "simdgroup_load");
  const uint32_t l = simd_detail::lane();
  for (int i = 0; i < 2; i++)
    d.e[i] = T(src[simd_detail::mat_index(simd_detail::mat_row(l), simd_detail::mat_col(l) + i,
                                           elements_per_row, matrix_origin, transpose_matrix)]);
}

template <class T, int C, int R, class P>
inline void simdgroup_store(const thread simdgroup_matrix<T, C, R>& a, P dst, ulong elements_per_row = C,
                            ulong2 matrix_origin = {}, bool transpose_matrix = false, MSL_EMU_SITE) {
  simd_detail::all_lanes(file, line, "simdgroup_store");
  const uint32_t l = simd_detail::lane();
  for (int i = 0; i < 2; i++)
    dst[simd_detail::mat_index(simd_detail::mat_row(l), simd_detail::mat_col(l) + i, elements_per_row,
                               matrix_origin, transpose_matrix)] = a.e[i];
}

// d = a·b + c: every lane's elements of a, b and c are exchanged, the lane's two elements of d
// computed in float (k ascending, one rounding per multiply-add) and rounded to d's type. The
// hardware's order inside the 8-term dot product is not documented: kernels compare with a
// tolerance, as for any float sum.
template <class TD, class TA, class TB, class TC, int C, int R>
inline void simdgroup_multiply_accumulate(thread simdgroup_matrix<TD, C, R>& d, const thread simdgroup_matrix<TA, C, R>& a,
                                          const thread simdgroup_matrix<TB, C, R>& b,
                                          const thread simdgroup_matrix<TC, C, R>& c, MSL_EMU_SITE) {
  struct Lane {
    float a[2], b[2], c[2];
  } me = {{float(a.e[0]), float(a.e[1])}, {float(b.e[0]), float(b.e[1])}, {float(c.e[0]), float(c.e[1])}};
  auto g = simd_detail::gather(me, file, line, "simdgroup_multiply_accumulate");
  if (g.mask != 0xFFFFFFFFu) emu::rt::fail(file, line, "a simdgroup matrix function needs all 32 lanes of the simdgroup");
  float A[8][8], B[8][8], Cm[8][8];
  for (uint32_t l = 0; l < 32; l++) {
    const int r = simd_detail::mat_row(l), col = simd_detail::mat_col(l);
    for (int i = 0; i < 2; i++) {
      A[r][col + i] = g.v[l].a[i];
      B[r][col + i] = g.v[l].b[i];
      Cm[r][col + i] = g.v[l].c[i];
    }
  }
  const uint32_t l = simd_detail::lane();
  const int r = simd_detail::mat_row(l), col = simd_detail::mat_col(l);
  for (int i = 0; i < 2; i++) {
    float acc = Cm[r][col + i];
    for (int k = 0; k < 8; k++) acc = __builtin_fmaf(A[r][k], B[k][col + i], acc);
    d.e[i] = TD(acc);
  }
}

template <class TD, class TA, class TB, int C, int R>
inline void simdgroup_multiply(thread simdgroup_matrix<TD, C, R>& d, const thread simdgroup_matrix<TA, C, R>& a,
                               const thread simdgroup_matrix<TB, C, R>& b, MSL_EMU_SITE) {
  simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<float, C, R>(0.0f), file, line);
}

#undef MSL_EMU_SITE

}  // namespace metal

#ifdef MSL_EMU_METAL4
#include "msl_emu_tensor.h"
#endif

// ---- binding (used by generated wrappers) ---------------------------------------------------
namespace msl_emu {

template <int I> struct buffer_b {};
template <int I> struct tg_b {};
enum class attr {
  tpig, tpitg, tgpig, tptg, dtptg, tgpg, tpg,
  tiitg, tiisg, sgitg, sgptg, dsgptg, qgitg, tiiqg, qgptg, tew, tpsg
};
template <attr A> struct attr_b {};

template <class P> inline P from_dim3(rt::Dim3 d) {
  using T = std::remove_cv_t<P>;
  if constexpr (is_vec<T>) {
    T r;
    using E = elem_t<T>;
    r[0] = (E)d.x;
    if constexpr (vtraits<T>::n >= 2) r[1] = (E)d.y;
    if constexpr (vtraits<T>::n >= 3) r[2] = (E)d.z;
    return r;
  } else {
    return (T)d.x;
  }
}

template <class P, int I> inline P bind_one(const rt::LaunchArgs& a, buffer_b<I>) {
  if constexpr (std::is_pointer_v<P>) {
    return (P)a.buffers[I];
  } else {
    static_assert(std::is_reference_v<P>, "a [[buffer(n)]] parameter must be a pointer or a reference");
    using O = std::remove_reference_t<P>;
    return *(O*)a.buffers[I];
  }
}
template <class P, int I> inline P bind_one(const rt::LaunchArgs& a, tg_b<I>) {
  static_assert(std::is_pointer_v<P>, "a [[threadgroup(n)]] parameter must be a pointer");
  return (P)a.tg_params[I];
}
template <class P, attr A> inline P bind_one(const rt::LaunchArgs&, attr_b<A>) {
  const rt::ThreadInfo* t = rt::current_thread();
  if constexpr (A == attr::tpig) return from_dim3<P>(t->tpig);
  else if constexpr (A == attr::tpitg) return from_dim3<P>(t->tpitg);
  else if constexpr (A == attr::tgpig) return from_dim3<P>(t->tgpig);
  else if constexpr (A == attr::tptg) return from_dim3<P>(t->tptg);
  else if constexpr (A == attr::dtptg) return from_dim3<P>(t->dtptg);
  else if constexpr (A == attr::tgpg) return from_dim3<P>(t->tgpg);
  else if constexpr (A == attr::tpg) return from_dim3<P>(t->tpg);
  else if constexpr (A == attr::tiitg) return (P)t->tiitg;
  else if constexpr (A == attr::tiisg) return (P)t->tiisg;
  else if constexpr (A == attr::sgitg) return (P)t->sgitg;
  else if constexpr (A == attr::sgptg) return (P)t->sgptg;
  else if constexpr (A == attr::dsgptg) return (P)t->dsgptg;
  else if constexpr (A == attr::qgitg) return (P)t->qgitg;
  else if constexpr (A == attr::tiiqg) return (P)t->tiiqg;
  else if constexpr (A == attr::qgptg) return (P)t->qgptg;
  else return (P)32;  // thread_execution_width, threads_per_simdgroup
}

template <class P, class B> inline rt::ParamDesc describe_one(B) {
  using R = std::remove_reference_t<P>;
  using O = std::remove_pointer_t<R>;
  if constexpr (std::is_same_v<B, attr_b<attr::tpig>> || std::is_same_v<B, attr_b<attr::tpitg>> ||
                std::is_same_v<B, attr_b<attr::tgpig>> || std::is_same_v<B, attr_b<attr::tptg>> ||
                std::is_same_v<B, attr_b<attr::dtptg>> || std::is_same_v<B, attr_b<attr::tgpg>> ||
                std::is_same_v<B, attr_b<attr::tpg>> || std::is_same_v<B, attr_b<attr::tiitg>> ||
                std::is_same_v<B, attr_b<attr::tiisg>> || std::is_same_v<B, attr_b<attr::sgitg>> ||
                std::is_same_v<B, attr_b<attr::sgptg>> || std::is_same_v<B, attr_b<attr::dsgptg>> ||
                std::is_same_v<B, attr_b<attr::qgitg>> || std::is_same_v<B, attr_b<attr::tiiqg>> ||
                std::is_same_v<B, attr_b<attr::qgptg>> || std::is_same_v<B, attr_b<attr::tew>> ||
                std::is_same_v<B, attr_b<attr::tpsg>>) {
    return rt::ParamDesc{rt::kParamBuiltin, -1, 0, 0};
  } else {
    return rt::ParamDesc{0, -1, uint32_t(sizeof(O)), std::is_reference_v<P> ? 1 : 0};
  }
}
template <class P, int I> inline rt::ParamDesc describe_b(buffer_b<I> b) {
  rt::ParamDesc d = describe_one<P>(b);
  d.kind = rt::kParamBuffer;
  d.index = I;
  return d;
}
template <class P, int I> inline rt::ParamDesc describe_b(tg_b<I> b) {
  rt::ParamDesc d = describe_one<P>(b);
  d.kind = rt::kParamThreadgroup;
  d.index = I;
  return d;
}
template <class P, attr A> inline rt::ParamDesc describe_b(attr_b<A> b) { return describe_one<P>(b); }

template <class... P, class... B> inline void invoke(void (*f)(P...), const rt::LaunchArgs& a, B... b) {
  static_assert(sizeof...(P) == sizeof...(B),
                "msl_emu: the generator found a different number of kernel parameters");
  f(bind_one<P>(a, b)...);
}

template <class F, class... B> struct KernelReg;
template <class... P, class... B> struct KernelReg<void (*)(P...), B...> {
  rt::ParamDesc params[sizeof...(B) + 1];
  rt::KernelDesc desc;
  KernelReg(const char* name, void (*)(P...), rt::EntryFn entry, rt::EntryFn prepare,
            uint32_t max_threads, B... b) {
    static_assert(sizeof...(P) == sizeof...(B),
                  "msl_emu: the generator found a different number of kernel parameters");
    int i = 0;
    ((params[i++] = describe_b<P>(b)), ...);
    desc = rt::KernelDesc{name, entry, prepare, params, int32_t(sizeof...(B)), max_threads};
    rt::register_kernel(&desc);
  }
};
template <class F, class... B>
KernelReg(const char*, F, rt::EntryFn, rt::EntryFn, uint32_t, B...) -> KernelReg<F, B...>;

// Function constants live in thread_local storage, loaded by the kernel's prepare function.
template <class T> inline void fc_load(T& dst, bool& defined, const rt::LaunchArgs& a, uint32_t idx) {
  if (idx < a.fc_count && a.fc_defined[idx]) {
    __builtin_memcpy(&dst, &a.fc_values[idx], sizeof(T));
    defined = true;
  } else {
    dst = T();
    defined = false;
  }
}

// tg_var returns a threadgroup variable declared in a kernel body (`threadgroup T x;`): the
// same memory for all threads of the running threadgroup, new and poisoned (0xFF) per group.
// The lambda argument's type is unique per declaration and per template instantiation.
template <class T, class Site>
inline threadgroup T& tg_var(Site, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  static const char key = 0;
  return *(threadgroup T*)rt::tg_alloc(&key, sizeof(T), alignof(T), file, line);
}

}  // namespace msl_emu

// ---- Metal's constructor syntax (last: these macros would otherwise rewrite the code above) -
#define MSL_EMU_CTOR(T) ::msl_emu::make_vec<::T>
#define float2(...) MSL_EMU_CTOR(float2)(__VA_ARGS__)
#define float3(...) MSL_EMU_CTOR(float3)(__VA_ARGS__)
#define float4(...) MSL_EMU_CTOR(float4)(__VA_ARGS__)
#define half2(...) MSL_EMU_CTOR(half2)(__VA_ARGS__)
#define half3(...) MSL_EMU_CTOR(half3)(__VA_ARGS__)
#define half4(...) MSL_EMU_CTOR(half4)(__VA_ARGS__)
#define bfloat2(...) MSL_EMU_CTOR(bfloat2)(__VA_ARGS__)
#define bfloat3(...) MSL_EMU_CTOR(bfloat3)(__VA_ARGS__)
#define bfloat4(...) MSL_EMU_CTOR(bfloat4)(__VA_ARGS__)
#define int2(...) MSL_EMU_CTOR(int2)(__VA_ARGS__)
#define int3(...) MSL_EMU_CTOR(int3)(__VA_ARGS__)
#define int4(...) MSL_EMU_CTOR(int4)(__VA_ARGS__)
#define uint2(...) MSL_EMU_CTOR(uint2)(__VA_ARGS__)
#define uint3(...) MSL_EMU_CTOR(uint3)(__VA_ARGS__)
#define uint4(...) MSL_EMU_CTOR(uint4)(__VA_ARGS__)
#define short2(...) MSL_EMU_CTOR(short2)(__VA_ARGS__)
#define short3(...) MSL_EMU_CTOR(short3)(__VA_ARGS__)
#define short4(...) MSL_EMU_CTOR(short4)(__VA_ARGS__)
#define ushort2(...) MSL_EMU_CTOR(ushort2)(__VA_ARGS__)
#define ushort3(...) MSL_EMU_CTOR(ushort3)(__VA_ARGS__)
#define ushort4(...) MSL_EMU_CTOR(ushort4)(__VA_ARGS__)
#define char2(...) MSL_EMU_CTOR(char2)(__VA_ARGS__)
#define char3(...) MSL_EMU_CTOR(char3)(__VA_ARGS__)
#define char4(...) MSL_EMU_CTOR(char4)(__VA_ARGS__)
#define uchar2(...) MSL_EMU_CTOR(uchar2)(__VA_ARGS__)
#define uchar3(...) MSL_EMU_CTOR(uchar3)(__VA_ARGS__)
#define uchar4(...) MSL_EMU_CTOR(uchar4)(__VA_ARGS__)
#define long2(...) MSL_EMU_CTOR(long2)(__VA_ARGS__)
#define long3(...) MSL_EMU_CTOR(long3)(__VA_ARGS__)
#define long4(...) MSL_EMU_CTOR(long4)(__VA_ARGS__)
#define ulong2(...) MSL_EMU_CTOR(ulong2)(__VA_ARGS__)
#define ulong3(...) MSL_EMU_CTOR(ulong3)(__VA_ARGS__)
#define ulong4(...) MSL_EMU_CTOR(ulong4)(__VA_ARGS__)
#define bool2(...) MSL_EMU_CTOR(bool2)(__VA_ARGS__)
#define bool3(...) MSL_EMU_CTOR(bool3)(__VA_ARGS__)
#define bool4(...) MSL_EMU_CTOR(bool4)(__VA_ARGS__)

#endif  // MSL_EMU_H
