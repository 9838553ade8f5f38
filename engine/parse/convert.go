package parse

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// convert turns a raw parameter value into JSON by the parameter's schema
// types. The first type other than "null" decides:
//
//	string, absent or unknown  JSON string of the raw text ("null" → null only if "null" is also a type)
//	integer                    integer; otherwise a string (so "5.0" stays "5.0")
//	number                     the number as written if it is a JSON number, else parsed; otherwise a string
//	boolean                    true/false, any case; otherwise a string
//	object, array              compacted JSON, else a Python literal ({'a': True, 'b': None}, tuples)
//	                           converted to JSON, else a string
//
// For every type but string, "null" and "None" (Qwen3.5 wrote Python
// literals) are null, and surrounding whitespace is ignored. A value that does
// not convert is kept as a string rather than dropping the call.
func convert(raw string, types []string) string {
	k, nullable := valueKind(types)
	if k == "string" {
		if nullable && raw == "null" {
			return "null"
		}
		return jsonString(raw)
	}
	v := strings.TrimSpace(raw)
	if v == "null" || v == "None" {
		return "null"
	}
	switch k {
	case "integer":
		if isJSONNumber(v) && !strings.ContainsAny(v, ".eE") {
			return v // exact, even beyond int64
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil { // "+5", "007"
			return strconv.FormatInt(n, 10)
		}
	case "number":
		if isJSONNumber(v) {
			return v
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			b, _ := json.Marshal(f) // ".5", "+1", "1."
			return string(b)
		}
	case "boolean":
		switch strings.ToLower(v) {
		case "true":
			return "true"
		case "false":
			return "false"
		}
	case "object", "array":
		var b bytes.Buffer
		if json.Compact(&b, []byte(v)) == nil {
			return b.String()
		}
		if j, ok := pyToJSON(v); ok {
			return j
		}
	}
	return jsonString(raw)
}

// ValueKind is the kind a parameter's raw value is converted by, from the parameter's JSON
// schema: the first type other than "null" in its "type" or its anyOf/oneOf branches, with the
// aliases kind accepts — string, integer, number, boolean, object or array (string without
// one). Constrained decoding (engine/grammar) writes each parameter as this converts it back.
func ValueKind(schema json.RawMessage) string {
	k, _ := valueKind(schemaTypes(schema))
	return k
}

// valueKind is ValueKind from the schema's types, and whether "null" is one of them.
func valueKind(types []string) (k string, nullable bool) {
	t := ""
	for _, x := range types {
		if x == "null" {
			nullable = true
		} else if t == "" {
			t = x
		}
	}
	return kind(t), nullable
}

// kind maps a JSON-schema type name (and common aliases models and clients
// use) to one of string, integer, number, boolean, object, array.
func kind(t string) string {
	switch t = strings.ToLower(t); {
	case t == "integer" || strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint") || t == "long":
		return "integer"
	case t == "number" || t == "float" || t == "double":
		return "number"
	case t == "boolean" || t == "bool":
		return "boolean"
	case t == "object" || t == "dict":
		return "object"
	case t == "array" || t == "list":
		return "array"
	}
	return "string"
}

func isJSONNumber(s string) bool {
	return s != "" && (s[0] == '-' || s[0] >= '0' && s[0] <= '9') && json.Valid([]byte(s))
}

// jsonString encodes s without HTML escaping, so code in values stays readable.
func jsonString(s string) string {
	var b strings.Builder
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	e.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// pyToJSON converts a Python dict/list/tuple literal to JSON.
func pyToJSON(s string) (string, bool) {
	p := pyParser{s: s}
	p.space()
	if p.i == len(s) || !strings.ContainsRune("{[(", rune(s[p.i])) {
		return "", false
	}
	if !p.value() {
		return "", false
	}
	p.space()
	return p.out.String(), p.i == len(s)
}

type pyParser struct {
	s   string
	i   int
	out strings.Builder
}

func (p *pyParser) space() {
	for p.i < len(p.s) && strings.IndexByte(ws, p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *pyParser) value() bool {
	p.space()
	if p.i == len(p.s) {
		return false
	}
	switch c := p.s[p.i]; c {
	case '{':
		return p.seq('}', true)
	case '[':
		return p.seq(']', false)
	case '(':
		return p.seq(')', false)
	case '\'', '"':
		return p.str()
	}
	j := p.i
	for j < len(p.s) && (isWordByte(p.s[j])) {
		j++
	}
	w := p.s[p.i:j]
	p.i = j
	switch w {
	case "True", "true":
		p.out.WriteString("true")
	case "False", "false":
		p.out.WriteString("false")
	case "None", "null":
		p.out.WriteString("null")
	default:
		if isJSONNumber(w) {
			p.out.WriteString(w)
			return true
		}
		f, err := strconv.ParseFloat(w, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return false
		}
		b, _ := json.Marshal(f)
		p.out.Write(b)
	}
	return true
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("+-._", c) >= 0
}

// seq parses the items of a dict (string keys only), list or tuple up to
// close; a trailing comma is allowed.
func (p *pyParser) seq(close byte, dict bool) bool {
	if dict {
		p.out.WriteByte('{')
	} else {
		p.out.WriteByte('[')
	}
	p.i++
	for n := 0; ; n++ {
		p.space()
		if p.i < len(p.s) && p.s[p.i] == close {
			p.i++
			break
		}
		if n > 0 {
			if p.i == len(p.s) || p.s[p.i] != ',' {
				return false
			}
			p.i++
			p.space()
			if p.i < len(p.s) && p.s[p.i] == close {
				p.i++
				break
			}
			p.out.WriteString(", ")
		}
		if dict {
			p.space()
			if p.i == len(p.s) || (p.s[p.i] != '\'' && p.s[p.i] != '"') || !p.str() {
				return false
			}
			p.space()
			if p.i == len(p.s) || p.s[p.i] != ':' {
				return false
			}
			p.i++
			p.out.WriteString(": ")
		}
		if !p.value() {
			return false
		}
	}
	if dict {
		p.out.WriteByte('}')
	} else {
		p.out.WriteByte(']')
	}
	return true
}

// str parses a quoted Python string with the common escapes.
func (p *pyParser) str() bool {
	q := p.s[p.i]
	var b strings.Builder
	for i := p.i + 1; i < len(p.s); i++ {
		c := p.s[i]
		switch {
		case c == q:
			p.i = i + 1
			p.out.WriteString(jsonString(b.String()))
			return true
		case c == '\n':
			return false
		case c != '\\':
			b.WriteByte(c)
			continue
		}
		if i++; i == len(p.s) {
			return false
		}
		switch e := p.s[i]; e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '0':
			b.WriteByte(0)
		case '\\', '\'', '"':
			b.WriteByte(e)
		case '\n': // line continuation
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+n >= len(p.s) {
				return false
			}
			r, err := strconv.ParseUint(p.s[i+1:i+1+n], 16, 32)
			if err != nil {
				return false
			}
			b.WriteRune(rune(r))
			i += n
		default: // Python keeps unknown escapes
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return false
}

// hermes reads a {"name": …, "arguments": …} call and returns its arguments
// as a compact JSON object.
func hermes(obj string) (name, args string, ok bool) {
	var c struct {
		Name       string          `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if json.Unmarshal([]byte(obj), &c) != nil || c.Name == "" {
		return "", "", false
	}
	a := c.Arguments
	if a == nil {
		a = c.Parameters
	}
	if a != nil && a[0] == '"' { // arguments as a string, OpenAI style
		var s string
		json.Unmarshal(a, &s) // valid: it came from a valid object
		a = []byte(s)
	}
	a = bytes.TrimSpace(a)
	if len(a) == 0 || string(a) == "null" {
		return c.Name, "{}", true
	}
	var b bytes.Buffer
	if a[0] != '{' || json.Compact(&b, a) != nil {
		return "", "", false
	}
	return c.Name, b.String(), true
}

// jsonScan finds the end of a JSON object that arrives in pieces: it resumes
// where the last call stopped (the text only grows at the end meanwhile).
type jsonScan struct {
	n, depth int
	str, esc bool
}

func (j *jsonScan) scan(b string) (int, verdict) {
	for j.n < len(b) && (j.n == 0 || j.depth > 0) {
		c := b[j.n]
		j.n++
		switch {
		case j.esc:
			j.esc = false
		case j.str:
			j.esc = c == '\\'
			j.str = c != '"'
		case c == '"':
			j.str = true
		case c == '{' || c == '[':
			j.depth++
		case c == '}' || c == ']':
			j.depth--
		}
	}
	if j.n > 0 && j.depth <= 0 {
		return j.n, vYes
	}
	return 0, vWait
}
