package gen

import (
	"strings"
	"testing"
)

const sample = `#include <metal_stdlib>
using namespace metal;

// kernel void not_a_kernel(device float* x) -- a comment
constant uint N [[function_constant(0)]];
constant float SCALE [[ function_constant( 3 ) ]];
constant bool HAS_SCALE = is_function_constant_defined(SCALE);
constant uint TWICE = N * 2u;
constant float PI_ISH = 3.14f;

static float helper(threadgroup float* t, uint i) { return t[i]; }

[[max_total_threads_per_threadgroup(256)]]
kernel void first(device const float* in [[buffer(0)]],
                  constant uint& n [[buffer(2)]],
                  device float* out [[buffer(1)]],
                  threadgroup float* scratch [[threadgroup(0)]],
                  uint2 gid [[thread_position_in_grid]],
                  ushort lane [[thread_index_in_simdgroup]]) {
  threadgroup float a[32], b[4][2];
  threadgroup uint count;
  threadgroup float* p = a;
  a[lane] = in[gid.x] * (HAS_SCALE ? SCALE : 1.0f);
  out[gid.x] = helper(p, lane) + float(TWICE) + b[0][0] + float(count) + (is_function_constant_defined(N) ? 1.0f : 0.0f);
}

template <typename T>
[[kernel]] void second(device T* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  x[i] = T(1);
}
template [[host_name("second_f")]] [[kernel]] decltype(second<float>) second<float>;
template [[host_name("second_h")]] [[kernel]] decltype(second<half>) second<half>;
`

func TestTranslate(t *testing.T) {
	u, err := Translate("x.metal", sample)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, k := range u.Kernels {
		names = append(names, k.Name+"="+k.Func)
	}
	if got := strings.Join(names, " "); got != "first=first second_f=second<float> second_h=second<half>" {
		t.Errorf("kernels: %s", got)
	}
	k := u.Kernels[0]
	if k.MaxThreads != 256 || k.Line != 14 {
		t.Errorf("first: max threads %d, line %d; want 256, 14", k.MaxThreads, k.Line)
	}
	want := []Param{
		{Name: "in", Kind: Buffer, Index: 0},
		{Name: "n", Kind: Buffer, Index: 2},
		{Name: "out", Kind: Buffer, Index: 1},
		{Name: "scratch", Kind: Threadgroup, Index: 0},
		{Name: "gid", Kind: Builtin, Index: -1, Builtin: "thread_position_in_grid"},
		{Name: "lane", Kind: Builtin, Index: -1, Builtin: "thread_index_in_simdgroup"},
	}
	if len(k.Params) != len(want) {
		t.Fatalf("params: %+v", k.Params)
	}
	for i, w := range want {
		p := k.Params[i]
		if p.Name != w.Name || p.Kind != w.Kind || p.Index != w.Index || p.Builtin != w.Builtin {
			t.Errorf("param %d: got %+v want %+v", i, p, w)
		}
	}
	if len(u.Constants) != 2 || u.Constants[0] != (Constant{Name: "N", Type: "uint", Index: 0, Line: 5, Optional: true}) ||
		u.Constants[1] != (Constant{Name: "SCALE", Type: "float", Index: 3, Line: 6, Optional: true}) {
		t.Errorf("constants: %+v", u.Constants)
	}

	// Every source line keeps its number: the body between "#line 1" and the wrappers has the
	// source's lines, and the kernel's first line is where it was.
	body := u.CPP[strings.Index(u.CPP, "#line 1 \"x.metal\"\n")+len("#line 1 \"x.metal\"\n"):]
	body = body[:strings.Index(body, "#line ")]
	srcLines, outLines := strings.Split(sample, "\n"), strings.Split(body, "\n")
	if len(outLines) != len(srcLines) {
		t.Fatalf("%d lines translated from %d", len(outLines), len(srcLines))
	}
	for i, want := range map[int]string{
		5:  "static thread_local uint N; static thread_local bool msl_fc_def_N;",
		7:  "static thread_local bool HAS_SCALE;",
		8:  "static thread_local uint TWICE;",
		9:  "constant float PI_ISH = 3.14f;",
		14: "kernel void first(device const float* in",
		20: "threadgroup float (&a)[32] = ::msl_emu::tg_var<float[32]>([]{}); threadgroup float (&b)[4][2] = ::msl_emu::tg_var<float[4][2]>([]{});",
		21: "threadgroup uint (&count) = ::msl_emu::tg_var<uint>([]{});",
		22: "threadgroup float* p = a;",
		24: "(msl_fc_def_N ? 1.0f : 0.0f)",
		31: "decltype(second<float>) second<float>;",
	} {
		if !strings.Contains(outLines[i-1], want) {
			t.Errorf("line %d: %q lacks %q", i, outLines[i-1], want)
		}
	}
	if strings.Contains(u.CPP, "[[") {
		t.Errorf("attributes left in the output")
	}
	for _, w := range []string{
		"HAS_SCALE = (bool)(msl_fc_def_SCALE);",
		"TWICE = (uint)(N * 2u);",
		"::msl_emu::fc_load(SCALE, msl_fc_def_SCALE, a, 3);",
		`msl_reg_0("first", &first, &msl_entry_0, &msl_prepare, 256, ::msl_emu::buffer_b<0>{}, ::msl_emu::buffer_b<2>{}, ::msl_emu::buffer_b<1>{}, ::msl_emu::tg_b<0>{}, ::msl_emu::attr_b<::msl_emu::attr::tpig>{}, ::msl_emu::attr_b<::msl_emu::attr::tiisg>{});`,
		`msl_reg_2("second_h", &second<half>`,
		"#line 14 \"x.metal\"\nstatic void msl_entry_0",
	} {
		if !strings.Contains(u.CPP, w) {
			t.Errorf("output lacks %q", w)
		}
	}
}

func TestTranslateErrors(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"kernel void f(device float* x, uint i [[thread_position_in_grid]]) {}", "x.metal:1: kernel f: parameter \"device float* x\" has no attribute"},
		{"kernel void f(device float* x [[buffer(0)]], device float* y [[buffer(0)]]) {}", "both use buffer(0)"},
		{"kernel void f(device float* x [[buffer(31)]]) {}", "out of range"},
		{"kernel void f(texture2d<float> t [[texture(0)]]) {}", "[[texture(0)]] is not supported"},
		{"kernel void f(float x [[buffer(0)]]) {}", "must be a pointer or a reference"},
		{"constant float4 V [[function_constant(0)]];", "scalar types only"},
		{"constant int A [[function_constant(1)]];\nconstant int B [[function_constant(1)]];", "x.metal:2: function constants A and B share index 1"},
		{"template [[host_name(\"g\")]] [[kernel]] decltype(g<float>) g<float>;", "not a kernel in this file"},
		{"kernel void f(device float* x [[buffer(0)]]) {}\nkernel void f(device float* x [[buffer(0)]]) {}", "declared twice"},
	} {
		_, err := Translate("x.metal", c.src)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.src, err, c.want)
		}
	}
}

func TestMask(t *testing.T) {
	src := "a // b \"c\n/* d\n e */ f \"g // h\" 'i'"
	got := mask(src)
	if len(got) != len(src) || strings.Count(got, "\n") != 2 || strings.ContainsAny(got, "bcdegh") || !strings.Contains(got, "f") {
		t.Errorf("mask(%q) = %q", src, got)
	}
}

// TestMetal4Includes: a file that includes <metal_tensor> or Metal Performance Primitives asks
// for the MSL 4.0 surface before its namespace opens; others do not, and Lint accepts both.
func TestMetal4Includes(t *testing.T) {
	for _, c := range []struct {
		inc  string
		want bool
	}{
		{"#include <metal_tensor>", true},
		{"  # include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>", true},
		{"// #include <metal_tensor>", false},
		{"", false},
	} {
		src := "#include <metal_stdlib>\n" + c.inc + "\nkernel void k(device float* x [[buffer(0)]]) { x[0] = 1.0f; }\n"
		u, err := Translate("t.metal", src)
		if err != nil {
			t.Fatal(err)
		}
		define := strings.Contains(u.CPP, "#define MSL_EMU_METAL4 1\n#include \"msl_emu.h\"")
		if u.Metal4 != c.want || define != c.want {
			t.Errorf("%q: Metal4 %v, define %v; want %v", c.inc, u.Metal4, define, c.want)
		}
		if f := Lint(src); len(f) != 0 {
			t.Errorf("%q: lint: %v", c.inc, f)
		}
	}
}

// TestGatedBuffer: [[buffer(n), function_constant(NAME)]] records NAME's function constant as the
// parameter's gate (NAME itself, or the constant NAME stays false without); a gate that is neither
// is refused.
func TestGatedBuffer(t *testing.T) {
	const src = `#include <metal_stdlib>
using namespace metal;
constant bool USE_FC [[function_constant(3)]];
constant uint N [[function_constant(4)]];
constant bool USE = is_function_constant_defined(USE_FC) && USE_FC;
kernel void k(device float* x [[buffer(0)]], device const float* y [[buffer(1), function_constant(%s)]],
              uint i [[thread_position_in_grid]]) {
  x[i] = USE ? y[i] : float(N);
}
`
	// The function constant itself, or the bool that stays false while it is unset (USE).
	for _, gate := range []string{"USE_FC", "USE"} {
		u, err := Translate("g.metal", strings.Replace(src, "%s", gate, 1))
		if err != nil {
			t.Fatal(err)
		}
		if ps := u.Kernels[0].Params; ps[0].Gate != "" || ps[1].Gate != "USE_FC" || ps[1].Index != 1 || ps[1].Kind != Buffer {
			t.Errorf("gate %s: params: %+v", gate, ps)
		}
	}
	for _, bad := range []string{"N", "MISSING"} {
		if _, err := Translate("g.metal", strings.Replace(src, "%s", bad, 1)); err == nil || !strings.Contains(err.Error(), "must name a bool function constant") {
			t.Errorf("gate %s: %v", bad, err)
		}
	}
}
