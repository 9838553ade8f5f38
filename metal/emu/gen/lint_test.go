package gen

import (
	"strings"
	"testing"
)

// cleanMSL uses reserved words as types and in comments, strings and longer names, the ways real
// kernels do: Lint must report nothing.
const cleanMSL = `#include <metal_stdlib>  // not <cmath>
using namespace metal;

// A comment may say double, std::min, half = 1, try, or f calls f(.
/* float half = 0; (*fp)(x) */
constant uint N [[function_constant(0)]];
constant float EPS = 1e-6f;
static constant float TABLE[2] = {0.5f, 1.0f};
#define HALF_N (N / 2)

struct Pair { half lo; float4 hi; };
typedef tensor<threadgroup bfloat, dextents<int32_t, 2>, tensor_inline> tile_t;
using view_t = tensor<device half, dextents<int32_t, 2>>;

inline half to_half(const float halfway) { return half(halfway); }
inline float twice(float x) { return 2.0f * x; }
inline uint count(thread const uint* p, uint n, const uint) { return n + uint(*p) + as_type<uint>(float(n)); }

kernel void clean(device const half* in [[buffer(0)]],
                  constant uint& n [[buffer(1)]],
                  device float* out [[buffer(2)]],
                  uint gid [[thread_position_in_grid]]) {
  threadgroup float scratch[32];
  const half2 h = half2(in[gid], in[gid]);
  const uint halves = N > 1 ? uint(N) / 2u : 0u;
  float v = float(h.x) * (*(&scratch[0])) + EPS + TABLE[0] + simd_sum(1.0f);
  v += quad_sum(v);
  out[gid] = v + float(halves) + (gid < HALF_N ? 1.0f : 0.0f) + float(sizeof(uint)) + (float)n;
}
`

func TestLintCleanSource(t *testing.T) {
	if got := Lint(cleanMSL); len(got) != 0 {
		t.Fatalf("findings in clean source: %v", got)
	}
}

// TestLintCatchesPlanted plants each construct Metal rejects in an otherwise clean kernel and
// checks that Lint reports it on its line.
func TestLintCatchesPlanted(t *testing.T) {
	cases := []struct{ name, code, want string }{
		{"half variable", "const ulong half = 1ul << 3;", `"half" is a reserved word`},
		{"bfloat variable", "float bfloat = 0.0f;", `"bfloat" is a reserved word`},
		{"vector-type parameter", "inline float f(float4 float4) { return float4.x; }", `"float4" is a reserved word`},
		{"matrix-type variable", "uint float2x2 = 0;", `"float2x2" is a reserved word`},
		{"uint array", "thread float uint[4];", `"uint" is a reserved word`},
		{"address-space variable", "uint device = 3u;", `"device" is a reserved word`},
		{"threadgroup parameter", "inline uint g(uint threadgroup) { return threadgroup; }", `"threadgroup" is a reserved word`},
		{"qualifier variable", "int kernel = 0;", `"kernel" is a reserved word`},
		{"type named like a vector", "struct uint2 { int x; };", `"uint2" is a reserved word`},
		{"alias", "using half4 = float4;", `"half4" is a reserved word`},
		{"template parameter", "template <typename half> half id(half x) { return x; }", `"half" is a reserved word`},
		{"macro", "#define bfloat float", `"bfloat" is a reserved word`},
		{"library function", "inline float quad_sum(float v) { return v + simd_shuffle_xor(v, 1); }", `"quad_sum" is a Metal library function`},
		{"double", "inline double widen(float x) { return x; }", "MSL has no double"},
		{"direct recursion", "inline uint fact(uint n) { return n < 2u ? 1u : n * fact(n - 1u); }", "fact calls itself"},
		{"overload calling its namesake (reported too)", "inline float twice(half x) { return twice(float(x)); }", "twice calls itself"},
		{"function pointer variable", "inline float neg(float x) { return -x; } static float (*op)(float) = neg;", "function pointer"},
		{"function pointer type", "typedef float (*unary)(float);", "function pointer"},
		{"function reference", "inline float call(float (&f)(float), float x) { return f(x); }", "function pointer or reference"},
		{"call through a pointer", "inline float apply(thread float (*fp)(float), float x) { return (*fp)(x); }", "function pointer"},
		{"try/catch", "inline void f() { try { } catch (...) { } }", "MSL has no exceptions"},
		{"throw", "inline void f() { throw 1; }", "MSL has no exceptions"},
		{"new", "inline void f() { thread float* p = new float; }", "MSL has no new or delete"},
		{"virtual", "struct S { virtual float f(); };", "MSL has no virtual functions"},
		{"goto", "inline void f() { goto end; end: ; }", "MSL has no goto"},
		{"std::", "inline float f(float a, float b) { return std::min(a, b); }", "the C++ standard library"},
		{"using namespace std", "using namespace std;", "the C++ standard library"},
		{"other include", "#include <cmath>", "#include <cmath>: only <metal_stdlib>"},
		{"quoted include", `#include "common.h"`, `#include "common.h": only <metal_stdlib>`},
	}
	lines := strings.Count(cleanMSL, "\n")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Lint(cleanMSL + c.code + "\n")
			for _, f := range got {
				if f.Line == lines+1 && strings.Contains(f.Msg, c.want) {
					return
				}
			}
			t.Fatalf("planted %q: findings %v, want %q on line %d", c.code, got, c.want, lines+1)
		})
	}
}
