package jinja

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// FromJSON decodes JSON the way Python's json.loads does: objects keep key order (a repeated
// key keeps its first position and last value), integers stay exact, other numbers are floats.
func FromJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("invalid JSON: trailing data")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			list := []any{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := dec.Token()
			return list, err
		}
		d := NewDict()
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			d.Set(k.(string), v)
		}
		_, err := dec.Token()
		return d, err
	case json.Number:
		return parseNumber(string(t)), nil
	}
	return tok, nil // nil, bool or string
}

// parseNumber maps a JSON number lexeme to int (no '.', 'e' or 'E') or float, as Python does.
func parseNumber(s string) any {
	if !strings.ContainsAny(s, ".eE") {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n
		}
		z, _ := new(big.Int).SetString(s, 10)
		return z
	}
	f, _ := strconv.ParseFloat(s, 64) // out of range gives ±Inf, like Python's float()
	return f
}

// jsonOpts are the json.dumps arguments transformers' tojson exposes.
type jsonOpts struct {
	ensureASCII bool
	indent      string // "" with hasIndent=false means no newlines
	hasIndent   bool
	itemSep     string
	keySep      string
	sortKeys    bool
}

// toJSON is json.dumps(v, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
// unless opts say otherwise.
func toJSON(v any, o jsonOpts) (string, error) {
	var b strings.Builder
	if err := writeJSON(&b, v, o, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writeJSON(b *strings.Builder, v any, o jsonOpts, depth int) error {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64, *big.Int:
		b.WriteString(toStr(x))
	case float64:
		switch {
		case math.IsNaN(x):
			b.WriteString("NaN")
		case math.IsInf(x, 1):
			b.WriteString("Infinity")
		case math.IsInf(x, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(floatRepr(x))
		}
	case string:
		writeJSONString(b, x, o.ensureASCII)
	case Markup:
		writeJSONString(b, string(x), o.ensureASCII)
	case []any, Tuple:
		items, _ := seqOf(x)
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, e := range items {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			newline(b, o, depth+1)
			if err := writeJSON(b, e, o, depth+1); err != nil {
				return err
			}
		}
		newline(b, o, depth)
		b.WriteByte(']')
	case *Dict:
		if x.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := x.keys
		if o.sortKeys {
			keys = append([]string(nil), keys...)
			sort.Strings(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			newline(b, o, depth+1)
			writeJSONString(b, k, o.ensureASCII)
			b.WriteString(o.keySep)
			if err := writeJSON(b, x.m[k], o, depth+1); err != nil {
				return err
			}
		}
		newline(b, o, depth)
		b.WriteByte('}')
	default:
		return fmt.Errorf("TypeError: Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func newline(b *strings.Builder, o jsonOpts, depth int) {
	if o.hasIndent {
		b.WriteByte('\n')
		b.WriteString(strings.Repeat(o.indent, depth))
	}
}

// writeJSONString escapes like Python's json module: short escapes for " \ \n \r \t \b \f,
// \u00XX for other control characters, everything else raw (U+2028/U+2029 included) unless
// ensureASCII, which writes \uXXXX (surrogate pairs above the BMP).
func writeJSONString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || (ensureASCII && r >= 0x7f && r <= 0xffff):
				fmt.Fprintf(b, `\u%04x`, r)
			case ensureASCII && r > 0xffff:
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}
