package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// JSON types, as a bit set.
const (
	tString uint8 = 1 << iota
	tInteger
	tNumber
	tBoolean
	tNull
	tObject
	tArray
	tAll = 1<<iota - 1
)

var typeNames = []string{"string", "integer", "number", "boolean", "null", "object", "array"}

var supported = set("type", "properties", "required", "additionalProperties", "items", "prefixItems",
	"minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions",
	"minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")

var annotations = set("title", "description", "default", "examples", "$schema", "$id", "$comment",
	"deprecated", "readOnly", "writeOnly", "strict")

func set(keys ...string) map[string]bool {
	m := map[string]bool{}
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// member is one key of a JSON object, in document order (properties are written in it).
type member struct {
	key string
	val json.RawMessage
}

// members reads a JSON object's members in order.
func members(raw json.RawMessage) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not an object")
	}
	var out []member
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, member{t.(string), v})
	}
	return out, nil
}

// schema is one schema object: its members by key, and where it is.
type schema struct {
	m    map[string]json.RawMessage
	keys []member
	path string
}

func (s *schema) has(k string) bool { _, ok := s.m[k]; return ok }

type compiler struct {
	g    *Grammar
	doc  json.RawMessage
	refs map[string]int32 // mode and pointer → node
	anys map[string]int32 // mode → any-value node
}

// mode says how values are written: allowed types, and raw (a tool-call string value: text
// ending in "\n</parameter>") or JSON.
type mode struct {
	types uint8
	raw   bool
}

func (m mode) key() string { return fmt.Sprintf("%d/%v", m.types, m.raw) }

var errNoType = errors.New("no allowed type")

// CompileJSONSchema compiles a JSON Schema (the subset in the package doc) into a grammar of the
// JSON texts that validate against it.
func CompileJSONSchema(raw json.RawMessage) (*Grammar, error) {
	c := newCompiler(raw)
	root, err := c.compile(raw, "#", mode{types: tAll})
	if err != nil {
		return nil, err
	}
	return c.finish(root)
}

func newCompiler(doc json.RawMessage) *compiler {
	return &compiler{g: &Grammar{}, doc: doc, refs: map[string]int32{}, anys: map[string]int32{}}
}

// finish settles the grammar with root as its start; a choice at the root gets a frame to live in.
func (c *compiler) finish(root int32) (*Grammar, error) {
	if c.g.nodes[root].kind == kChoice {
		root = c.g.seq(root)
	}
	c.g.root = root
	for i := range c.g.nodes {
		if c.g.nodes[i].kind == kRef {
			return nil, errors.New("grammar: circular $ref with nothing in between")
		}
	}
	if err := c.g.finalize(); err != nil {
		return nil, err
	}
	return c.g, nil
}

var jsonObjectOnce = sync.OnceValue(func() *Grammar {
	c := newCompiler(nil)
	g, err := c.finish(c.anyObject(mode{types: tAll}))
	if err != nil {
		panic(err)
	}
	return g
})

// JSONObject is the grammar of any JSON object (response_format json_object).
func JSONObject() *Grammar { return jsonObjectOnce() }

func (c *compiler) parse(raw json.RawMessage, path string) (*schema, error) {
	ms, err := members(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: a schema must be an object or a boolean", path)
	}
	s := &schema{m: map[string]json.RawMessage{}, keys: ms, path: path}
	var bad []string
	for _, m := range ms {
		s.m[m.key] = m.val
		if !supported[m.key] && !annotations[m.key] && !strings.HasPrefix(m.key, "x-") {
			bad = append(bad, m.key)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return nil, fmt.Errorf("%s: unsupported JSON Schema keyword(s): %s", path, strings.Join(bad, ", "))
	}
	return s, nil
}

// constraints are the keywords of s other than annotations and those in except.
func (s *schema) constraints(except ...string) []string {
	var out []string
	for _, m := range s.keys {
		if supported[m.key] && !slices.Contains(except, m.key) && m.key != "$defs" && m.key != "definitions" {
			out = append(out, m.key)
		}
	}
	return out
}

func (c *compiler) compile(raw json.RawMessage, path string, md mode) (int32, error) {
	raw = bytes.TrimSpace(raw)
	switch string(raw) {
	case "true":
		return c.anyValue(md)
	case "false":
		return 0, fmt.Errorf("%s: schema false admits no value", path)
	}
	s, err := c.parse(raw, path)
	if err != nil {
		return 0, err
	}
	for _, k := range []string{"$ref", "allOf", "anyOf", "oneOf"} {
		if !s.has(k) {
			continue
		}
		if other := s.constraints(k); len(other) > 0 {
			return 0, fmt.Errorf("%s: %s next to %s is not supported (only annotations may stand beside it)", path, k, strings.Join(other, ", "))
		}
		switch k {
		case "$ref":
			return c.ref(s, md)
		case "allOf":
			var subs []json.RawMessage
			if json.Unmarshal(s.m[k], &subs) != nil || len(subs) != 1 {
				return 0, fmt.Errorf("%s: allOf is only supported with a single branch", path)
			}
			return c.compile(subs[0], path+"/allOf/0", md)
		default:
			return c.branches(s, k, md)
		}
	}
	if s.has("enum") || s.has("const") {
		return c.enum(s, md)
	}
	types, err := c.types(s)
	if err != nil {
		return 0, err
	}
	if types &= md.types; types == 0 {
		return 0, fmt.Errorf("%s: %w", path, errNoType)
	}
	if types&tNumber != 0 {
		types &^= tInteger // a number covers the integers
	}
	var kids []int32
	for i, name := range typeNames {
		if types&(1<<i) == 0 {
			continue
		}
		n, err := c.typed(s, name, md)
		if err != nil {
			return 0, err
		}
		kids = append(kids, n)
	}
	if len(kids) == 1 {
		return kids[0], nil
	}
	return c.g.choice(false, kids...), nil
}

// types reads "type"; without it, the types its keywords are about (an untyped schema with
// "properties" is meant to be an object), or any.
func (c *compiler) types(s *schema) (uint8, error) {
	raw, ok := s.m["type"]
	if !ok {
		var t uint8
		for k, bit := range map[string]uint8{"properties": tObject, "required": tObject, "additionalProperties": tObject,
			"items": tArray, "prefixItems": tArray, "minItems": tArray, "maxItems": tArray,
			"minLength": tString, "maxLength": tString, "pattern": tString, "format": tString,
			"minimum": tNumber, "maximum": tNumber, "exclusiveMinimum": tNumber, "exclusiveMaximum": tNumber} {
			if s.has(k) {
				t |= bit
			}
		}
		if t == 0 {
			t = tAll
		}
		return t, nil
	}
	var names []string
	var one string
	if json.Unmarshal(raw, &one) == nil {
		names = []string{one}
	} else if json.Unmarshal(raw, &names) != nil {
		return 0, fmt.Errorf("%s: type must be a string or an array of strings", s.path)
	}
	var t uint8
	for _, n := range names {
		i := slices.Index(typeNames, n)
		if i < 0 {
			return 0, fmt.Errorf("%s: unknown type %q", s.path, n)
		}
		t |= 1 << i
	}
	return t, nil
}

func (c *compiler) typed(s *schema, name string, md mode) (int32, error) {
	switch name {
	case "string":
		return c.str(s, md)
	case "integer", "number":
		return c.number(s, name == "integer")
	case "boolean":
		d, _ := wordsDFA([]string{"true", "false"}, nil)
		return c.g.leaf(d), nil
	case "null":
		return c.g.lit("null"), nil
	case "object":
		return c.object(s, md)
	}
	return c.array(s, md)
}

func (c *compiler) branches(s *schema, k string, md mode) (int32, error) {
	var subs []json.RawMessage
	if json.Unmarshal(s.m[k], &subs) != nil || len(subs) == 0 {
		return 0, fmt.Errorf("%s: %s must be a non-empty array", s.path, k)
	}
	var kids []int32
	for i, sub := range subs {
		n, err := c.compile(sub, fmt.Sprintf("%s/%s/%d", s.path, k, i), md)
		if errors.Is(err, errNoType) {
			continue // a branch of a type this place cannot hold
		}
		if err != nil {
			return 0, err
		}
		kids = append(kids, n)
	}
	if len(kids) == 0 {
		return 0, fmt.Errorf("%s: %w in any %s branch", s.path, errNoType, k)
	}
	n := c.g.choice(k == "oneOf", kids...)
	c.g.nodes[n].where = s.path
	return n, nil
}

// kRef marks a $ref target still being compiled.
const kRef kind = 255

func (c *compiler) ref(s *schema, md mode) (int32, error) {
	var ref string
	if json.Unmarshal(s.m["$ref"], &ref) != nil {
		return 0, fmt.Errorf("%s: $ref must be a string", s.path)
	}
	if ref != "#" && !strings.HasPrefix(ref, "#/") {
		return 0, fmt.Errorf("%s: $ref %q is not supported (only local references: #, #/$defs/…, #/definitions/…)", s.path, ref)
	}
	key := md.key() + ref
	if n, ok := c.refs[key]; ok {
		return n, nil
	}
	target, err := c.resolve(ref)
	if err != nil {
		return 0, fmt.Errorf("%s: $ref %q: %v", s.path, ref, err)
	}
	ph := c.g.add(node{kind: kRef})
	c.refs[key] = ph
	n, err := c.compile(target, ref, md)
	if err != nil {
		return 0, err
	}
	if c.g.nodes[n].kind != kRef {
		c.g.nodes[ph] = c.g.nodes[n]
	}
	return ph, nil
}

// resolve follows a JSON pointer in the document.
func (c *compiler) resolve(ref string) (json.RawMessage, error) {
	cur := c.doc
	if ref == "#" {
		return cur, nil
	}
	for _, tok := range strings.Split(ref[2:], "/") {
		tok, err := url.PathUnescape(tok)
		if err != nil {
			return nil, err
		}
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		ms, err := members(cur)
		if err != nil {
			var arr []json.RawMessage
			i, aerr := strconv.Atoi(tok)
			if json.Unmarshal(cur, &arr) != nil || aerr != nil || i < 0 || i >= len(arr) {
				return nil, errors.New("does not resolve")
			}
			cur = arr[i]
			continue
		}
		found := false
		for _, m := range ms {
			if m.key == tok {
				cur, found = m.val, true
			}
		}
		if !found {
			return nil, errors.New("does not resolve")
		}
	}
	return cur, nil
}

// enum compiles enum and const as literal texts: canonical compact JSON, or raw text.
func (c *compiler) enum(s *schema, md mode) (int32, error) {
	if other := s.constraints("enum", "const", "type"); len(other) > 0 {
		return 0, fmt.Errorf("%s: enum/const next to %s is not supported", s.path, strings.Join(other, ", "))
	}
	var vals []json.RawMessage
	if raw, ok := s.m["const"]; ok {
		vals = append(vals, raw)
	}
	if raw, ok := s.m["enum"]; ok {
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) != nil {
			return 0, fmt.Errorf("%s: enum must be an array", s.path)
		}
		if s.has("const") {
			list = slices.DeleteFunc(list, func(v json.RawMessage) bool { return !jsonEqual(v, vals[0]) })
			vals = vals[:0]
		}
		vals = append(vals, list...)
	}
	types := md.types
	if s.has("type") {
		t, err := c.types(s)
		if err != nil {
			return 0, err
		}
		types &= t
	}
	var words []string
	for _, v := range vals {
		w, t, err := canonical(v)
		if err != nil {
			return 0, fmt.Errorf("%s: enum value %s: %v", s.path, v, err)
		}
		if t&types == 0 && !(t == tInteger && types&tNumber != 0) {
			continue
		}
		if md.raw {
			var str string
			json.Unmarshal(v, &str)
			if strings.Contains(str+"\n", paramEnd) || slices.ContainsFunc(rawForbidden, func(f string) bool { return strings.Contains(str, f) }) {
				continue
			}
			w = str + paramEnd
		}
		if !slices.Contains(words, w) {
			words = append(words, w)
		}
	}
	if len(words) == 0 {
		return 0, fmt.Errorf("%s: %w among the enum values", s.path, errNoType)
	}
	d, err := wordsDFA(words, nil)
	if err != nil {
		return 0, fmt.Errorf("%s: enum: %v", s.path, err)
	}
	return c.g.leaf(d), nil
}

func jsonEqual(a, b json.RawMessage) bool {
	x, _, e1 := canonical(a)
	y, _, e2 := canonical(b)
	return e1 == nil && e2 == nil && x == y
}

// canonical is v as compact JSON with strings re-escaped the one way the grammar writes them;
// t is its type.
func canonical(v json.RawMessage) (string, uint8, error) {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return "", 0, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	var t uint8
	switch x := x.(type) {
	case string:
		t = tString
		enc.Encode(x)
		return strings.TrimSuffix(b.String(), "\n"), t, nil
	case json.Number:
		t = tNumber
		if _, err := strconv.ParseInt(x.String(), 10, 64); err == nil {
			t = tInteger
		}
	case bool:
		t = tBoolean
	case nil:
		t = tNull
	case map[string]any:
		t = tObject
	case []any:
		t = tArray
	}
	if err := json.Compact(&b, v); err != nil {
		return "", 0, err
	}
	return b.String(), t, nil
}

func (c *compiler) intKey(s *schema, k string) (int, bool, error) {
	raw, ok := s.m[k]
	if !ok {
		return 0, false, nil
	}
	var f float64
	if json.Unmarshal(raw, &f) != nil || f < 0 || f != math.Trunc(f) || f > 1<<30 {
		return 0, false, fmt.Errorf("%s: %s must be a non-negative integer", s.path, k)
	}
	return int(f), true, nil
}

func (c *compiler) str(s *schema, md mode) (int32, error) {
	lo, _, err := c.intKey(s, "minLength")
	if err != nil {
		return 0, err
	}
	hi, hasHi, err := c.intKey(s, "maxLength")
	if err != nil {
		return 0, err
	}
	if !hasHi {
		hi = -1
	}
	if hasHi && hi < lo {
		return 0, fmt.Errorf("%s: maxLength %d < minLength %d", s.path, hi, lo)
	}
	var pattern string
	if raw, ok := s.m["pattern"]; ok {
		if json.Unmarshal(raw, &pattern) != nil {
			return 0, fmt.Errorf("%s: pattern must be a string", s.path)
		}
	}
	if raw, ok := s.m["format"]; ok {
		var f string
		json.Unmarshal(raw, &f)
		p, ok := formats[f]
		if !ok {
			return 0, fmt.Errorf("%s: format %q is not supported (supported: date, time, date-time, uuid, email, hostname, ipv4, uri)", s.path, f)
		}
		if pattern != "" {
			return 0, fmt.Errorf("%s: format together with pattern is not supported", s.path)
		}
		pattern = p
	}
	jsonStr, rawVal, _ := free()
	if pattern == "" && !md.raw {
		n := c.g.leaf(jsonStr)
		nd := &c.g.nodes[n]
		nd.minCh, nd.maxCh = int32(lo), int32(hi)
		if lo > 4096 {
			return 0, fmt.Errorf("%s: minLength over 4096 is not supported", s.path)
		}
		if lo > 0 {
			nd.dist = jsonStr.distK(lo)
		}
		return n, nil
	}
	if pattern == "" && lo == 0 && hi < 0 {
		return c.g.leaf(rawVal), nil
	}
	chars := anyChars()
	if pattern != "" {
		if chars, err = compileRegex(pattern); err != nil {
			return 0, fmt.Errorf("%s: %v", s.path, err)
		}
	}
	if md.raw {
		chars.restrict(rawChars)
	}
	if lo > 0 || hi >= 0 {
		if chars, err = chars.withLength(lo, hi); err != nil {
			return 0, fmt.Errorf("%s: pattern %v", s.path, err)
		}
	}
	var d *dfa
	if md.raw {
		d, err = spellRaw(chars)
	} else {
		d, err = spellJSON(chars, false)
	}
	if err != nil {
		return 0, fmt.Errorf("%s: string %v", s.path, err)
	}
	return c.g.leaf(d), nil
}

func (c *compiler) bound(s *schema, k string) (*bound, error) {
	raw, ok := s.m[k]
	if !ok {
		return nil, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		var b bool
		if json.Unmarshal(raw, &b) == nil && strings.HasPrefix(k, "exclusive") {
			return nil, nil // draft 4: a flag on minimum/maximum, read there
		}
		return nil, fmt.Errorf("%s: %s must be a number", s.path, k)
	}
	return &bound{v: f}, nil
}

func (c *compiler) number(s *schema, integer bool) (int32, error) {
	var lim [2]*bound
	for i, side := range []string{"minimum", "maximum"} {
		b, err := c.bound(s, side)
		if err != nil {
			return 0, err
		}
		ex := "exclusiveM" + side[1:]
		var flag bool
		if raw, ok := s.m[ex]; ok && json.Unmarshal(raw, &flag) == nil {
			if b != nil {
				b.exclusive = flag
			}
		} else if e, err := c.bound(s, ex); err != nil {
			return 0, err
		} else if e != nil {
			e.exclusive = true
			// the tighter of the two
			if b == nil || i == 0 && e.v >= b.v || i == 1 && e.v <= b.v {
				b = e
			}
		}
		lim[i] = b
	}
	num, err := newNum(integer, lim[0], lim[1])
	if err != nil {
		return 0, fmt.Errorf("%s: %v", s.path, err)
	}
	return c.g.add(node{kind: kNum, num: num, maxCh: -1, open: -1, sep: -1, close: -1, rest: -1}), nil
}

// jsonPunct is the separator of JSON containers: ',' and one optional space.
func (c *compiler) jsonPunct() int32 {
	d, _ := wordsDFA([]string{","}, []bool{true})
	return c.g.leaf(d)
}

func jsonKey(name string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(name)
	return strings.TrimSuffix(buf.String(), "\n") + ":"
}

func (c *compiler) object(s *schema, md mode) (int32, error) {
	var names []member
	if raw, ok := s.m["properties"]; ok {
		var err error
		if names, err = members(raw); err != nil {
			return 0, fmt.Errorf("%s: properties must be an object", s.path)
		}
	}
	var required []string
	if raw, ok := s.m["required"]; ok && json.Unmarshal(raw, &required) != nil {
		return 0, fmt.Errorf("%s: required must be an array of strings", s.path)
	}
	addl, hasAddl := s.m["additionalProperties"]
	addlFalse := hasAddl && string(bytes.TrimSpace(addl)) == "false"
	if !hasAddl || addlFalse {
		addl = json.RawMessage("true")
	}
	if len(names) == 0 && len(required) == 0 && !addlFalse {
		return c.mapOf(addl, s.path+"/additionalProperties", md)
	}
	var props []prop
	seen := map[string]bool{}
	add := func(name string, raw json.RawMessage, path string) error {
		if seen[name] {
			return nil
		}
		seen[name] = true
		v, err := c.compile(raw, path, mode{types: tAll})
		if err != nil {
			return err
		}
		props = append(props, prop{name: name, val: v, suffix: -1, required: slices.Contains(required, name)})
		return nil
	}
	for _, m := range names {
		if err := add(m.key, m.val, s.path+"/properties/"+m.key); err != nil {
			return 0, err
		}
	}
	for _, r := range required {
		if seen[r] {
			continue
		}
		if addlFalse {
			return 0, fmt.Errorf("%s: required property %q is not allowed (additionalProperties is false)", s.path, r)
		}
		if err := add(r, addl, s.path+"/additionalProperties"); err != nil {
			return 0, err
		}
	}
	return c.g.object(props, jsonKey, true, "}", c.g.lit("{"), c.jsonPunct(), false)
}

// mapOf is an object with any keys and values of schema val.
func (c *compiler) mapOf(val json.RawMessage, path string, md mode) (int32, error) {
	v, err := c.compile(val, path, mode{types: tAll})
	if err != nil {
		return 0, err
	}
	jsonStr, _, _ := free()
	colon, _ := wordsDFA([]string{":"}, []bool{true})
	item := c.g.seq(c.g.leaf(jsonStr), c.g.leaf(colon), v)
	return c.g.list(c.g.lit("{"), item, c.jsonPunct(), c.g.lit("}"), 0, -1), nil
}

func (c *compiler) array(s *schema, md mode) (int32, error) {
	lo, _, err := c.intKey(s, "minItems")
	if err != nil {
		return 0, err
	}
	hi, hasHi, err := c.intKey(s, "maxItems")
	if err != nil {
		return 0, err
	}
	if !hasHi {
		hi = -1
	}
	var prefix []int32
	if raw, ok := s.m["prefixItems"]; ok {
		var subs []json.RawMessage
		if json.Unmarshal(raw, &subs) != nil {
			return 0, fmt.Errorf("%s: prefixItems must be an array", s.path)
		}
		for i, sub := range subs {
			n, err := c.compile(sub, fmt.Sprintf("%s/prefixItems/%d", s.path, i), mode{types: tAll})
			if err != nil {
				return 0, err
			}
			prefix = append(prefix, n)
		}
	}
	rest := int32(-1)
	items, ok := s.m["items"]
	switch {
	case ok && bytes.HasPrefix(bytes.TrimSpace(items), []byte("[")):
		return 0, fmt.Errorf("%s: items as an array is not supported (use prefixItems)", s.path)
	case ok && string(bytes.TrimSpace(items)) == "false":
		if hi < 0 || hi > len(prefix) {
			hi = len(prefix)
		}
	default:
		if !ok {
			items = json.RawMessage("true")
		}
		if rest, err = c.compile(items, s.path+"/items", mode{types: tAll}); err != nil {
			return 0, err
		}
	}
	if hi >= 0 && hi < lo {
		return 0, fmt.Errorf("%s: maxItems %d < minItems %d (or items false)", s.path, hi, lo)
	}
	n := c.g.list(c.g.lit("["), rest, c.jsonPunct(), c.g.lit("]"), int32(lo), int32(hi))
	c.g.nodes[n].items = prefix
	return n, nil
}

// anyValue is any JSON value of the mode's types (memoized: it is recursive).
func (c *compiler) anyValue(md mode) (int32, error) {
	if n, ok := c.anys[md.key()]; ok {
		return n, nil
	}
	if md.raw {
		_, rawVal, _ := free()
		n := c.g.leaf(rawVal)
		c.anys[md.key()] = n
		return n, nil
	}
	ph := c.g.add(node{kind: kRef})
	c.anys[md.key()] = ph
	jsonStr, _, _ := free()
	var kids []int32
	for i, name := range typeNames {
		if md.types&(1<<i) == 0 || name == "integer" && md.types&tNumber != 0 {
			continue
		}
		switch name {
		case "string":
			kids = append(kids, c.g.leaf(jsonStr))
		case "object":
			kids = append(kids, c.anyObject(mode{types: tAll}))
		case "array":
			item, _ := c.anyValue(mode{types: tAll})
			kids = append(kids, c.g.list(c.g.lit("["), item, c.jsonPunct(), c.g.lit("]"), 0, -1))
		default:
			n, err := c.typed(&schema{m: map[string]json.RawMessage{}}, name, md)
			if err != nil {
				return 0, err
			}
			kids = append(kids, n)
		}
	}
	n := kids[0]
	if len(kids) > 1 {
		n = c.g.choice(false, kids...)
	}
	c.g.nodes[ph] = c.g.nodes[n]
	return ph, nil
}

func (c *compiler) anyObject(md mode) int32 {
	n, err := c.mapOf(json.RawMessage("true"), "#", md)
	if err != nil {
		panic(err)
	}
	return n
}
