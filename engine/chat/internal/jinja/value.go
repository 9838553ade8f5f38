// Package jinja is the subset of Jinja2 that Hugging Face chat templates use, evaluated with
// Python semantics (ints of any size, float repr, str/repr of containers, ordered dicts) so that
// output is byte-identical to transformers' ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True, extensions=[loopcontrols]).
//
// Values are plain Go values: nil (None), bool, int64 or *big.Int (int), float64, string,
// Markup, []any (list), Tuple, *Dict, *Namespace, Undefined and callables.
package jinja

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Markup is a string marked safe (the result of |safe); like markupsafe it HTML-escapes
// plain strings concatenated to it with +.
type Markup string

// Tuple is an immutable sequence; it differs from a list only in repr and equality.
type Tuple []any

// Undefined is a missing variable, attribute or item. Hint names it for error messages.
type Undefined struct{ Hint string }

// Dict is an insertion-ordered str-keyed mapping (Python dict).
type Dict struct {
	keys []string
	m    map[string]any
}

// NewDict returns an empty Dict.
func NewDict() *Dict { return &Dict{m: map[string]any{}} }

// Set inserts or replaces key, keeping the position of an existing key as Python does.
func (d *Dict) Set(k string, v any) {
	if _, ok := d.m[k]; !ok {
		d.keys = append(d.keys, k)
	}
	d.m[k] = v
}

// Get returns the value for k.
func (d *Dict) Get(k string) (any, bool) { v, ok := d.m[k]; return v, ok }

// Keys returns the keys in insertion order; callers must not modify it.
func (d *Dict) Keys() []string { return d.keys }

// Len is the number of entries.
func (d *Dict) Len() int { return len(d.keys) }

// Namespace is the mutable object namespace() returns.
type Namespace struct{ attrs *Dict }

// Func is a callable: a global, a bound method or a macro.
type Func func(args []any, kwargs *Dict) (any, error)

// undefinedErr is Jinja2's UndefinedError for an operation on an undefined value.
func undefinedErr(u Undefined) error {
	if u.Hint == "" {
		return fmt.Errorf("UndefinedError: value is undefined")
	}
	return fmt.Errorf("UndefinedError: %s", u.Hint)
}

// typeName is Python's type name, used in error messages.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case Markup:
		return "Markup"
	case []any:
		return "list"
	case Tuple:
		return "tuple"
	case *Dict:
		return "dict"
	case *Namespace:
		return "Namespace"
	case Undefined:
		return "Undefined"
	case *loopCtx:
		return "LoopContext"
	}
	return "function"
}

// truthy is Python's bool(v).
func truthy(v any) bool {
	switch x := v.(type) {
	case nil, Undefined:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case *big.Int:
		return x.Sign() != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case Markup:
		return x != ""
	case []any:
		return len(x) > 0
	case Tuple:
		return len(x) > 0
	case *Dict:
		return x.Len() > 0
	}
	return true
}

// isString reports str or Markup.
func isString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case Markup:
		return string(x), true
	}
	return "", false
}

// toStr is Python's str(v) as Jinja2 prints it ({{ v }}, ~, |string).
func toStr(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case Undefined:
		return ""
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(x, 10)
	case *big.Int:
		return x.String()
	case float64:
		return floatRepr(x)
	case string:
		return x
	case Markup:
		return string(x)
	}
	return repr(v)
}

// floatRepr is Python's repr(float): shortest round-trip digits, scientific notation when the
// decimal exponent is < -4 or >= 16, and ".0" on integral values.
func floatRepr(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	exp, _ := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
	if exp < -4 || exp >= 16 {
		return e // Go also writes at least two exponent digits with a sign: 1e-05, 1e+16
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// repr is Python's repr(v).
func repr(v any) string {
	var b strings.Builder
	writeRepr(&b, v)
	return b.String()
}

func writeRepr(b *strings.Builder, v any) {
	switch x := v.(type) {
	case string:
		writeStrRepr(b, x)
	case Markup:
		b.WriteString("Markup(")
		writeStrRepr(b, string(x))
		b.WriteByte(')')
	case Undefined:
		b.WriteString("Undefined")
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, e)
		}
		b.WriteByte(']')
	case Tuple:
		b.WriteByte('(')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, e)
		}
		if len(x) == 1 {
			b.WriteByte(',')
		}
		b.WriteByte(')')
	case *Dict:
		b.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeStrRepr(b, k)
			b.WriteString(": ")
			writeRepr(b, x.m[k])
		}
		b.WriteByte('}')
	case *Namespace:
		b.WriteString("<Namespace ")
		writeRepr(b, x.attrs)
		b.WriteByte('>')
	case nil, bool, int64, *big.Int, float64:
		b.WriteString(toStr(x))
	default:
		fmt.Fprintf(b, "<%s object>", typeName(v))
	}
}

// writeStrRepr quotes s like Python's str.__repr__.
func writeStrRepr(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < ' ' || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x7f || unicode.IsPrint(r):
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
	b.WriteByte(q)
}

// isSpace is Python's str.isspace for one character (Go's unicode.IsSpace lacks U+001C–U+001F).
func isSpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }

// length is Python's len(v).
func length(v any) (int, error) {
	switch x := v.(type) {
	case string:
		return utf8.RuneCountInString(x), nil
	case Markup:
		return utf8.RuneCountInString(string(x)), nil
	case []any:
		return len(x), nil
	case Tuple:
		return len(x), nil
	case *Dict:
		return x.Len(), nil
	case Undefined:
		return 0, nil
	}
	return 0, fmt.Errorf("TypeError: object of type '%s' has no len()", typeName(v))
}

// iterate lists the items a for loop visits: characters of a string, keys of a dict.
func iterate(v any) ([]any, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case Tuple:
		return x, nil
	case *Dict:
		out := make([]any, len(x.keys))
		for i, k := range x.keys {
			out[i] = k
		}
		return out, nil
	case string, Markup:
		s, _ := isString(x)
		out := make([]any, 0, len(s))
		for _, r := range s {
			out = append(out, string(r))
		}
		return out, nil
	case Undefined:
		return nil, nil
	}
	return nil, fmt.Errorf("TypeError: '%s' object is not iterable", typeName(v))
}

// bigOf returns an int value as *big.Int; ok is false for non-ints (bool counts, as in Python).
func bigOf(v any) (*big.Int, bool) {
	switch x := v.(type) {
	case int64:
		return big.NewInt(x), true
	case *big.Int:
		return x, true
	case bool:
		if x {
			return big.NewInt(1), true
		}
		return big.NewInt(0), true
	}
	return nil, false
}

// normInt returns z as int64 when it fits.
func normInt(z *big.Int) any {
	if z.IsInt64() {
		return z.Int64()
	}
	return z
}

// floatOf converts a number (bool, int, float) to float64.
func floatOf(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	case *big.Int:
		f, _ := new(big.Float).SetInt(x).Float64()
		return f, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

func isNumber(v any) bool {
	switch v.(type) {
	case bool, int64, *big.Int, float64:
		return true
	}
	return false
}

// equal is Python's ==.
func equal(a, b any) bool {
	if isNumber(a) && isNumber(b) {
		c, err := compare(a, b)
		return err == nil && c == 0
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case Undefined:
		_, ok := b.(Undefined)
		return ok
	case string, Markup:
		s, _ := isString(x)
		t, ok := isString(b)
		return ok && s == t
	case []any:
		y, ok := b.([]any)
		return ok && seqEqual(x, y)
	case Tuple:
		y, ok := b.(Tuple)
		return ok && seqEqual(x, y)
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for _, k := range x.keys {
			w, ok := y.m[k]
			if !ok || !equal(x.m[k], w) {
				return false
			}
		}
		return true
	case *Namespace:
		return a == b
	}
	return false
}

func seqEqual(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// compare orders numbers, strings and sequences as Python does; other pairs are a TypeError.
func compare(a, b any) (int, error) {
	if isNumber(a) && isNumber(b) {
		_, af := a.(float64)
		_, bf := b.(float64)
		if !af && !bf {
			x, _ := bigOf(a)
			y, _ := bigOf(b)
			return x.Cmp(y), nil
		}
		x, _ := floatOf(a)
		y, _ := floatOf(b)
		switch {
		case x < y:
			return -1, nil
		case x > y:
			return 1, nil
		case x == y:
			return 0, nil
		}
		return 2, nil // NaN: every ordering is false
	}
	if s, ok := isString(a); ok {
		if t, ok := isString(b); ok {
			return strings.Compare(s, t), nil // UTF-8 byte order is code point order
		}
	}
	as, aok := seqOf(a)
	bs, bok := seqOf(b)
	if aok && bok && typeName(a) == typeName(b) {
		for i := 0; i < len(as) && i < len(bs); i++ {
			if !equal(as[i], bs[i]) {
				return compare(as[i], bs[i])
			}
		}
		return len(as) - len(bs), nil
	}
	return 0, fmt.Errorf("TypeError: '<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

func seqOf(v any) ([]any, bool) {
	switch x := v.(type) {
	case []any:
		return x, true
	case Tuple:
		return x, true
	}
	return nil, false
}

// contains is Python's `item in container`.
func contains(container, item any) (bool, error) {
	switch c := container.(type) {
	case string, Markup:
		s, _ := isString(c)
		t, ok := isString(item)
		if !ok {
			return false, fmt.Errorf("TypeError: 'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(s, t), nil
	case *Dict:
		k, ok := isString(item)
		if !ok {
			return false, nil
		}
		_, ok = c.m[k]
		return ok, nil
	case Undefined:
		return false, nil
	}
	items, err := iterate(container)
	if err != nil {
		return false, fmt.Errorf("TypeError: argument of type '%s' is not iterable", typeName(container))
	}
	for _, e := range items {
		if equal(e, item) {
			return true, nil
		}
	}
	return false, nil
}

// htmlEscape is markupsafe.escape.
func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(s)
}
