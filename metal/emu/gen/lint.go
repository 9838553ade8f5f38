package gen

import (
	"fmt"
	"sort"
	"strings"
)

// Finding is a place in a .metal file that Metal rejects although clang C++, and so the
// emulator, accepts it.
type Finding struct {
	Line int
	Msg  string
}

func (f Finding) String() string { return fmt.Sprintf("line %d: %s", f.Line, f.Msg) }

// Lint reports, in line order, what in src (a .metal file) the Metal compiler rejects although
// the emulator's translation compiles:
//
//   - a declaration (variable, parameter, function, type, template parameter, #define) of a name
//     Metal reserves: scalar, vector, packed and matrix type names (half, bfloat, uint, float4,
//     …), address spaces (device, constant, thread, threadgroup, …) and the function qualifiers
//     kernel, vertex and fragment. The emulator's half or uint is a typedef, which an inner
//     declaration may shadow; Metal's is a keyword;
//   - C++ that MSL lacks: double, exceptions (try, catch, throw), new and delete, virtual,
//     dynamic_cast and typeid, goto, register and thread_local;
//   - the C++ standard library: std:: and #include of anything but <metal_stdlib> (and, for
//     tensor ops, <metal_tensor> and Metal Performance Primitives);
//   - function pointers and references: (*f)(, (&f)(, (*)(;
//   - direct recursion: a call f( inside the body of a function named f (overloads included;
//     recursion through other functions is not followed).
//
// Comments and string and character literals are ignored, and names are whole identifiers
// (halfway is not half). A declaration is a reserved name preceded by a type-like identifier and
// followed by one of = ; , ( ) [ { : >.
func Lint(src string) []Finding {
	l := &linter{toks: tokenize(mask(src))}
	l.reserved()
	l.constructs()
	l.includes(src)
	l.recursion()
	sort.SliceStable(l.out, func(i, j int) bool { return l.out[i].Line < l.out[j].Line })
	return l.out
}

type token struct {
	text  string
	line  int
	ident bool
}

// tokenize splits masked source into identifiers, numbers and punctuation (:: and -> as one).
func tokenize(s string) []token {
	var toks []token
	line := 1
	for i := 0; i < len(s); {
		c := s[i]
		j := i + 1
		switch {
		case c == '\n':
			line++
			i++
			continue
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			i++
			continue
		case isIdentStart(c) || isDigit(c):
			for j < len(s) && (isIdentStart(s[j]) || isDigit(s[j]) || (isDigit(c) && s[j] == '.')) {
				j++
			}
		case strings.HasPrefix(s[i:], "::") || strings.HasPrefix(s[i:], "->"):
			j = i + 2
		}
		toks = append(toks, token{text: s[i:j], line: line, ident: isIdentStart(c)})
		i = j
	}
	return toks
}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool      { return c >= '0' && c <= '9' }

type linter struct {
	toks []token
	out  []Finding
}

func (l *linter) at(i int) string {
	if i < 0 || i >= len(l.toks) {
		return ""
	}
	return l.toks[i].text
}

func (l *linter) ident(i int) bool { return i >= 0 && i < len(l.toks) && l.toks[i].ident }

func (l *linter) report(i int, format string, args ...any) {
	l.out = append(l.out, Finding{Line: l.toks[i].line, Msg: fmt.Sprintf(format, args...)})
}

// reservedNames are the names Metal does not let a declaration take.
var reservedNames = func() map[string]bool {
	m := map[string]bool{}
	add := func(names ...string) {
		for _, n := range names {
			m[n] = true
		}
	}
	scalars := []string{"bool", "char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "half", "bfloat", "float"}
	add(scalars...)
	add("size_t", "ptrdiff_t", "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t", "int64_t", "uint64_t")
	for _, s := range scalars {
		for n := 2; n <= 4; n++ {
			add(fmt.Sprint(s, n), fmt.Sprint("packed_", s, n))
		}
	}
	for _, s := range []string{"half", "bfloat", "float"} {
		for c := 2; c <= 4; c++ {
			for r := 2; r <= 4; r++ {
				add(fmt.Sprintf("%s%dx%d", s, c, r))
			}
		}
	}
	add("device", "constant", "thread", "threadgroup", "threadgroup_imageblock", "ray_data", "object_data")
	add("kernel", "vertex", "fragment")
	return m
}()

// libraryNames are the SIMD-group and quad-group functions metal_stdlib declares: a kernel file's
// own function of the same name compiles on the emulator (whose versions are templates, which a
// plain function outranks) but may make its calls ambiguous on a Mac under `using namespace
// metal` (not tried: a name the product has no need to share).
var libraryNames = func() map[string]bool {
	m := map[string]bool{}
	for _, g := range []string{"simd_", "quad_"} {
		for _, f := range []string{"sum", "product", "min", "max", "and", "or", "xor", "prefix_inclusive_sum",
			"prefix_exclusive_sum", "prefix_inclusive_product", "prefix_exclusive_product", "shuffle", "shuffle_up",
			"shuffle_down", "shuffle_xor", "shuffle_rotate_up", "shuffle_rotate_down", "shuffle_and_fill_up",
			"shuffle_and_fill_down", "broadcast", "broadcast_first", "ballot", "all", "any", "is_first", "is_helper_thread"} {
			m[g+f] = true
		}
	}
	return m
}()

// notTypeLike are identifiers that, before a reserved name, do not make it a declaration:
// expression keywords (return half(x)), conversion operators, the qualifiers of an unnamed
// parameter (f(const uint)) and address spaces, which qualify a type in a template argument
// (tensor<threadgroup bfloat, dextents<int32_t, 2>>).
var notTypeLike = map[string]bool{
	"return": true, "case": true, "else": true, "do": true, "sizeof": true, "alignof": true, "alignas": true,
	"decltype": true, "throw": true, "new": true, "delete": true, "goto": true, "operator": true,
	"const": true, "volatile": true, "constexpr": true, "static": true, "inline": true, "unsigned": true, "signed": true,
	"device": true, "threadgroup": true, "constant": true, "thread": true, "threadgroup_imageblock": true,
}

// declEnd are the tokens that may follow a declared name.
var declEnd = map[string]bool{"=": true, ";": true, ",": true, "(": true, ")": true, "[": true, "{": true, ":": true, ">": true}

func (l *linter) reserved() {
	for i, t := range l.toks {
		if !t.ident || !reservedNames[t.text] && !libraryNames[t.text] {
			continue
		}
		prev := l.at(i - 1)
		define := prev == "define" && l.at(i-2) == "#"
		typeLike := l.ident(i-1) && !notTypeLike[prev]
		pointer := l.at(i+1) == "(" && (l.at(i+2) == "*" || l.at(i+2) == "&") // float (*f)(float): the type
		switch {
		case !define && !(typeLike && declEnd[l.at(i+1)] && !pointer):
		case libraryNames[t.text]:
			l.report(i, "%q is a Metal library function: a declaration of it may make its calls ambiguous on a Mac: rename it", t.text)
		default:
			l.report(i, "%q is a reserved word in Metal and cannot be declared: rename it", t.text)
		}
	}
}

// missing are keywords of C++ features MSL does not have, with what to say about them.
var missing = map[string]string{
	"double":       "MSL has no double: use float",
	"try":          "MSL has no exceptions",
	"catch":        "MSL has no exceptions",
	"throw":        "MSL has no exceptions",
	"new":          "MSL has no new or delete",
	"delete":       "MSL has no new or delete",
	"virtual":      "MSL has no virtual functions",
	"dynamic_cast": "MSL has no dynamic_cast",
	"typeid":       "MSL has no type identification",
	"goto":         "MSL has no goto",
	"register":     "MSL has no register storage",
	"thread_local": "MSL has no thread_local storage",
}

func (l *linter) constructs() {
	for i, t := range l.toks {
		switch {
		case t.ident && missing[t.text] != "":
			l.report(i, "%s: %s", t.text, missing[t.text])
		case t.text == "std" && (l.at(i+1) == "::" || l.at(i-1) == "namespace"):
			l.report(i, "std: the C++ standard library is not available in Metal (use metal::)")
		case t.text == "(" && (l.at(i+1) == "*" || l.at(i+1) == "&"):
			if l.at(i+2) == ")" && l.at(i+3) == "(" || l.ident(i+2) && l.at(i+3) == ")" && l.at(i+4) == "(" {
				l.report(i, "function pointer or reference: Metal compute code cannot call through one")
			}
		}
	}
}

// systemHeaders are the includes a file compiled from a string can use: Metal's own and, for
// tensor ops (MSL 4.0), Metal Performance Primitives.
var systemHeaders = map[string]bool{
	"<metal_stdlib>": true,
	"<metal_tensor>": true,
	"<MetalPerformancePrimitives/MetalPerformancePrimitives.h>": true,
}

// includes checks the #include lines of the unmasked source (mask blanks "quoted" names).
func (l *linter) includes(src string) {
	for n, line := range strings.Split(src, "\n") {
		t := strings.TrimSpace(line)
		if !strings.HasPrefix(t, "#") {
			continue
		}
		if rest, ok := strings.CutPrefix(strings.TrimSpace(t[1:]), "include"); ok {
			if target := strings.TrimSpace(strings.SplitN(rest, "//", 2)[0]); !systemHeaders[target] {
				l.out = append(l.out, Finding{Line: n + 1, Msg: fmt.Sprintf("#include %s: only <metal_stdlib>, <metal_tensor> and <MetalPerformancePrimitives/MetalPerformancePrimitives.h> (the Metal executor compiles each file alone, from a string)", target)})
			}
		}
	}
}

// notFunctions are keywords followed by ( … ) { that are not function definitions.
var notFunctions = map[string]bool{"if": true, "for": true, "while": true, "switch": true, "catch": true, "return": true, "sizeof": true, "alignof": true, "decltype": true}

// recursion finds function definitions — name ( … ) [qualifiers, [[attributes]]] { — and
// reports calls name( inside their bodies.
func (l *linter) recursion() {
	for i := 0; i+1 < len(l.toks); i++ {
		t := l.toks[i]
		if !t.ident || l.at(i+1) != "(" || notFunctions[t.text] || l.at(i-1) == "." || l.at(i-1) == "->" {
			continue
		}
		open := l.bodyAfter(l.match(i+1, "(", ")"))
		if open < 0 {
			continue
		}
		end := l.match(open, "{", "}")
		for j := open + 1; j < end; j++ {
			if l.toks[j].text == t.text && l.at(j+1) == "(" && l.at(j-1) != "." && l.at(j-1) != "->" && l.at(j-1) != "::" {
				l.report(j, "%s calls itself: Metal compute functions cannot recurse", t.text)
			}
		}
		i = end
	}
}

// match returns the index of the token closing the group opened at i (len(toks) if unclosed).
func (l *linter) match(i int, open, close string) int {
	depth := 0
	for j := i; j < len(l.toks); j++ {
		switch l.toks[j].text {
		case open:
			depth++
		case close:
			if depth--; depth == 0 {
				return j
			}
		}
	}
	return len(l.toks)
}

// bodyAfter returns the index of the { that opens a function body after the ) at i, skipping
// qualifiers (const, noexcept) and [[attributes]]; -1 when something else follows.
func (l *linter) bodyAfter(i int) int {
	for j := i + 1; j < len(l.toks); j++ {
		switch s := l.toks[j].text; {
		case s == "{":
			return j
		case s == "[" && l.at(j+1) == "[":
			j = l.match(j, "[", "]")
		case s != "const" && s != "noexcept":
			return -1
		}
	}
	return -1
}
