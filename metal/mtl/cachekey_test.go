package mtl

import (
	"regexp"
	"testing"
)

func TestCacheKey(t *testing.T) {
	const src = "kernel void add(device float *a [[buffer(0)]]) {}"
	opts := CompileOptions{LanguageVersion: LanguageVersion3_1, Math: MathRelaxed, Macros: map[string]string{"N": "64", "USE_BF16": "1"}}
	consts := func() *FunctionConstants {
		var c FunctionConstants
		c.SetUint(0, 2048)
		c.SetBool(1, true)
		c.SetFloat(2, 1e-6)
		return &c
	}
	const dev, osv = "Apple M3 Max", "15.5 (24F74)"
	base := CacheKey(src, opts, "add", consts(), dev, osv)
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(base) {
		t.Fatalf("key %q is not 64 hex digits", base)
	}
	if again := CacheKey(src, opts, "add", consts(), dev, osv); again != base {
		t.Fatal("key is not deterministic")
	}

	// Order of macros and constants does not matter.
	var reordered FunctionConstants
	reordered.SetFloat(2, 1e-6)
	reordered.SetUint(0, 2048)
	reordered.SetBool(1, true)
	reMacros := opts
	reMacros.Macros = map[string]string{"USE_BF16": "1", "N": "64"}
	if CacheKey(src, reMacros, "add", &reordered, dev, osv) != base {
		t.Fatal("key depends on the order of macros or constants")
	}

	// Every input changes it.
	changed := map[string]string{}
	add := func(name, key string) {
		if key == base {
			t.Errorf("%s does not change the key", name)
		}
		if prev, dup := changed[key]; dup {
			t.Errorf("%s and %s give the same key", name, prev)
		}
		changed[key] = name
	}
	add("source", CacheKey(src+" ", opts, "add", consts(), dev, osv))
	o := opts
	o.LanguageVersion = LanguageVersion3_2
	add("language version", CacheKey(src, o, "add", consts(), dev, osv))
	o = opts
	o.Math = MathFast
	add("math mode", CacheKey(src, o, "add", consts(), dev, osv))
	o = opts
	o.Macros = map[string]string{"N": "128", "USE_BF16": "1"}
	add("macro value", CacheKey(src, o, "add", consts(), dev, osv))
	o.Macros = map[string]string{"N": "64"}
	add("macro set", CacheKey(src, o, "add", consts(), dev, osv))
	add("function", CacheKey(src, opts, "mul", consts(), dev, osv))
	c := consts()
	c.SetUint(0, 4096)
	add("constant value", CacheKey(src, opts, "add", c, dev, osv))
	c = consts()
	c.SetInt(0, 2048) // same bits, other type
	add("constant type", CacheKey(src, opts, "add", c, dev, osv))
	c = consts()
	c.SetBool(3, false)
	add("extra constant", CacheKey(src, opts, "add", c, dev, osv))
	add("no constants", CacheKey(src, opts, "add", nil, dev, osv))
	add("device", CacheKey(src, opts, "add", consts(), "Apple M4", osv))
	add("OS build", CacheKey(src, opts, "add", consts(), dev, "15.5 (24F75)"))

	// Length prefixes keep field boundaries: moving bytes between fields changes the key.
	if CacheKey(src, opts, "ab", nil, "c", osv) == CacheKey(src, opts, "a", nil, "bc", osv) {
		t.Error("field boundaries are ambiguous")
	}
}

func TestFunctionConstants(t *testing.T) {
	var c FunctionConstants
	if c.Len() != 0 || (*FunctionConstants)(nil).Len() != 0 || c.clone() != nil {
		t.Fatal("zero value should hold nothing")
	}
	c.SetUint(5, 1)
	c.SetBool(1, true)
	c.SetInt(3, -2)
	c.SetFloat(1, 0.5) // replaces index 1
	want := []constant{{1, dataTypeFloat, 0x3f000000}, {3, dataTypeInt, 0xfffffffe}, {5, dataTypeUInt, 1}}
	if len(c.vals) != len(want) {
		t.Fatalf("vals = %+v", c.vals)
	}
	for i := range want {
		if c.vals[i] != want[i] {
			t.Fatalf("vals = %+v, want %+v", c.vals, want)
		}
	}
	cl := c.clone()
	c.SetUint(5, 2)
	if cl.vals[2].bits != 1 {
		t.Fatal("clone shares storage")
	}
}

func TestFamilyString(t *testing.T) {
	for f, want := range map[Family]string{
		FamilyApple7: "Apple7", FamilyApple9: "Apple9", FamilyApple10: "Apple10",
		FamilyMetal3: "Metal3", FamilyMetal4: "Metal4", 0: "none", 2002: "Family(2002)",
	} {
		if got := f.String(); got != want {
			t.Errorf("Family(%d).String() = %q, want %q", int(f), got, want)
		}
	}
}
