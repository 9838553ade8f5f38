package jinja

import (
	"math"
	"testing"
)

func TestFloatReprMatchesPython(t *testing.T) {
	for f, want := range map[float64]string{
		1: "1.0", 0.1: "0.1", 100: "100.0", 1e15: "1000000000000000.0", 1e16: "1e+16", 1e22: "1e+22",
		1.5e300: "1.5e+300", 1e-4: "0.0001", 1e-5: "1e-05", 2.5e-5: "2.5e-05", 5e-324: "5e-324",
		123456789012345680: "1.2345678901234568e+17", 9007199254740993: "9007199254740992.0",
		math.MaxFloat64: "1.7976931348623157e+308", math.Copysign(0, -1): "-0.0", math.Inf(-1): "-inf",
	} {
		if got := floatRepr(f); got != want {
			t.Errorf("floatRepr(%v) = %q, want %q", f, got, want)
		}
	}
}

func TestRenderIsolatesCalls(t *testing.T) {
	// A namespace and template-level sets must not leak between renders of one Template.
	tmpl, err := Parse("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m %}{% endfor %}{{ ns.n }}")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if out, err := tmpl.Render(map[string]any{"messages": []any{int64(1), int64(2)}}); err != nil || out != "3" {
			t.Fatalf("got %q, %v", out, err)
		}
	}
}

func TestSyntaxErrorLine(t *testing.T) {
	_, err := Parse("a\n{{ 1 +\n}}\n")
	se, ok := err.(*SyntaxError)
	if !ok || se.Line != 3 {
		t.Fatalf("got %v (%T), want a SyntaxError on line 3", err, err)
	}
}
