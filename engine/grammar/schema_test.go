package grammar

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestLiteralsAndTypes(t *testing.T) {
	g := mustSchema(t, `{"type":"boolean"}`)
	accepts(t, g, "true", "false")
	rejects(t, g, "tru", "True", "true ", " true", "null")
	g = mustSchema(t, `{"type":"null"}`)
	accepts(t, g, "null")
	rejects(t, g, "nul", "0")
	g = mustSchema(t, `{"type":["string","null"]}`)
	accepts(t, g, `"x"`, "null")
	rejects(t, g, "1", "{}")
}

func TestStrings(t *testing.T) {
	g := mustSchema(t, `{"type":"string"}`)
	accepts(t, g, `""`, `"hello"`, `"a\"b\\c\n\t\u00e9\ud83d\ude00"`, "\"é😀中\"", `"\u001f"`)
	rejects(t, g, `"a`, `"a"b`, "\"a\nb\"", `"\x"`, `"\ud800"`, `"\udc00"`, "\"\xff\"", "\"\xc3\"", `'a'`)
	prefixes(t, g, `"`, `"ab`, "\"\xe4\xb8", `"\u00`)

	g = mustSchema(t, `{"type":"string","minLength":2,"maxLength":3}`)
	accepts(t, g, `"ab"`, `"abc"`, `"éé"`, `"\n\t"`, `"\ud83d\ude00\ud83d\ude00"`)
	rejects(t, g, `"a"`, `"abcd"`, `""`, `"é"`)

	g = mustSchema(t, `{"type":"string","pattern":"^[a-z]{2}[0-9]+$"}`)
	accepts(t, g, `"ab1"`, `"xy0123"`)
	rejects(t, g, `"a1"`, `"ab"`, `"AB1"`, `"ab1x"`)

	g = mustSchema(t, `{"type":"string","pattern":"foo|ba+r"}`) // unanchored: a search
	accepts(t, g, `"foo"`, `"xxfooyy"`, `"baaar!"`)
	rejects(t, g, `"fo"`, `"br"`)

	g = mustSchema(t, `{"type":"string","pattern":"^(\\d{3})-\\w\\s.[^a-c\"]$"}`)
	accepts(t, g, `"123-_ xd"`, `"000-A\tée"`, `"000-A\tx\""`[:0]+`"000-A\tx\\"`[:0]+`"999-z \"d"`)
	rejects(t, g, `"12-a xd"`, `"123-a xa"`, `"123-a x\""`)

	g = mustSchema(t, `{"type":"string","pattern":"^a.c$","maxLength":3}`)
	accepts(t, g, `"abc"`, `"a\"c"`)
	rejects(t, g, "\"a\nc\"")

	g = mustSchema(t, `{"type":"string","format":"date"}`)
	accepts(t, g, `"2024-02-28"`)
	rejects(t, g, `"2024-02-29"`, `"2024-13-01"`, `"24-01-01"`)
	g = mustSchema(t, `{"type":"string","format":"uuid"}`)
	accepts(t, g, `"123e4567-e89b-12d3-a456-426614174000"`)
	rejects(t, g, `"123e4567e89b12d3a456426614174000"`)
}

func TestNumbers(t *testing.T) {
	g := mustSchema(t, `{"type":"integer"}`)
	accepts(t, g, "0", "-1", "1234567", "999999999999999")
	rejects(t, g, "01", "-0", "1.5", "1e3", "-", "+1", "1234567890123456")

	g = mustSchema(t, `{"type":"integer","minimum":-5,"maximum":120}`)
	accepts(t, g, "-5", "0", "9", "99", "120", "100")
	rejects(t, g, "-6", "121", "130", "1000", "-10")
	prefixes(t, g, "-")

	g = mustSchema(t, `{"type":"integer","exclusiveMinimum":10,"exclusiveMaximum":20}`)
	accepts(t, g, "11", "19")
	rejects(t, g, "10", "20", "1", "2", "9")
	prefixes(t, g, "1")

	g = mustSchema(t, `{"type":"integer","minimum":100}`)
	accepts(t, g, "100", "5000")
	rejects(t, g, "99", "-100")
	prefixes(t, g, "1", "10")

	g = mustSchema(t, `{"type":"number"}`)
	accepts(t, g, "0", "-0.5", "3.25", "1e5", "2.5E-3", "-7")
	rejects(t, g, ".5", "1.", "1e", "01.5", "1.5.3")

	g = mustSchema(t, `{"type":"number","minimum":0,"maximum":1}`)
	accepts(t, g, "0", "0.5", "0.999", "1")
	rejects(t, g, "1.5", "-0.5", "2", "1e0")

	g = mustSchema(t, `{"type":"number","exclusiveMinimum":0,"maximum":10}`)
	accepts(t, g, "1", "10", "1.5", "9.99")
	rejects(t, g, "0", "0.5", "10.5", "-1")
}

func TestEnumConst(t *testing.T) {
	g := mustSchema(t, `{"enum":["red","green",1,10,null,{"a":[1]}]}`)
	accepts(t, g, `"red"`, `"green"`, "1", "10", "null", `{"a":[1]}`)
	rejects(t, g, `"blue"`, "100", `"gre"`, "0")
	g = mustSchema(t, `{"type":"string","enum":["a","b",3]}`)
	accepts(t, g, `"a"`)
	rejects(t, g, "3")
	g = mustSchema(t, `{"const":"x\"y"}`)
	accepts(t, g, `"x\"y"`)
	rejects(t, g, `"x"`)
}

func TestObjects(t *testing.T) {
	g := mustSchema(t, `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},"required":["b"]}`)
	accepts(t, g, `{"b":"x"}`, `{"a":1,"b":"x"}`, `{"a": 1, "b": "x", "c": true}`, `{"b":"x","c":false}`)
	rejects(t, g, `{}`, `{"a":1}`, `{"b":"x","a":1}`, `{"b":"x","d":1}`, `{"b":"x",}`, `{"b":"x"} `,
		`{ "b":"x"}`, `{"b" :"x"}`, `{"b":  "x"}`, `{"a":1,,"b":"x"}`)
	prefixes(t, g, `{`, `{"a":1,`, `{"b":"x"`)

	g = mustSchema(t, `{"type":"object","properties":{},"additionalProperties":false}`)
	accepts(t, g, `{}`)
	rejects(t, g, `{"a":1}`)

	g = mustSchema(t, `{"type":"object"}`) // free keys
	accepts(t, g, `{}`, `{"k":1}`, `{"k": [1, {"x": null}], "k": "v"}`)
	rejects(t, g, `{"k"}`, `{1:2}`, `[]`)

	g = mustSchema(t, `{"type":"object","additionalProperties":{"type":"integer"}}`)
	accepts(t, g, `{"x":1,"y":2}`)
	rejects(t, g, `{"x":"1"}`)

	g = mustSchema(t, `{"properties":{"z":{"type":"null"}},"required":["z","extra"]}`)
	accepts(t, g, `{"z":null,"extra":[]}`)
	rejects(t, g, `{"z":null}`)
}

func TestArrays(t *testing.T) {
	g := mustSchema(t, `{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3}`)
	accepts(t, g, "[1]", "[1,2]", "[1, 2, 3]")
	rejects(t, g, "[]", "[1,2,3,4]", "[1,]", `["a"]`, "[ 1]", "[1 ]")
	g = mustSchema(t, `{"type":"array","prefixItems":[{"type":"string"},{"type":"boolean"}],"items":false}`)
	accepts(t, g, "[]", `["a"]`, `["a",true]`)
	rejects(t, g, `[true]`, `["a",true,1]`)
	g = mustSchema(t, `{"type":"array"}`)
	accepts(t, g, "[]", `[1,"a",[],{}]`)
}

func TestCombinators(t *testing.T) {
	g := mustSchema(t, `{"anyOf":[{"type":"string","maxLength":2},{"type":"integer"},{"type":"string"}]}`)
	accepts(t, g, `"ab"`, "12")
	rejects(t, g, `"abc"`) // the third branch starts like the first: dropped
	g = mustSchema(t, `{"oneOf":[{"type":"string"},{"type":"array","items":{"type":"string"}}]}`)
	accepts(t, g, `"a"`, `["a","b"]`)
	g = mustSchema(t, `{"allOf":[{"type":"integer","maximum":3}],"description":"d"}`)
	accepts(t, g, "3")
	rejects(t, g, "4")
}

func TestRefs(t *testing.T) {
	g := mustSchema(t, `{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},"$ref":"#/$defs/node"}`)
	accepts(t, g, `{"v":1}`, `{"v":1,"kids":[{"v":2,"kids":[]},{"v":3,"kids":[{"v":4}]}]}`)
	rejects(t, g, `{"v":1,"kids":[{}]}`)
	g = mustSchema(t, `{"definitions":{"a~b":{"type":"integer"}},"type":"object","properties":{"x":{"$ref":"#/definitions/a~0b"}},"required":["x"]}`)
	accepts(t, g, `{"x":5}`)
	g = mustSchema(t, `{"type":"array","items":{"anyOf":[{"$ref":"#"},{"type":"integer"}]}}`)
	accepts(t, g, `[1,[2,[]],3]`)
}

func TestCompileErrors(t *testing.T) {
	for _, c := range []struct{ schema, want string }{
		{`{"type":"integer","multipleOf":2}`, "multipleOf"},
		{`{"not":{"type":"string"}}`, "not"},
		{`{"if":{"type":"string"},"then":{},"else":{}}`, "else, if, then"},
		{`{"oneOf":[{"type":"object"},{"type":"object","properties":{"a":{}}}]}`, "oneOf branches are not provably disjoint"},
		{`{"$ref":"https://example.com/s.json"}`, "only local references"},
		{`{"$ref":"#/$defs/missing"}`, "does not resolve"},
		{`{"type":"string","format":"ipv6"}`, `format "ipv6"`},
		{`{"type":"string","pattern":"(?=a)b"}`, "lookaround"},
		{`{"type":"string","pattern":"(a)\\1"}`, `\1`},
		{`{"type":"string","pattern":"\\bx"}`, `\b`},
		{`{"type":"integer","minimum":5,"maximum":4}`, "no integer"},
		{`{"type":"array","minItems":3,"maxItems":2}`, "maxItems"},
		{`{"type":"object","properties":{"a":{"uniqueItems":true}}}`, "#/properties/a: unsupported JSON Schema keyword(s): uniqueItems"},
		{`{"type":"object","properties":{"n":{"$ref":"#/properties/n"}},"required":["n"]}`, "circular"},
		{`{"$defs":{"a":{"type":"object","properties":{"a":{"$ref":"#/$defs/a"}},"required":["a"]}},"$ref":"#/$defs/a"}`, "no finite value"},
		{`{"type":"object","properties":{"a":{}},"required":["b"],"additionalProperties":false}`, `required property "b"`},
		{`false`, "admits no value"},
		{`{"type":"strin"}`, "unknown type"},
	} {
		_, err := CompileJSONSchema(json.RawMessage(c.schema))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to mention %q", c.schema, err, c.want)
		}
	}
}
